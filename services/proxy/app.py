"""The proxy's ASGI application: the handler chain of k8s.io/apiserver's endpoints/filters.

request deadline (not for long-running requests) -> RequestInfo -> body limit -> authentication
-> impersonation -> priority and fairness -> authorization
-> routing (registry for locally served group-versions; a remote APIService's server otherwise,
   through aggregator/proxy.py).
"""
from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

import grpc
from prometheus_client import CONTENT_TYPE_LATEST

from apiary_pb import apf_pb2_grpc as fgrpc
from apiary_pb import auth_pb2_grpc as agrpc
from apiary_pb import envelope_pb2 as pb
from apiary_pb import registry_pb2_grpc as rgrpc
from services.apiserver import requestinfo
from services.apiserver.negotiation import APPLY_PATCH, negotiate_output
from services.apiserver.requestinfo import RequestInfo
from services.common import auditid, pacing, runtime
from services.common.errors import APIError, BadRequest, InternalError, NotFound, ServiceUnavailable
from services.common.informer import Informer
from services.common.metrics import exposition as metrics_exposition

from . import metrics
from .aggregator import Aggregator
from .context import ClientDisconnected, Context
from .decoder import BodyDecoder
from .discovery import VERSION_INFO, Discovery
from .filters.apf import MAX_MUTATING_REQUESTS_INFLIGHT, MAX_REQUESTS_INFLIGHT, Seat, SeatClient
from .filters.authn import Authenticator, bearer_token
from .auditing import metrics as audit_metrics
from .filters import audit
from .filters.audit import Auditor
from .filters.authz import Authorizer, forbidden_error
from .filters.impersonation import Impersonator
from .filters.requestheader import RequestHeaderConfig
from .filters.timeout import (MIN_REQUEST_TIMEOUT, REQUEST_TIMEOUT, TIMEOUT_BODY, TIMEOUT_CONTENT_TYPE,
                              Deadlines, long_running, request_timeout)
from .handlers.resource import ResourceHandler, api_request
from .handlers.watch import WatchHandler, watch_timeout
from .encoding import for_kind
from .authz_invalidation import AuthzCacheInvalidator

log = logging.getLogger("services.proxy")

ReadyCheck = Callable[[], Awaitable[bool]]
_HEALTH_PREFIXES = ("/healthz", "/livez", "/readyz")
_BODY_METHODS = frozenset(("POST", "PUT", "PATCH", "DELETE"))
_READ_METHODS = frozenset(("GET", "HEAD", "OPTIONS"))
_NOT_FOUND_TEXT = b"404 page not found\n"


def _channel_ready(channel: grpc.aio.Channel | None) -> ReadyCheck:
    """The peer is reachable: the channel is connected, or connects within a second."""
    async def check() -> bool:
        if channel is None:
            return True
        try:
            await asyncio.wait_for(channel.channel_ready(), 1.0)
        except TimeoutError:
            return False
        return True
    return check


