"""kube-aggregator's proxy handler: a request for a remote APIService, forwarded to its server.

The request has been through authentication, impersonation, priority and fairness and
authorization; it goes to an endpoint of the APIService's Service (resolver.py) over TLS verified
with the APIService's caBundle for the name <service>.<namespace>.svc (or not verified, with
insecureSkipTLSVerify), presenting the front-proxy client certificate, with the user in
X-Remote-User, X-Remote-Uid, X-Remote-Group and X-Remote-Extra-<key> (what the client sent in
those headers, in Impersonate-* or in Authorization is dropped first). Both bodies stream, so a
watch's events reach the client as the server flushes them. One pooled client serves every
APIService with the same TLS configuration.

A traced request's forwarding is a span ("proxy to APIService"; for a watch, until the answer's head
is in) whose `traceparent` the server is sent, so an aggregated server continues the trace (the kit
does for every user: services/kit/chain.py); the client's own `traceparent` and `tracestate` never
reach the server, as kube's WithTracing decides alone whether a client's context is continued.

Forwarding runs on transport.py's lean client (kept-alive HTTP/1.1 connections, pooled per TLS
configuration and per address and server name; aiohttp's client before it cost about 0.45 ms more
of the proxy's CPU per forwarded GET, httpx's ten times that: docs/benchmarks.md); the availability
and discovery probes, a few requests a minute, use the library's client (services/apiserver/httpclient.py).
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

from apiary_pb import envelope_pb2 as pb
from services.apiserver.filters import ClientDisconnected
from services.apiserver.filters.timeout import long_running
from services.apiserver.filters.traces import established
from services.apiserver.httpclient import Client
from services.common import tracing
from services.common.errors import BadRequest, ServiceUnavailable

from ..context import Context
from .resolver import ResolveError, ServiceResolver, Target
from .transport import BackendError, Exchange, Transport

log = logging.getLogger(__name__)

CONNECT_TIMEOUT = 5.0
MAX_CLIENTS = 64
# hop-by-hop headers (RFC 9110 7.6.1), what the transport sets itself (the body's framing) and what
# the proxy answers for itself
_DROP_REQUEST = frozenset((b"connection", b"keep-alive", b"proxy-connection", b"transfer-encoding", b"te",
                           b"trailer", b"upgrade", b"host", b"authorization", b"proxy-authorization",
                           b"content-length", b"traceparent", b"tracestate"))
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


def probe_headers(user: pb.UserInfo, accept: str) -> list[tuple[str, str]]:
    """The headers of a probe asked as `user` (identity_headers), accepting `accept`."""
    return [("accept", accept), *((k.decode(), v.decode()) for k, v in identity_headers(user))]


TLSKey = tuple[bytes, bool]


def tls_key(apiservice: dict[str, Any]) -> TLSKey:
    """What the backend's TLS configuration depends on: the CA bundle and insecureSkipTLSVerify."""
    return ca_bundle(apiservice), bool((apiservice.get("spec") or {}).get("insecureSkipTLSVerify"))


class _LRU(OrderedDict[Any, Any]):
    """Clients by TLS configuration; the least recently used closed beyond MAX_CLIENTS."""

    def get_or_make(self, key: Any, make: Callable[[], Any]) -> Any:
        client = self.get(key)
        if client is not None:
            self.move_to_end(key)
            return client
        client = self[key] = make()
        while len(self) > MAX_CLIENTS:
            _, old = self.popitem(last=False)
            if isinstance(old, Transport):
                old.close()
            else:
                asyncio.ensure_future(old.aclose())
        return client


