"""An HTTPS client for a webhook described by a kubeconfig file (kube's webhook.GenericWebhook).

The kubeconfig (services/apiserver/kubeconfig.py) gives the server URL, the TLS context and the
token. One pooled client per webhook; a call that fails (connection, timeout, non-2xx, undecodable
answer) raises WebhookError with the reason.
"""
from __future__ import annotations

from typing import Any

import httpx
import orjson

from services.apiserver.kubeconfig import Config


class WebhookError(Exception):
    pass


class WebhookClient:
    def __init__(self, conn: Config, timeout: float) -> None:
        self.conn = conn
        self._client = httpx.AsyncClient(verify=conn.ssl, timeout=timeout, headers=conn.headers, trust_env=False)

    async def post(self, body: dict[str, Any]) -> dict[str, Any]:
        try:
            r = await self._client.post(self.conn.server, content=orjson.dumps(body),
                                        headers={"Content-Type": "application/json", "Accept": "application/json"})
        except httpx.TimeoutException:
            raise WebhookError(f"Post \"{self.conn.server}\": context deadline exceeded") from None
        except httpx.HTTPError as e:
            raise WebhookError(f"Post \"{self.conn.server}\": {e or type(e).__name__}") from None
        if not 200 <= r.status_code < 300:
            raise WebhookError(f"the server responded with the status code {r.status_code} but did not return "
                               f"more information")
        try:
            answer = orjson.loads(r.content)
        except orjson.JSONDecodeError as e:
            raise WebhookError(f"couldn't decode the webhook's answer: {e}") from None
        if not isinstance(answer, dict):
            raise WebhookError("couldn't decode the webhook's answer: not an object")
        return answer

    async def aclose(self) -> None:
        await self._client.aclose()
