"""The proxy's ASGI application: its handler chain (build_handler_chain) in front of the routing to
the registry (locally served group-versions) or to a remote APIService's server (aggregator/proxy.py).
"""
from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any

import grpc
from prometheus_client import CONTENT_TYPE_LATEST

from apiary_pb import apf_pb2_grpc as fgrpc
from apiary_pb import auth_pb2_grpc as agrpc
from apiary_pb import registry_pb2_grpc as rgrpc
from services.apiserver.audit.policy import Auditor
from services.apiserver.filters import Handler
from services.apiserver.filters.audit import failed_authentication_audit, with_audit, with_audit_init
from services.apiserver.filters.authentication import with_authentication
from services.apiserver.filters.authorization import with_authorization
from services.apiserver.filters.impersonation import Impersonator, with_impersonation
from services.apiserver.filters.priority_and_fairness import with_priority_and_fairness
from services.apiserver.filters.requestheader import RequestHeaderConfig
from services.apiserver.filters.requestinfo import with_request_info
from services.apiserver.filters.timeout import (
    MIN_REQUEST_TIMEOUT,
    REQUEST_TIMEOUT,
    Deadlines,
    long_running,
    with_request_deadline,
    with_timeout_for_non_long_running_requests,
)
from services.apiserver.filters.traces import established, with_tracing
from services.apiserver.filters.wrap import with_panic_recovery
from services.apiserver.negotiation import APPLY_PATCH, PROTOBUF, negotiate_output
from services.apiserver.requestinfo import RequestInfo, invalid_path_name
from services.common import auditid, runtime
from services.common.errors import BadRequest, NotFound, ServiceUnavailable, UnsupportedMediaType
from services.common.informer import Informer
from services.common.metrics import OPENMETRICS, OPENMETRICS_CONTENT_TYPE
from services.common.metrics import render as render_metrics

from . import metrics
from .aggregator.apiserver import Aggregator
from .authz_invalidation import AuthzCacheInvalidator
from .context import Context
from .decoder import BodyDecoder
from .discovery import VERSION_INFO, Discovery
from .encoding import for_kind
from .filters.apf import MAX_MUTATING_REQUESTS_INFLIGHT, MAX_REQUESTS_INFLIGHT, ExemptObjects, SeatClient
from .filters.apiservice import with_remote_apiservice
from .filters.authn import Authenticator
from .filters.authz import Authorizer
from .filters.body import BODY_METHODS, with_request_body
from .filters.healthz import with_health_checks
from .filters.httplog import with_http_logging
from .handlers.resource import ResourceHandler, api_request
from .handlers.watch import WatchHandler, watch_timeout
from .openidmetadata import PATHS as ISSUER_DISCOVERY_PATHS
from .openidmetadata import IssuerDiscovery

