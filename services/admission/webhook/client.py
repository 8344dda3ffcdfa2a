"""Calling a webhook: where (clientConfig.url, or an endpoint of clientConfig.service resolved as the
aggregator resolves an APIService's), over TLS verified with the caBundle, the AdmissionReview sent
(admission.k8s.io/v1, or v1beta1 when that is the only version the webhook names) and its answer read
with kube's checks. Failures to call are CallError (failurePolicy decides); rejections are the
webhook's Status.
"""
from __future__ import annotations

import asyncio
import base64
import binascii
import ssl
from collections import OrderedDict
from typing import Any
from urllib.parse import quote

import orjson

from services.apiserver import httpclient
from services.common.serviceresolver import ResolveError, ServiceResolver

Obj = dict[str, Any]
MAX_CLIENTS = 64
REVIEW_VERSIONS = ("v1", "v1beta1")


class CallError(Exception):
    """kube's ErrCallingWebhook: the webhook could not be called or answered garbage."""

    def __init__(self, webhook: str, reason: str, code: int = 0) -> None:
        super().__init__(f'failed calling webhook "{webhook}": {reason}')
        self.webhook = webhook
        self.reason = reason
        self.code = code


def review_version(hook: Obj) -> str | None:
    """The first of the webhook's admissionReviewVersions that apiary speaks."""
    return next((v for v in hook.get("admissionReviewVersions") or [] if v in REVIEW_VERSIONS), None)


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


class WebhookCaller:
    def __init__(self, resolver: ServiceResolver | None, clients: Clients | None = None) -> None:
        self.resolver = resolver
        self.clients = clients or Clients()

    def _where(self, hook: Obj) -> tuple[str, str]:
        """The URL to POST to and the TLS server name ("" for a URL: its host)."""
        cc = hook.get("clientConfig") or {}
        timeout = int(hook.get("timeoutSeconds") or 10)
        if cc.get("url"):
            url = cc["url"]
            return f"{url}{'&' if '?' in url else '?'}timeout={timeout}s", ""
        svc = cc.get("service") or {}
        if self.resolver is None:
            raise CallError(hook.get("name") or "", "services are not resolvable in this server")
        ns, name, port = svc.get("namespace") or "", svc.get("name") or "", int(svc.get("port") or 443)
        try:
            target = self.resolver.pick(ns, name, port)
        except ResolveError as e:
            raise CallError(hook.get("name") or "", e.message) from None
        host = f"[{target.host}]" if ":" in target.host else target.host
        path = quote(svc.get("path") or "/", safe="/:@!$&()*+,;=-._~")
        return f"https://{host}:{target.port}{path}?timeout={timeout}s", target.server_name

    async def call(self, hook: Obj, request: Obj) -> Obj:
        """POST the AdmissionReview with `request`; the review's response, checked. Raises CallError."""
        name = hook.get("name") or ""
        version = review_version(hook)
        if version is None:
            raise CallError(name, "webhook does not accept v1 or v1beta1 AdmissionReview")
        api_version = f"admission.k8s.io/{version}"
        url, server_name = self._where(hook)
        cc = hook.get("clientConfig") or {}
        try:
            ca = base64.b64decode(cc.get("caBundle") or "")
        except (binascii.Error, ValueError):
            ca = b""
        body = orjson.dumps({"kind": "AdmissionReview", "apiVersion": api_version, "request": request})
        timeout = float(hook.get("timeoutSeconds") or 10)
        try:
            resp = await self.clients.client(ca).post_json(url, body, timeout=timeout, server_name=server_name)
        except httpclient.CallError as e:
            raise CallError(name, f"failed to call webhook: {e}") from None
        status, content = resp.status, resp.content
        if status < 200 or status >= 300:
            text = content.decode("utf-8", "replace").strip()
            raise CallError(name, f"failed to call webhook: the server responded with the status code "
                                  f"{status} but did not return more information"
                                  + (f" ({text[:200]})" if text else ""), status)
        try:
            review = orjson.loads(content)
        except orjson.JSONDecodeError as e:
            raise CallError(name, f"received invalid webhook response: {e}") from None
        if not isinstance(review, dict) or review.get("kind") != "AdmissionReview" \
                or review.get("apiVersion") != api_version:
            got = review.get("apiVersion") if isinstance(review, dict) else None
            kind = review.get("kind") if isinstance(review, dict) else None
            raise CallError(name, f"received invalid webhook response: expected webhook response of "
                                  f"{api_version}, Kind=AdmissionReview, got {got}, Kind={kind}")
        response = review.get("response")
        if not isinstance(response, dict):
            raise CallError(name, "received invalid webhook response: webhook response was absent")
        if version == "v1" and response.get("uid") != request["uid"]:
            raise CallError(name, f"received invalid webhook response: expected response.uid="
                                  f"\"{request['uid']}\", got \"{response.get('uid', '')}\"")
        return response