class ProxyApp:
    """The handler chain, as an ASGI callable (`app`, what the server serves, is this object)."""

    def __init__(self, auth: agrpc.AuthStub, apf: fgrpc.FlowControlStub, registry: rgrpc.RegistryStub, *,
                 channels: dict[str, grpc.aio.Channel] | None = None, verbosity: int = 0,
                 registry_replicas: int = 1,
                 request_header: RequestHeaderConfig | None = None,
                 max_requests_inflight: int = MAX_REQUESTS_INFLIGHT,
                 max_mutating_requests_inflight: int = MAX_MUTATING_REQUESTS_INFLIGHT,
                 request_timeout: float = REQUEST_TIMEOUT, min_request_timeout: float = MIN_REQUEST_TIMEOUT,
                 auditor: Auditor | None = None, proxy_client_cert_file: str = "",
                 proxy_client_key_file: str = "") -> None:
        channels = channels or {}
        self.auditor = auditor
        self.verbosity = verbosity
        self.request_timeout = request_timeout
        self.deadlines = Deadlines()
        self.authn = Authenticator(auth, request_header=request_header)
        self.apf = SeatClient(apf, channels.get("apf"), max_requests_inflight=max_requests_inflight,
                              max_mutating_requests_inflight=max_mutating_requests_inflight)
        self.authz = Authorizer(auth)
        self.impersonator = Impersonator(self.authz)
        # Not a readiness check: until the registry serves RBAC, decisions just keep a short TTL.
        self.authz_invalidation = AuthzCacheInvalidator(registry, self.authz)
        self.discovery = Discovery(registry)
        self.apiservices = Informer(registry, "apiregistration.k8s.io", "v1", "apiservices")
        self.apiservices.add_handler(lambda *_: self.discovery.invalidate())
        # remote APIServices: forwarding, availability, their discovery (kube-aggregator)
        self.aggregator = Aggregator(registry, self.apiservices, self.discovery, proxy_client_cert_file,
                                     proxy_client_key_file)
        # The registry call's own timeout is a backstop: the request's deadline (checked every
        # Deadlines.tick) comes first and answers with kube's Status.
        self.resources = ResourceHandler(registry, request_timeout + 1.0, registry_replicas)
        self.decoder = BodyDecoder()
        self.watches = WatchHandler(registry, min_request_timeout, registry_replicas)
        self.checks: dict[str, ReadyCheck] = {
            "registry": _channel_ready(channels.get("registry")),
            "auth": _channel_ready(channels.get("auth")),
            # not the apf channel: without it the proxy serves under max-in-flight limits
            "apf": self._apf_ready,
            "apiservice-informer": self._informer_synced,
            # the Services, Endpoints and EndpointSlices that remote APIServices resolve through
            "aggregator-informers": self._aggregator_synced,
            "discovery": self._discovery_loaded,
        }
        # Served as it is: every path goes through the same handler chain, which answers every
        # error itself, so a framework's router and error middleware would only add a hop per send.
        self.app = self

    async def _apf_ready(self) -> bool:
        return self.apf.ready()

    async def _informer_synced(self) -> bool:
        return self.apiservices.synced.is_set()

    async def _aggregator_synced(self) -> bool:
        return self.aggregator.synced()

    async def _discovery_loaded(self) -> bool:
        return self.discovery.loaded.is_set()

    def start(self) -> None:
        self.decoder.start()
        self.apf.start()
        self.discovery.start()
        self.apiservices.start()
        self.aggregator.start()
        self.authz_invalidation.start()

    def begin_shutdown(self) -> None:
        """End every open watch; called when the stop signal arrives, before the server drains."""
        self.watches.close_all()

    async def stop(self) -> None:
        self.watches.close_all()
        await self.deadlines.stop()
        await self.authz_invalidation.stop()
        await self.aggregator.stop()
        await self.apiservices.stop()
        await self.discovery.stop()
        await self.apf.stop()
        self.decoder.stop()

    async def readiness(self) -> tuple[bool, str]:
        ok, lines = True, ["[+]ping ok"]
        for name, check in self.checks.items():
            try:
                good = await check()
            except Exception:  # noqa: BLE001 - a failing check is a failed check
                good = False
            ok = ok and good
            lines.append(f"[+]{name} ok" if good else f"[-]{name} failed: reason withheld")
        lines.append("readyz check passed" if ok else "readyz check failed")
        return ok, "\n".join(lines) + "\n"

    # the chain ---------------------------------------------------------------------------

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return  # lifespan is off; no websockets
        ctx = Context(scope, receive, send)
        auditid.AUDIT_ID.set(ctx.audit_id)  # this request's task: every hop and log line carries it
        method = ctx.method
        inflight = metrics.READ_ONLY if method in _READ_METHODS else metrics.MUTATING
        inflight.inc()
        info: RequestInfo | None = None
        seat: Seat | None = None
        user_name = ""
        apply = False
        failure: APIError | None = None
        panic = False
        # large answers in this process give way while it is in flight (pacing.py); a watch, and
        # a LIST once its parts come, no longer count
        small = pacing.begin()
        # 0. the request's deadline (--request-timeout), counted from its arrival
        task: asyncio.Task[Any] = asyncio.current_task()  # type: ignore[assignment]
        arrived = asyncio.get_running_loop().time()
        self.deadlines.set(task, arrived + self.request_timeout)
        try:
            try:
                if ctx.path.startswith(_HEALTH_PREFIXES):
                    await self._health(ctx)
                    return
                # 1. RequestInfo, and who serves it
                query = requestinfo.parse_query(ctx.query_string)
                try:
                    info = requestinfo.parse(method, ctx.path, query)
                except ValueError as e:
                    raise BadRequest(str(e)) from None
                remote = self.aggregator.remote_apiservice(info)
                # 2. body limit (the declared size first, then what actually arrives); a remote
                # APIService's body streams to its server instead, which sets its own limits
                body = b""
                if remote is None:
                    body = await ctx.read_body() if method in _BODY_METHODS else b""
                    ctx.watch_disconnect()
                # the deadline the request implies (none for a watch)
                if long_running(info):
                    self.deadlines.set(task, None)
                    small.end()
                elif "timeout" in query:
                    self.deadlines.set(task, arrived + request_timeout(query, self.request_timeout))
                # 3. authentication
                t = time.perf_counter()
                user = await self.authn.authenticate(bearer_token(ctx.headers), ctx.client_cert,
                                                     ctx.raw_headers, ctx.path)
                user_name = user.name
                t = ctx.timing("authn", t)
                # 3a. audit: the policy sees the authenticated user
                if self.auditor is not None and not self._audit(ctx, info, user):
                    audit_metrics.REQUEST_REJECTED.inc()  # blocking-strict: kube fails the request
                    raise InternalError("Internal error occurred: failed to store audit event")
                # 3b. impersonation: from here on the request acts as the impersonated user
                if ctx.impersonation:
                    user = await self.impersonator.impersonate(user, ctx.impersonation)
                    user_name = f"{user_name} as {user.name}"
                    if ctx.audit is not None:
                        ctx.audit.impersonated(user)
                    t = ctx.timing("impersonation", t)
                # 4. priority and fairness
                seat = await ctx.race(self.apf.acquire(pb.RequestAttributes(
                    user=user, verb=info.verb, resource_request=info.is_resource_request,
                    api_group=info.api_group, resource=info.resource, subresource=info.subresource,
                    namespace=info.namespace, name=info.name, path=info.path)))
                ctx.extra_headers.extend(seat.headers())
                t = ctx.timing("apf", t)
                # 5. authorization
                allowed, reason = await self.authz.decide(user, info)
                if ctx.audit is not None:
                    ctx.audit.authorized(allowed, reason)
                if not allowed:
                    raise forbidden_error(user.name, info, reason)
                ctx.timing("authz", t)
                # 6. routing
                if remote is not None:
                    if long_running(info):
                        # a watch's seat goes as it starts, as for the registry's watches
                        self.apf.release(seat)
                        seat = None
                    await self.aggregator.forward(ctx, remote, user, method in _BODY_METHODS)
                elif info.is_resource_request:
                    apply = await self._resource(ctx, info, user, query, body, seat)
                else:
                    await self._non_resource(ctx, query)
            except ClientDisconnected:
                ctx.code = 499
            except APIError as e:
                failure = e
                if e.audit_annotations and ctx.audit is not None:  # a refusal's admission annotations
                    ctx.audit.annotations.update(e.audit_annotations)
                if e.code == 401 and self.auditor is not None and info is not None:
                    self._audit(ctx, info, None)  # kube audits failed authentication too
                await ctx.error(e)
            except Exception as e:  # noqa: BLE001 - never crash: answer 500
                log.exception("%s %s failed", method, ctx.path)
                failure, panic = InternalError(f"an error on the server ({type(e).__name__}) has "
                                               "prevented the request from succeeding"), True
                await ctx.error(failure)
        except asyncio.CancelledError:  # the deadline passed (or the server is stopping)
            if not self.deadlines.expired(task):
                raise
            task.uncancel()
            await self._timed_out(ctx)
        finally:
            small.end()
            self.deadlines.clear(task)
            if ctx.audit is not None:
                self._audit_complete(ctx, failure, panic)
            if seat is not None:
                self.apf.release(seat)
            if ctx.connection_lost():
                # the lost connection's buffers (counted when it was lost) are freed with this request,
                # whose scope holds the transport: the trim waits for the last of a burst of them
                runtime.postpone_trim()
            ctx.close()
            inflight.dec()
            elapsed = time.perf_counter() - ctx.started
            metrics.observe(info, method, ctx.code or 500, elapsed, apply)
            if self.verbosity >= 2:
                qs = ctx.query_string.decode("latin-1")
                log.info('%s %s%s code=%d user="%s" %.1fms', method, ctx.path,  # + audit-id (LogFilter)
                         f"?{qs}" if qs else "", ctx.code, user_name, elapsed * 1000)

    @staticmethod
    async def _timed_out(ctx: Context) -> None:
        """Past the deadline: 504 as kube's timeout filter writes it, or, with the answer already
        started, the connection closed under it."""
        if ctx.response_started:
            await ctx.abort()
            return
        ctx.code = 504
        ctx.response_started = True
        await ctx.send({"type": "http.response.start", "status": 504, "headers": [
            (b"content-type", TIMEOUT_CONTENT_TYPE.encode()), (b"audit-id", ctx.audit_id.encode()),
            (b"content-length", str(len(TIMEOUT_BODY)).encode())]})
        await ctx.send({"type": "http.response.body", "body": TIMEOUT_BODY})

    def _audit(self, ctx: Context, info: RequestInfo, user: pb.UserInfo | None) -> bool:
        """Begin the request's audit event; False when its RequestReceived stage could not be stored."""
        assert self.auditor is not None
        qs = ctx.query_string.decode("latin-1")
        forwarded, agent = [], ""
        for k, v in ctx.raw_headers:
            if k == b"x-forwarded-for":
                forwarded += [ip.strip() for ip in v.decode("latin-1").split(",") if ip.strip()]
            elif k == b"user-agent":
                agent = v.decode("latin-1")
        client = ctx.scope.get("client")
        if client and client[0] not in forwarded:
            forwarded.append(client[0])
        ev = self.auditor.begin(ctx.audit_id, info, user, f"{ctx.path}?{qs}" if qs else ctx.path, forwarded,
                                agent, audit.now())
        if ev is None:
            return True
        ctx.audit = ev
        if ev.wants_response and info.verb != "watch":
            ctx.response_chunks = []
        return ev.stage("RequestReceived")

    @staticmethod
    def _audit_complete(ctx: Context, failure: APIError | None, panic: bool) -> None:
        ev = ctx.audit
        assert ev is not None
        if ctx.response_chunks:
            ev.set_response(b"".join(ctx.response_chunks))
        code = failure.code if failure is not None and not ctx.response_started else (ctx.code or 500)
        ev.stage("Panic" if panic else "ResponseComplete", code,
                 failure if failure is not None and code >= 400 else None)

    async def _health(self, ctx: Context) -> None:
        if ctx.path.startswith("/readyz"):
            ok, text = await self.readiness()
            verbose = b"verbose" in ctx.query_string
            body = text.encode() if (verbose or not ok) else b"ok"
            await ctx.respond(200 if ok else 500, body, "text/plain; charset=utf-8",
                              [(b"x-content-type-options", b"nosniff")])
        else:
            await ctx.respond(200, b"ok", "text/plain; charset=utf-8",
                              [(b"x-content-type-options", b"nosniff")])

    async def _non_resource(self, ctx: Context, query: dict[str, str]) -> None:
        path = ctx.path
        if path == "/version" or path == "/version/":
            await ctx.respond(200, VERSION_INFO)
            return
        if path == "/metrics":
            await ctx.respond(200, metrics_exposition(), CONTENT_TYPE_LATEST)
            return
        if path in ("/api", "/apis", "/openapi") or path.startswith(("/api/", "/apis/", "/openapi/")):
            if not self.discovery.loaded.is_set():
                raise ServiceUnavailable("discovery information is not available yet",
                                         headers={"Retry-After": "1"}, details={"retryAfterSeconds": 1})
            doc = self.discovery.lookup(path, ctx.header(b"accept"), query, ctx.header(b"if-none-match"))
            if doc is not None:
                await ctx.respond(doc.code, doc.body, doc.content_type, doc.headers)
                return
        await ctx.respond(404, _NOT_FOUND_TEXT, "text/plain; charset=utf-8",
                          [(b"x-content-type-options", b"nosniff")])

    def _check_served(self, info: RequestInfo) -> None:
        """Whether the registry serves this group-version (remote APIServices never come here)."""
        if info.api_prefix == "api":
            if info.api_version != "v1":
                raise NotFound("the server could not find the requested resource")
            return
        if self.apiservices.store.get(f"{info.api_version}.{info.api_group}") is not None:
            return
        # Group-versions the registry serves route there even before their APIService object exists.
        if not self.discovery.serves(info.api_group, info.api_version):
            raise NotFound("the server could not find the requested resource")

    async def _resource(self, ctx: Context, info: RequestInfo, user: pb.UserInfo, query: dict[str, str],
                        body: bytes, seat: Seat) -> bool:
        """Forward to the registry; returns whether this was a server-side apply (for metrics)."""
        if info.verb == "proxy":
            raise NotFound("the server could not find the requested resource")
        self._check_served(info)
        output = negotiate_output(ctx.header(b"accept"))
        if output.format == "protobuf":
            api_version = f"{info.api_group}/{info.api_version}" if info.api_group else info.api_version
            output = for_kind(output, api_version, self.discovery.kind(info.api_group, info.api_version,
                                                                       info.resource))
        ctx.output = output
        if info.verb == "watch":
            timeout = watch_timeout(query, self.watches.min_timeout)
            req = api_request(info, ctx, query, user, table=output.table)
            if timeout >= 1:  # the deadline the watch really has (defaulted here): storage bookmarks before it
                req.query["timeoutSeconds"] = str(int(timeout))

            def started() -> None:
                self.apf.release(seat)
                if ctx.audit is not None:
                    ctx.audit.stage("ResponseStarted", 200)

            with metrics.longrunning(info).track_inprogress():
                await self.watches.handle(ctx, req, timeout, started, output)
            return False
        content_type = ""
        if body or info.verb in ("create", "update", "patch"):
            kind = self.discovery.kind(info.api_group, info.api_version, info.resource)
            body, content_type = await self.decoder.decode(info.verb, ctx.header(b"content-type"), body, kind)
            if ctx.audit is not None:
                ctx.audit.set_request(body)
        req = api_request(info, ctx, query, user, body=body, content_type=content_type, table=output.table)
        await self.resources.handle(ctx, req, output)
        return content_type == APPLY_PATCH

