"""An HTTPS client for a webhook described by a kubeconfig file (kube's webhook.GenericWebhook).

The kubeconfig (services/apiserver/kubeconfig.py) gives the server URL, the TLS context and the
token; the calls go through the library's client (services/apiserver/httpclient.py), one pool per
webhook. A call that fails (connection, timeout, non-2xx, undecodable answer) raises WebhookError
with the reason.
"""
from __future__ import annotations

from typing import Any

import orjson

from services.apiserver.httpclient import CallError
from services.apiserver.kubeconfig import Config
from services.common import tracing


class WebhookError(Exception):
    pass


class WebhookClient:
    def __init__(self, conn: Config, timeout: float) -> None:
        self.conn = conn
        self._client = conn.client(timeout)

    async def post(self, body: dict[str, Any]) -> dict[str, Any]:
        """The webhook's answer to a review; a sampled request's call in a span of its own (the webhook
        continues the trace: the library's client sends `traceparent`)."""
        if tracing.ENABLED and tracing.recording():
            with tracing.span("Call webhook", {"kind": str(body.get("kind", "")), "url": self.conn.server}) as span:
                answer = await self._post(body)
                if span is not None and isinstance(answer.get("status"), dict):
                    span.set_attributes({k: str(v) for k, v in answer["status"].items()
                                         if k in ("authenticated", "allowed", "denied")})
                return answer
        return await self._post(body)

    async def _post(self, body: dict[str, Any]) -> dict[str, Any]:
        try:
            r = await self._client.post_json("", body)
        except CallError as e:
            raise WebhookError(str(e)) from None
        if not r.ok:
            raise WebhookError(f"the server responded with the status code {r.status} but did not return "
                               f"more information")
        try:
            answer = r.json()
        except orjson.JSONDecodeError as e:
            raise WebhookError(f"couldn't decode the webhook's answer: {e}") from None
        if not isinstance(answer, dict):
            raise WebhookError("couldn't decode the webhook's answer: not an object")
        return answer

    async def aclose(self) -> None:
        await self._client.aclose()