class Backends:
    """Pooled HTTPS clients, one per TLS configuration (CA bundle, insecure): `transport` forwards
    requests, `client` serves the availability and discovery probes."""

    def __init__(self, cert_file: str = "", key_file: str = "") -> None:
        self.cert_file, self.key_file = cert_file, key_file
        self._clients = _LRU()
        self._transports = _LRU()
        self._contexts: dict[TLSKey, ssl.SSLContext] = {}

    def _tls(self, key: TLSKey) -> ssl.SSLContext:
        ctx = self._contexts.get(key)
        if ctx is None:
            ctx = self._contexts[key] = tls_context(*key, self.cert_file, self.key_file)
            while len(self._contexts) > MAX_CLIENTS:
                del self._contexts[next(iter(self._contexts))]
        return ctx

    def client(self, apiservice: dict[str, Any]) -> Client:
        key = tls_key(apiservice)
        return self._clients.get_or_make(key, lambda: Client(tls=self._tls(key), timeout=None,
                                                             connect_timeout=CONNECT_TIMEOUT))

    def transport(self, apiservice: dict[str, Any]) -> Transport:
        # by the caBundle's text as the APIService carries it: the same string object on every request,
        # so the lookup neither decodes nor hashes it again
        spec = apiservice.get("spec") or {}
        raw = (spec.get("caBundle") or "", bool(spec.get("insecureSkipTLSVerify")))
        return self._transports.get_or_make(raw, lambda: Transport(self._tls(tls_key(apiservice)),
                                                                   connect_timeout=CONNECT_TIMEOUT))

    async def aclose(self) -> None:
        clients, self._clients = list(self._clients.values()), _LRU()
        transports, self._transports = list(self._transports.values()), _LRU()
        for c in clients:
            await c.aclose()
        for t in transports:
            t.close()


def request_target(path: str, query: bytes) -> bytes:
    q = b"?" + query if query else b""
    return quote(path, safe="/:@!$&()*+,;=-._~").encode() + q


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


def _body_length(ctx: Context, chunked: bool) -> int | None:
    """The length to announce for the request body; None: sent chunked, as the client sent it."""
    if chunked:
        return None
    declared = ctx.headers.get(b"content-length")
    if declared is not None:
        try:
            return int(declared)
        except ValueError:
            raise BadRequest(f"invalid Content-Length {declared.decode('latin-1')!r}") from None
    return 0


