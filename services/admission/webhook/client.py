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

import httpx
import orjson

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
    """Pooled HTTPS clients, one per CA bundle, least recently used closed beyond MAX_CLIENTS."""

    def __init__(self) -> None:
        self._clients: OrderedDict[bytes, httpx.AsyncClient] = OrderedDict()

    def client(self, ca_bundle: bytes) -> httpx.AsyncClient:
        client = self._clients.get(ca_bundle)
        if client is not None:
            self._clients.move_to_end(ca_bundle)
            return client
        ctx = (ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cadata=ca_bundle.decode("latin-1"))
               if ca_bundle else ssl.create_default_context(ssl.Purpose.SERVER_AUTH))
        client = httpx.AsyncClient(verify=ctx, follow_redirects=False, trust_env=False,
                                   limits=httpx.Limits(max_keepalive_connections=100, keepalive_expiry=60))
        self._clients[ca_bundle] = client
        while len(self._clients) > MAX_CLIENTS:
            _, old = self._clients.popitem(last=False)
            asyncio.ensure_future(old.aclose())
        return client

    async def aclose(self) -> None:
        clients, self._clients = list(self._clients.values()), OrderedDict()
        for c in clients:
            await c.aclose()


class WebhookCaller:
    def __init__(self, resolver: ServiceResolver | None, clients: Clients | None = None) -> None:
        self.resolver = resolver
        self.clients = clients or Clients()

    def _where(self, hook: Obj) -> tuple[str, dict[str, Any]]:
        """The URL to POST to and the request's extensions (the TLS server name for a Service)."""
        cc = hook.get("clientConfig") or {}
        timeout = int(hook.get("timeoutSeconds") or 10)
        if cc.get("url"):
            url = cc["url"]
            return f"{url}{'&' if '?' in url else '?'}timeout={timeout}s", {}
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
        return (f"https://{host}:{target.port}{path}?timeout={timeout}s",
                {"sni_hostname": target.server_name})

    async def call(self, hook: Obj, request: Obj) -> Obj:
        """POST the AdmissionReview with `request`; the review's response, checked. Raises CallError."""
        name = hook.get("name") or ""
        version = review_version(hook)
        if version is None:
            raise CallError(name, "webhook does not accept v1 or v1beta1 AdmissionReview")
        api_version = f"admission.k8s.io/{version}"
        url, extensions = self._where(hook)
        cc = hook.get("clientConfig") or {}
        try:
            ca = base64.b64decode(cc.get("caBundle") or "")
        except (binascii.Error, ValueError):
            ca = b""
        body = orjson.dumps({"kind": "AdmissionReview", "apiVersion": api_version, "request": request})
        timeout = float(hook.get("timeoutSeconds") or 10)
        shown = url.split("?", 1)[0] if "sni_hostname" not in extensions else url
        try:
            resp = await asyncio.wait_for(self.clients.client(ca).post(
                url, content=body, extensions=extensions, timeout=timeout,
                headers={"Content-Type": "application/json", "Accept": "application/json"}), timeout)
        except (asyncio.TimeoutError, httpx.TimeoutException):
            raise CallError(name, f'failed to call webhook: Post "{shown}": context deadline exceeded') from None
        except (httpx.HTTPError, ssl.SSLError, OSError) as e:
            raise CallError(name, f'failed to call webhook: Post "{shown}": {_reason(e)}') from None
        if resp.status_code < 200 or resp.status_code >= 300:
            text = resp.text.strip()
            raise CallError(name, f"failed to call webhook: the server responded with the status code "
                                  f"{resp.status_code} but did not return more information"
                                  + (f" ({text[:200]})" if text else ""), resp.status_code)
        try:
            review = orjson.loads(resp.content)
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


def _reason(e: BaseException) -> str:
    text = str(e) or type(e).__name__
    cause = e.__cause__ or e.__context__
    while cause is not None and not str(e):
        text = str(cause) or text
        cause = cause.__cause__ or cause.__context__
    if "Connect" in type(e).__name__ and "refused" in text.lower():
        return "connect: connection refused"
    return " ".join(text.split())
