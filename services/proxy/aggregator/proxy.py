"""kube-aggregator's proxy handler: a request for a remote APIService, forwarded to its server.

The request has been through authentication, impersonation, priority and fairness and
authorization; it goes to an endpoint of the APIService's Service (resolver.py) over TLS verified
with the APIService's caBundle for the name <service>.<namespace>.svc (or not verified, with
insecureSkipTLSVerify), presenting the front-proxy client certificate, with the user in
X-Remote-User, X-Remote-Uid, X-Remote-Group and X-Remote-Extra-<key> (what the client sent in
those headers, in Impersonate-* or in Authorization is dropped first). Both bodies stream, so a
watch's events reach the client as the server flushes them. One pooled client serves every
APIService with the same TLS configuration.
"""
from __future__ import annotations

import asyncio
import base64
import binascii
import logging
import ssl
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable
from typing import Any
from urllib.parse import quote

import httpx

from apiary_pb import envelope_pb2 as pb
from services.common.errors import BadRequest, ServiceUnavailable

from ..context import ClientDisconnected, Context
from .resolver import ResolveError, ServiceResolver, Target

log = logging.getLogger(__name__)

CONNECT_TIMEOUT = 5.0
MAX_CLIENTS = 64
# hop-by-hop headers (RFC 9110 7.6.1) and what the proxy answers for itself
_DROP_REQUEST = frozenset((b"connection", b"keep-alive", b"proxy-connection", b"transfer-encoding", b"te",
                           b"trailer", b"upgrade", b"host", b"authorization", b"proxy-authorization"))
_DROP_RESPONSE = frozenset((b"connection", b"keep-alive", b"proxy-connection", b"transfer-encoding",
                            b"trailer", b"upgrade", b"content-type", b"audit-id", b"date", b"server"))
_DROP_PREFIXES = (b"x-remote-", b"impersonate-")


def unavailable(name: str, why: str) -> ServiceUnavailable:
    return ServiceUnavailable(f'the server is currently unable to handle the request: APIService "{name}" '
                              f"is unavailable: {why}", headers={"Retry-After": "1"},
                              details={"retryAfterSeconds": 1})


def tls_context(ca_bundle: bytes, insecure: bool, cert_file: str, key_file: str) -> ssl.SSLContext:
    """The backend's TLS: the APIService's CA bundle (system roots without one), hostname checked."""
    ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)
    if insecure:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    elif ca_bundle:
        ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cadata=ca_bundle.decode("latin-1"))
    if cert_file and key_file:
        ctx.load_cert_chain(cert_file, key_file)
    return ctx


def ca_bundle(apiservice: dict[str, Any]) -> bytes:
    raw = (apiservice.get("spec") or {}).get("caBundle") or ""
    try:
        return base64.b64decode(raw)
    except (binascii.Error, ValueError):
        return b""


def identity_headers(user: pb.UserInfo) -> list[tuple[bytes, bytes]]:
    """transport.SetAuthProxyHeaders: the user as the front proxy asserts it."""
    out = [(b"x-remote-user", user.name.encode())]
    if user.uid:
        out.append((b"x-remote-uid", user.uid.encode()))
    out += [(b"x-remote-group", g.encode()) for g in user.groups]
    for key, values in user.extra.items():
        # Go's url.PathEscape, as kube's SetAuthProxyHeaders escapes the key
        header = b"x-remote-extra-" + quote(key, safe="$&+:=@").encode()
        out += [(header, v.encode()) for v in values.values]
    return out


class Backends:
    """Pooled HTTPS clients, one per TLS configuration (CA bundle, insecure), least recently used
    closed beyond MAX_CLIENTS."""

    def __init__(self, cert_file: str = "", key_file: str = "") -> None:
        self.cert_file, self.key_file = cert_file, key_file
        self._clients: OrderedDict[tuple[bytes, bool], httpx.AsyncClient] = OrderedDict()

    def client(self, apiservice: dict[str, Any]) -> httpx.AsyncClient:
        key = (ca_bundle(apiservice), bool((apiservice.get("spec") or {}).get("insecureSkipTLSVerify")))
        client = self._clients.get(key)
        if client is not None:
            self._clients.move_to_end(key)
            return client
        client = httpx.AsyncClient(
            verify=tls_context(*key, self.cert_file, self.key_file),
            timeout=httpx.Timeout(connect=CONNECT_TIMEOUT, read=None, write=None, pool=CONNECT_TIMEOUT),
            limits=httpx.Limits(max_connections=None, max_keepalive_connections=100, keepalive_expiry=60),
            follow_redirects=False, trust_env=False)
        self._clients[key] = client
        while len(self._clients) > MAX_CLIENTS:
            _, old = self._clients.popitem(last=False)
            asyncio.ensure_future(old.aclose())
        return client

    async def aclose(self) -> None:
        clients, self._clients = list(self._clients.values()), OrderedDict()
        for c in clients:
            await c.aclose()