class RemoteProxy:
    def __init__(self, resolver: ServiceResolver, backends: Backends,
                 on_unreachable: Callable[[str], None] | None = None) -> None:
        self.resolver = resolver
        self.backends = backends
        # told the APIService's name when its server cannot be reached (the availability check reruns)
        self.on_unreachable = on_unreachable
        # identity headers of each UserInfo the authentication cache hands out again and again (the
        # message is held, so its id is not reused while it is here)
        self._identities: dict[int, tuple[pb.UserInfo, list[tuple[bytes, bytes]]]] = {}
        # the answers of long-running requests (watches) being forwarded, cut at shutdown
        self._watches: set[Exchange] = set()
        self._closed = False

    def _identity(self, user: pb.UserInfo) -> list[tuple[bytes, bytes]]:
        hit = self._identities.get(id(user))
        if hit is not None and hit[0] is user:
            return hit[1]
        headers = identity_headers(user)
        for k, v in headers:  # names and groups may come from tokens: Go's transport refuses these too
            if b"\r" in v or b"\n" in v or b"\0" in v:
                raise BackendError(f"invalid header field value for {k.decode('latin-1')!r}")
        if len(self._identities) >= 1024:
            self._identities.clear()
        self._identities[id(user)] = (user, headers)
        return headers

    async def forward(self, ctx: Context, apiservice: dict[str, Any], user: pb.UserInfo,
                      has_body: bool) -> None:
        name = (apiservice.get("metadata") or {}).get("name") or ""
        # the client's headers but hop-by-hop ones and identities, in one pass that also notes an
        # upgrade and a chunked body
        headers = []
        upgrade = connection_upgrade = chunked = False
        for kv in ctx.raw_headers:
            k = kv[0]
            if k in _DROP_REQUEST or k.startswith(_DROP_PREFIXES):
                if k == b"upgrade":
                    upgrade = True
                elif k == b"connection":
                    connection_upgrade = connection_upgrade or b"upgrade" in kv[1].lower()
                elif k == b"transfer-encoding":
                    chunked = True
                continue
            headers.append(kv)
        if upgrade and connection_upgrade:
            raise BadRequest("Upgrade requests are not supported by apiary's aggregation proxy")
        try:
            target = self.resolver.resolve(apiservice)
            headers += self._identity(user)
        except ResolveError as e:
            raise unavailable(name, e.message) from None
        except BackendError as e:
            raise unavailable(name, f"error trying to reach service: {e}") from None
        client = ctx.scope.get("client")
        if client:
            headers.append((b"x-forwarded-for", client[0].encode()))
        length = _body_length(ctx, chunked) if has_body else None
        if not has_body:
            ctx.watch_disconnect()
        transport = self.backends.transport(apiservice)
        # one race for the whole exchange: the client going away (or the deadline) ends both halves
        if tracing.ENABLED:
            await ctx.race(self._traced(ctx, apiservice, name, target, headers, has_body, length, transport))
        else:
            await ctx.race(self._exchange(ctx, name, target, headers, has_body, length, transport))

    async def _traced(self, ctx: Context, apiservice: dict[str, Any], name: str, target: Target,
                      headers: list[tuple[bytes, bytes]], has_body: bool, length: int | None,
                      transport: Transport) -> None:
        """_exchange in the forwarding's span, the server sent its traceparent (the request's own, not
        sampled, when nothing is recorded: the server then follows that decision)."""
        attributes = None
        if tracing.recording():  # else no span is made: nothing to describe
            service = (apiservice.get("spec") or {}).get("service") or {}
            attributes = {"apiservice": name, "service": f"{service.get('namespace', '')}/{service.get('name', '')}",
                          "port": target.port, "address": target.host}
        with tracing.span("proxy to APIService", attributes) as span:
            tp = tracing.traceparent()
            if tp:
                headers.append((b"traceparent", tp.encode()))
            exchange = await self._open(ctx, name, target, headers, has_body, length, transport)
            if span is not None:
                span.set_attribute("http.status_code", exchange.status)
            watch = ctx.info is not None and long_running(ctx.info)
            if not watch:
                await self._relay(ctx, exchange, watch)
                return
        established(exchange.status)  # a long-running answer: its spans cover its setup only
        await self._relay(ctx, exchange, watch)

    async def _exchange(self, ctx: Context, name: str, target: Target, headers: list[tuple[bytes, bytes]],
                        has_body: bool, length: int | None, transport: Transport) -> None:
        exchange = await self._open(ctx, name, target, headers, has_body, length, transport)
        await self._relay(ctx, exchange, ctx.info is not None and long_running(ctx.info))

    async def _open(self, ctx: Context, name: str, target: Target, headers: list[tuple[bytes, bytes]],
                    has_body: bool, length: int | None, transport: Transport) -> Exchange:
        """The request sent and the answer's head in (503 when the server cannot be reached)."""
        try:
            return await transport.request(
                target.host, target.port, target.server_name, ctx.method,
                request_target(ctx.path, ctx.query_string), headers,
                _request_body(ctx) if has_body else None, length)
        except (BackendError, ssl.SSLError, OSError) as e:
            log.info("APIService %s: %s %s to %s:%d failed: %s", name, ctx.method, ctx.path, target.host,
                     target.port, e)
            if self.on_unreachable is not None:
                self.on_unreachable(name)
            raise unavailable(name, f"error trying to reach service: {_why(e)}") from None

    async def _relay(self, ctx: Context, exchange: Exchange, watch: bool) -> None:
        """The answer to the client, as it comes."""
        if watch and self._closed:
            exchange.abort()  # came in after the stop began (a client watching again): cut at once too
        elif watch:
            self._watches.add(exchange)
        try:
            await self._pump(ctx, exchange)
        finally:
            self._watches.discard(exchange)
            # back to the pool when the answer was read to its end; closed otherwise
            exchange.release()

    def close_watches(self) -> None:
        """At shutdown, as the registry's watches end: cut the long-running answers being forwarded, so
        that the server's drain does not wait for them (the client sees its watch cut and watches again,
        on another replica or once this one is back); those that start from now on are cut at once."""
        self._closed = True
        for exchange in list(self._watches):
            exchange.abort()

    @staticmethod
    async def _pump(ctx: Context, exchange: Exchange) -> None:
        content_type = ""
        headers = []
        for kv in exchange.headers:
            if kv[0] in _DROP_RESPONSE:
                if kv[0] == b"content-type":
                    content_type = kv[1].decode("latin-1")
            else:
                headers.append(kv)
        await ctx.start_stream(exchange.status, content_type, headers)
        try:
            while True:
                data, more = await exchange.read()
                if not more:
                    break
                if data:  # a watch's event as the server flushed it
                    await ctx.write(data)
        except (BackendError, OSError) as e:
            # the answer has started: cut the connection so the client never takes a part for the whole
            log.info("%s %s: the aggregated server's answer broke off: %s", ctx.method, ctx.path, e)
            await ctx.abort()
            return
        await ctx.end_stream(data)


def _why(e: BaseException) -> str:
    text = str(e) or type(e).__name__
    cause = e.__cause__ or e.__context__
    if cause is not None and str(cause) and str(cause) not in text:
        text = f"{text}: {cause}"
    return text


