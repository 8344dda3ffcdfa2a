"""Calling a webhook: where (clientConfig.url, or an endpoint of clientConfig.service resolved as the
aggregator resolves an APIService's), over TLS verified with the caBundle, with a timeout (k8s.io/apiserver's
webhook ClientManager). What is sent and how the answer is read is the caller's (an AdmissionReview, a
ConversionReview). A call that gets no answer raises WebhookError with Go's words, which kube's messages quote.
A call made while a request is traced is a span of its trace (the caller names it: "admission webhook",
"conversion webhook", with the webhook's name), and the webhook is sent that span's `traceparent`.
"""
from __future__ import annotations

import asyncio
import base64
import binascii
import ssl
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

from services.apiserver import httpclient
from services.common import tracing
from services.common.serviceresolver import ResolveError, ServiceResolver

Obj = dict[str, Any]
MAX_CLIENTS = 64


class WebhookError(Exception):
    """The webhook could not be called: reason says why in kube's words; sent, whether the request went out
    (False: its Service did not resolve)."""

    def __init__(self, reason: str, sent: bool = False) -> None:
        super().__init__(reason)
        self.reason = reason
        self.sent = sent


class Clients:
    """Pooled keep-alive HTTPS clients (services/apiserver/httpclient.py), one per CA bundle, the least
    recently used closed beyond MAX_CLIENTS."""

    def __init__(self) -> None:
        self._clients: OrderedDict[bytes, httpclient.Client] = OrderedDict()

    def client(self, ca_bundle: bytes) -> httpclient.Client:
        found = self._clients.get(ca_bundle)
        if found is not None:
            self._clients.move_to_end(ca_bundle)
            return found
        ctx = (ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cadata=ca_bundle.decode("latin-1"))
               if ca_bundle else ssl.create_default_context(ssl.Purpose.SERVER_AUTH))
        client = self._clients[ca_bundle] = httpclient.Client(tls=ctx)
        while len(self._clients) > MAX_CLIENTS:
            _, old = self._clients.popitem(last=False)
            asyncio.ensure_future(old.aclose())
        return client

    async def aclose(self) -> None:
        clients, self._clients = list(self._clients.values()), OrderedDict()
        for client in clients:
            await client.aclose()


def ca_bundle(cc: Obj) -> bytes:
    """The clientConfig's caBundle (base64 in JSON); empty: the system's roots."""
    try:
        return base64.b64decode(cc.get("caBundle") or "")
    except (binascii.Error, ValueError):
        return b""


class WebhookClient:
    """POSTs to the webhooks clientConfigs name; Services resolved by `resolver` (None: url only)."""

    def __init__(self, resolver: ServiceResolver | None, clients: Clients | None = None) -> None:
        self.resolver = resolver
        self.clients = clients or Clients()

    def where(self, cc: Obj, timeout: float) -> tuple[str, str]:
        """The URL to POST to (with kube's ?timeout=) and the TLS server name ("" for a URL: its host)."""
        seconds = f"{int(timeout)}s"
        if cc.get("url"):
            url = cc["url"]
            return f"{url}{'&' if '?' in url else '?'}timeout={seconds}", ""
        svc = cc.get("service") or {}
        if self.resolver is None:
            raise WebhookError("services are not resolvable in this server")
        ns, name, port = svc.get("namespace") or "", svc.get("name") or "", int(svc.get("port") or 443)
        try:
            target = self.resolver.pick(ns, name, port)
        except ResolveError as e:
            raise WebhookError(e.message) from None
        host = f"[{target.host}]" if ":" in target.host else target.host
        path = quote(svc.get("path") or "/", safe="/:@!$&()*+,;=-._~")
        return f"https://{host}:{target.port}{path}?timeout={seconds}", target.server_name

    async def post(self, cc: Obj, body: bytes, timeout: float, span: str = "webhook",
                   attributes: Mapping[str, Any] | None = None) -> httpclient.Response:
        """POST the JSON body; the answer, whatever its status. Raises WebhookError when there is none.
        In a recorded trace the call is the span `span` (with `attributes`, the URL and the status)."""
        if tracing.ENABLED and tracing.recording():
            with tracing.span(span, attributes) as s:
                resp = await self._post(cc, body, timeout, s)
                if s is not None:
                    s.set_attribute("http.status_code", resp.status)
                return resp
        return await self._post(cc, body, timeout)

    async def _post(self, cc: Obj, body: bytes, timeout: float, span: Any = None) -> httpclient.Response:
        url, server_name = self.where(cc, timeout)
        if span is not None:
            span.set_attribute("http.url", url)
        try:
            return await self.clients.client(ca_bundle(cc)).post_json(url, body, timeout=timeout,
                                                                       server_name=server_name)
        except httpclient.CallError as e:
            raise WebhookError(str(e), sent=True) from None

    async def aclose(self) -> None:
        await self.clients.aclose()