ReadyCheck = Callable[[], Awaitable[bool]]
_NOT_FOUND_TEXT = b"404 page not found\n"
# answered by the apf service (its Dump call); not served without priority and fairness, as in kube
_APF_DUMPS = frozenset(f"/debug/api_priority_and_fairness/{d}" for d in ("dump_priority_levels", "dump_queues",
                                                                          "dump_requests"))


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
    """The proxy's handler chain and what it stands on, as an ASGI callable (`app`, what the server
    serves, is this object)."""

    def __init__(self, auth: agrpc.AuthStub, apf: fgrpc.FlowControlStub, registry: rgrpc.RegistryStub, *,
                 channels: dict[str, grpc.aio.Channel] | None = None, verbosity: int = 0,
                 registry_replicas: int = 1,
                 request_header: RequestHeaderConfig | None = None,
                 max_requests_inflight: int = MAX_REQUESTS_INFLIGHT,
                 max_mutating_requests_inflight: int = MAX_MUTATING_REQUESTS_INFLIGHT,
                 request_timeout: float = REQUEST_TIMEOUT, min_request_timeout: float = MIN_REQUEST_TIMEOUT,
                 auditor: Auditor | None = None, proxy_client_cert_file: str = "",
                 proxy_client_key_file: str = "", external_address: str = "127.0.0.1:6443",
                 enable_priority_and_fairness: bool = True) -> None:
        channels = channels or {}
        self.auditor = auditor
        self.verbosity = verbosity
        self.deadlines = Deadlines(request_timeout)
        self.authn = Authenticator(auth, request_header=request_header)
        self.exempt = ExemptObjects(registry)
        self.apf = SeatClient(apf, channels.get("apf"), max_requests_inflight=max_requests_inflight,
                              max_mutating_requests_inflight=max_mutating_requests_inflight, exempt=self.exempt,
                              enabled=enable_priority_and_fairness,
                              deadline=lambda: self.deadlines.due(asyncio.current_task()))
        self.authz = Authorizer(auth)
        self.impersonator = Impersonator(self.authz)
        # Not a readiness check: until the registry serves RBAC, decisions just keep a short TTL.
        self.authz_invalidation = AuthzCacheInvalidator(registry, self.authz)
        self.discovery = Discovery(registry)
        self.issuer_discovery = IssuerDiscovery(auth, external_address)
        self.apiservices = Informer(registry, "apiregistration.k8s.io", "v1", "apiservices")
        self.apiservices.add_handler(lambda *_: self.discovery.invalidate())
        # a CRD's resources join or leave the registry's discovery without an APIService change (a second CRD
        # of a group, a CRD established or deleted): its events refresh discovery too
        self.crds = Informer(registry, "apiextensions.k8s.io", "v1", "customresourcedefinitions")
        self.crds.add_handler(lambda *_: self.discovery.invalidate())
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
        self.handler = build_handler_chain(self._route, self)
        # Served as it is: every path goes through the same handler chain, which answers every
        # error itself, so a framework's router and error middleware would only add a hop per send.
        self.app = self

    @property
    def request_timeout(self) -> float:
        """--request-timeout: how long a request that is not long-running may take."""
        return self.deadlines.request_timeout

    @request_timeout.setter
    def request_timeout(self, seconds: float) -> None:
        self.deadlines.request_timeout = seconds

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
        self.exempt.start()
        self.apf.start()
        self.discovery.start()
        self.apiservices.start()
        self.crds.start()
        self.aggregator.start()
        self.authz_invalidation.start()

    def begin_shutdown(self) -> None:
        """End every open watch, the registry's and those forwarded to APIService servers; called when
        the stop signal arrives, before the server drains (which would wait for them otherwise)."""
        self.watches.close_all()
        self.aggregator.close_watches()

    async def stop(self) -> None:
        self.watches.close_all()
        await self.deadlines.stop()
        await self.authz_invalidation.stop()
        await self.aggregator.stop()
        await self.crds.stop()
        await self.apiservices.stop()
        await self.discovery.stop()
        await self.apf.stop()
        await self.exempt.stop()
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

    # serving ---------------------------------------------------------------------------

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return  # lifespan is off; no websockets
        ctx = Context(scope, receive, send)
        auditid.AUDIT_ID.set(ctx.audit_id)  # this request's task: every hop and log line carries it
        try:
            await self.handler(ctx)
        finally:
            if ctx.connection_lost():
                # the lost connection's buffers (counted when it was lost) are freed with this request,
                # whose scope holds the transport: the trim waits for the last of a burst of them
                runtime.postpone_trim()
            ctx.close()

    async def _route(self, ctx: Context) -> None:
        """The API handler at the end of the chain: a remote APIService's server, the registry, or
        the proxy's own paths (version, metrics, discovery, OpenAPI)."""
        info = ctx.info
        assert info is not None and ctx.user is not None
        if ctx.remote is not None:
            if long_running(info):
                # a watch's seat goes as it starts, as for the registry's watches
                self.apf.release(ctx.seat)  # type: ignore[arg-type]
            await self.aggregator.forward(ctx, ctx.remote, ctx.user, ctx.method in BODY_METHODS)
        elif info.is_resource_request:
            ctx.apply = await self._resource(ctx, info)
        else:
            await self._non_resource(ctx, ctx.query)

    async def _non_resource(self, ctx: Context, query: dict[str, str]) -> None:
        path = ctx.path
        if path == "/version" or path == "/version/":
            await ctx.respond(200, VERSION_INFO)
            return
        if path == "/":
            await ctx.respond(200, self.discovery.root_paths)
            return
        if path in ISSUER_DISCOVERY_PATHS:
            await self.issuer_discovery.serve(ctx, path)
            return
        if path == "/metrics":
            # OpenMetrics (with the exemplars) when asked for, as a Prometheus scrape does; text otherwise
            if OPENMETRICS in ctx.header(b"accept"):
                await ctx.respond(200, await render_metrics(openmetrics=True), OPENMETRICS_CONTENT_TYPE)
            else:
                await ctx.respond(200, await render_metrics(), CONTENT_TYPE_LATEST)
            return
        if path in _APF_DUMPS and self.apf.enabled:
            text = await self.apf.dump(path.rsplit("/", 1)[1], bool(query.get("includeRequestDetails")))
            await ctx.respond(200, text.encode(), "text/plain; charset=utf-8")
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

    def _custom_group(self, group: str) -> bool:
        """Whether a CustomResourceDefinition defines group's resources."""
        return bool(group) and any((crd.get("spec") or {}).get("group") == group for crd in self.crds.store.values())

    async def _resource(self, ctx: Context, info: RequestInfo) -> bool:
        """Forward to the registry; returns whether this was a server-side apply (for metrics)."""
        user, query, body, seat = ctx.user, ctx.query, ctx.body, ctx.seat
        assert user is not None and seat is not None
        if info.verb == "proxy":
            raise NotFound("the server could not find the requested resource")
        self._check_served(info)
        if bad_name := invalid_path_name(info):
            raise BadRequest(bad_name)
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
                established()  # a watch is traced for its setup only
                if ctx.audit is not None:
                    ctx.audit.stage("ResponseStarted", 200)

            with metrics.longrunning(info).track_inprogress():
                await self.watches.handle(ctx, req, timeout, started, output)
            return False
        content_type = ""
        if body or info.verb in ("create", "update", "patch"):
            kind = self.discovery.kind(info.api_group, info.api_version, info.resource)
            # the content type first: _custom_group walks every CRD, which only a protobuf body needs
            if info.verb in ("create", "update") and \
                    ctx.header(b"content-type").split(";", 1)[0].strip().lower() == PROTOBUF and \
                    self._custom_group(info.api_group):
                # a custom resource's serializers are JSON and YAML only (kube's unstructured negotiation)
                raise UnsupportedMediaType("the body of the request was in an unknown format - accepted media types "
                                           "include: application/json, application/yaml")
            body, content_type = await self.decoder.decode(info.verb, ctx.header(b"content-type"), body, kind)
            if ctx.audit is not None:
                ctx.audit.set_request(body)
        req = api_request(info, ctx, query, user, body=body, content_type=content_type, table=output.table)
        await self.resources.handle(ctx, req, output)
        return content_type == APPLY_PATCH