def url_of(target: Target, path: str, query: bytes) -> str:
    host = f"[{target.host}]" if ":" in target.host else target.host
    q = f"?{query.decode('latin-1')}" if query else ""
    return f"https://{host}:{target.port}{quote(path, safe='/:@!$&()*+,;=-._~')}{q}"


async def _request_body(ctx: Context) -> AsyncIterator[bytes]:
    """The client's body as it arrives; once it is all in, the client going away is watched for."""
    while True:
        msg = await ctx.receive()
        if msg["type"] == "http.disconnect":
            raise ClientDisconnected()
        chunk = msg.get("body", b"")
        if chunk:
            yield chunk
        if not msg.get("more_body", False):
            break
    ctx.watch_disconnect()


class RemoteProxy:
    def __init__(self, resolver: ServiceResolver, backends: Backends,
                 on_unreachable: Callable[[str], None] | None = None) -> None:
        self.resolver = resolver
        self.backends = backends
        # told the APIService's name when its server cannot be reached (the availability check reruns)
        self.on_unreachable = on_unreachable

    async def forward(self, ctx: Context, apiservice: dict[str, Any], user: pb.UserInfo,
                      has_body: bool) -> None:
        name = (apiservice.get("metadata") or {}).get("name") or ""
        if any(k == b"upgrade" for k, _ in ctx.raw_headers) and any(
                k == b"connection" and b"upgrade" in v.lower() for k, v in ctx.raw_headers):
            raise BadRequest("Upgrade requests are not supported by apiary's aggregation proxy")
        try:
            target = self.resolver.resolve(apiservice)
        except ResolveError as e:
            raise unavailable(name, e.message) from None
        headers = [(k, v) for k, v in ctx.raw_headers
                   if k not in _DROP_REQUEST and not k.startswith(_DROP_PREFIXES)]
        headers += identity_headers(user)
        client = ctx.scope.get("client")
        if client:
            headers.append((b"x-forwarded-for", client[0].encode()))
        if not has_body:
            ctx.watch_disconnect()
        http = self.backends.client(apiservice)
        request = http.build_request(ctx.method, url_of(target, ctx.path, ctx.query_string), headers=headers,
                                     content=_request_body(ctx) if has_body else None,
                                     extensions={"sni_hostname": target.server_name})
        try:
            response = await ctx.race(http.send(request, stream=True))
        except (httpx.HTTPError, ssl.SSLError, OSError) as e:
            log.info("APIService %s: %s %s to %s:%d failed: %s", name, ctx.method, ctx.path, target.host,
                     target.port, e)
            if self.on_unreachable is not None:
                self.on_unreachable(name)
            raise unavailable(name, f"error trying to reach service: {_why(e)}") from None
        try:
            await ctx.race(self._pump(ctx, response))
        finally:
            await response.aclose()

    @staticmethod
    async def _pump(ctx: Context, response: httpx.Response) -> None:
        headers = [(k.lower(), v) for k, v in response.headers.raw
                   if k.lower() not in _DROP_RESPONSE]
        await ctx.start_stream(response.status_code, response.headers.get("content-type", ""), headers)
        try:
            async for chunk in response.aiter_raw():
                await ctx.write(chunk)
        except httpx.HTTPError as e:
            # the answer has started: cut the connection so the client never takes a part for the whole
            log.info("%s %s: the aggregated server's answer broke off: %s", ctx.method, ctx.path, e)
            await ctx.abort()
            return
        await ctx.end_stream()


def _why(e: BaseException) -> str:
    text = str(e) or type(e).__name__
    cause = e.__cause__ or e.__context__
    if cause is not None and str(cause) and str(cause) not in text:
        text = f"{text}: {cause}"
    return text