def build_handler_chain(api_handler: Handler, proxy: ProxyApp) -> Handler:
    """The filters in front of api_handler, outermost first: kube's DefaultBuildHandlerChain (which
    reads bottom to top), with the proxy's own filters in their places."""
    chain: list[Callable[[Handler], Handler]] = [
        partial(with_http_logging, verbosity=proxy.verbosity),  # in-flight metrics, request log
        partial(with_audit_init, auditor=proxy.auditor),  # the audit event ends after the answer
        partial(with_timeout_for_non_long_running_requests, deadlines=proxy.deadlines),  # 504
        with_panic_recovery,  # every error answered once, as kube's Status
        partial(with_health_checks, readiness=proxy.readiness),  # /healthz, /livez, /readyz
        with_request_info,
        partial(with_remote_apiservice, aggregator=proxy.aggregator),  # who serves it
        with_request_body,  # the body limit
        partial(with_request_deadline, deadlines=proxy.deadlines),  # none for a watch; ?timeout=
        partial(with_authentication, authenticator=proxy.authn,
                failed=failed_authentication_audit(proxy.auditor)),
        with_tracing,  # the root span, once the user says whether its traceparent is trusted
        partial(with_audit, auditor=proxy.auditor),  # the policy sees the authenticated user
        partial(with_impersonation, impersonator=proxy.impersonator),
        partial(with_priority_and_fairness, flowcontrol=proxy.apf),
        partial(with_authorization, authorizer=proxy.authz),
    ]
    handler = api_handler
    for wrap in reversed(chain):
        handler = wrap(handler)
    return handler
