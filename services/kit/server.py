"""APIServer: the kit's HTTPS server for one API group, as a FastAPI application.

Every request passes the kit's handler chain (services.kit.chain: the library's filters, as
sample-apiserver's DefaultBuildHandlerChain: request info, deadline, delegated authentication, the
audit event, delegated authorization except --authorization-always-allow-paths), then either the
lean resource path (the kinds' get/list/watch/create/update/patch/delete, discovery, OpenAPI,
health, metrics: no routing table, no framework objects) or the FastAPI application `server.app`,
where a server adds custom subresources and non-resource routes in FastAPI's idiom. Those routes
find the caller in `request.scope["user"]` (an apiary UserInfo) and may raise APIErrors, which
become Kubernetes Status answers like everywhere else. Every answer carries the request's Audit-Id
and its Server-Timing stages (authn, authz, storage, ...), as the core path's do.
"""
from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import random
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any

import orjson
from fastapi import FastAPI
from fastapi.responses import Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import Request

from apiary_pb import envelope_pb2 as pb
from apiary_pb import registry_pb2 as rpb
from services.apiserver import discovery, httpclient, kubeconfig, negotiation, openapi_v2
from services.apiserver import serving as https
from services.apiserver.audit import options as audit_options
from services.apiserver.audit.policy import Auditor
from services.apiserver.catalogue import Catalogue
from services.apiserver.endpoints.handlers import Admission, Handlers
from services.apiserver.filters import Handler, RequestContext
from services.apiserver.filters.context import warning_headers
from services.apiserver.filters.timeout import Deadlines
from services.apiserver.filters.traces import established
from services.apiserver.requestinfo import RequestInfo, invalid_path_name
from services.common import envelope, runtime, tracing
from services.common.errors import APIError, BadRequest, NotFound
from services.common.informer import Informer

from . import authconfig, openapi
from .admission import PluginAdmission
from .api import AdmissionPlugin, Kind, Obj
from .authconfig import Trust
from .authn import Authenticator
from .authz import Authorizer
from .chain import build_handler_chain
from .context import Context
from .kinds import catalogue, hub
from .lifecycle import NamespaceLifecycle
from .metrics import LONGRUNNING, REGISTRY
from .openapi import Definitions
from .options import parse_args, parser
from .storage import ResourceStorage, Storage, StorageListWatch
from .watch import events, until_timeout

log = logging.getLogger("services.kit")

JSON = "application/json"

Send = Callable[[dict[str, Any]], Awaitable[None]]


class Discovery:
    """The discovery documents of the server's group (the library's, from its catalogue), encoded once."""

    def __init__(self, group: str, kinds: Catalogue) -> None:
        self.group_list = orjson.dumps(discovery.api_group_list(kinds))
        self.group = orjson.dumps(discovery.api_group(kinds, group))
        self.versions = {v: orjson.dumps(discovery.resource_list(kinds, group, v))
                         for _, v in kinds.group_versions()}
        self.aggregated = {av: orjson.dumps(discovery.aggregated(kinds, core=False, api_version=av))
                           for av in ("v2", "v2beta1")}


class APIServer:
    """An aggregated API server of one group: kinds, versions in preference order, admission plug-ins."""

    def __init__(self, group: str, kinds: Sequence[Kind], versions: Sequence[str],
                 admission: Sequence[AdmissionPlugin] = (), name: str = "apiserver",
                 etcd_prefix: str = "/apiserver") -> None:
        self.group, self.kinds, self.versions = group, list(kinds), list(versions)
        self.admission = list(admission)
        self.name, self.default_etcd_prefix = name, etcd_prefix
        self.by_plural = {k.plural: k for k in self.kinds}
        self.app = FastAPI(title=name, openapi_url=None, docs_url=None, redoc_url=None)
        self.app.add_exception_handler(APIError, self._fastapi_api_error)  # type: ignore[arg-type]
        self.app.add_exception_handler(StarletteHTTPException, self._fastapi_http_error)  # type: ignore[arg-type]
        self.definitions = Definitions(group, self.kinds, self.versions)
        served = catalogue(group, self.kinds, self.versions, etcd_prefix)
        self.discovery = Discovery(group, served)
        self.openapi = openapi.Documents(group, self.versions, served, self.definitions)
        self.informers: dict[str, Informer] = {}
        self._list_watches: dict[str, StorageListWatch] = {}
        self.storage: Storage | None = None
        self.handlers: Handlers[ResourceStorage] | None = None
        self.authn = Authenticator(None, None)
        self.authz = Authorizer(None)
        self.min_request_timeout = 1800
        self.deadlines = Deadlines()
        self._closers: list[Callable[[], Awaitable[None]]] = []  # the clients of the core API server
        self.lifecycle: NamespaceLifecycle | None = None
        self.reloader: authconfig.Reloader | None = None
        self._https: https.Server | None = None
        self.auditor: Auditor | None = None
        self.handler: Handler = build_handler_chain(self._serve, self)

    # what plug-ins and routes use --------------------------------------------------------------------

    def informer(self, plural: str) -> Informer:
        """The in-process informer of a kind (services.common.informer over this server's storage: hub
        objects in its `store` by namespace/name); made before the server starts."""
        if plural not in self.informers:
            if self.storage is None or self.handlers is None:
                raise RuntimeError("informers exist once the server is configured (in AdmissionPlugin.initialize)")
            kind = self.by_plural[plural]
            info = self.handlers.catalogue.lookup(self.group, kind.storage_version, plural)
            assert info is not None

            def decode(obj: pb.Object, kind: Kind = kind) -> Obj:
                return hub(kind, kind.storage_version, envelope.from_envelope(obj))
            source = self._list_watches[plural] = StorageListWatch(self.storage, info.key_prefix, decode)
            self.informers[plural] = Informer.over(source, self.group, kind.storage_version, plural)
        return self.informers[plural]

    async def wait_fresh(self, plural: str) -> bool:
        """Read-your-writes for a kind's informer: wait until its store holds every write stored before
        this call (a plug-in that misses an object created a moment ago asks this before refusing);
        False when it does not catch up within a few seconds."""
        informer = self.informer(plural)
        return await informer.wait_fresh(await self._list_watches[plural].fresh_revision())

    async def get(self, plural: str, version: str, namespace: str, name: str, user: pb.UserInfo) -> Obj:
        """An object as `user` reads it through the kind's handlers (for custom routes)."""
        assert self.handlers is not None
        resp, _ = await self.handlers.handle(rpb.APIRequest(verb="get", group=self.group, version=version,
                                                            resource=plural, namespace=namespace, name=name,
                                                            user=user))
        obj: Obj = orjson.loads(resp.body)
        return obj

    # configuration -------------------------------------------------------------------------------------

    def configure(self, args: Any) -> None:
        prefix = args.etcd_prefix.rstrip("/")
        if not prefix.startswith("/") or "/" in prefix[1:] or "." in prefix:
            raise SystemExit(f"--etcd-prefix {args.etcd_prefix!r}: one path segment without dots, e.g. /{self.name}")
        self.storage = Storage(args.etcd_servers, request_timeout=args.etcd_request_timeout,
                               bookmark_interval=args.watch_bookmark_interval,
                               compaction_interval=args.etcd_compaction_interval)
        def admission(operation: str, options: Obj) -> Admission:
            return PluginAdmission(self.admission, self.by_plural, operation)

        self.handlers = Handlers(catalogue(self.group, self.kinds, self.versions, prefix),
                                 ResourceStorage(self.storage), self.definitions, admission)
        self.min_request_timeout = args.min_request_timeout
        self.deadlines = Deadlines(args.request_timeout)
        self.auditor = audit_options.auditor(args)
        self.handler = build_handler_chain(self._serve, self)
        for kind in self.kinds:
            kind.strategy.initialize(self)
        for plugin in self.admission:
            plugin.initialize(self)

    @staticmethod
    def _config(path: str) -> kubeconfig.Config | None:
        if path:
            return kubeconfig.load(path)
        if os.environ.get("KUBERNETES_SERVICE_HOST"):
            return kubeconfig.load_in_cluster()
        return None

    def _client(self, path: str) -> httpclient.Client | None:
        cfg = self._config(path)
        if cfg is None:
            return None
        c = cfg.client(10.0)
        self._closers.append(c.aclose)
        return c

    async def _delegation(self, args: Any) -> Trust:
        """Authenticator and authorizer, and whom to trust: the CAs and request-header settings from
        the flags, else from the ConfigMap kube-system/extension-apiserver-authentication (then
        followed as it changes)."""
        authn_client = self._client(args.authentication_kubeconfig or args.kubeconfig)
        authz_client = self._client(args.authorization_kubeconfig or args.kubeconfig)
        data: dict[str, str] | None = None
        from_flags = bool(args.client_ca_file and args.requestheader_client_ca_file)
        if not from_flags and authn_client is not None:
            data = await authconfig.published(authn_client)
        trust = authconfig.resolve(args, data or {})
        if data is not None and authn_client is not None:
            self.reloader = authconfig.Reloader(authn_client, args, data, self._trust,
                                                args.extension_authentication_resync)
        self.authn = Authenticator(trust.requestheader, authn_client, args.authentication_token_webhook_cache_ttl)
        core = self._config(args.kubeconfig or args.authentication_kubeconfig)
        if core is not None and "NamespaceLifecycle" not in args.disable_admission_plugins:
            rest = core.rest_client()
            self._closers.append(rest.close)
            self.lifecycle = NamespaceLifecycle(rest)
            self.admission.insert(0, self.lifecycle)
        self.authz = Authorizer(authz_client, args.authorization_webhook_cache_authorized_ttl,
                                args.authorization_webhook_cache_unauthorized_ttl,
                                args.authorization_always_allow_paths)
        return trust

    def _trust(self, trust: Trust) -> None:
        """A changed ConfigMap: the request-header settings, and the CAs the TLS layer verifies with."""
        self.authn.requestheader = trust.requestheader
        if self._https is not None:
            client_trust = https.ClientTrust.from_files(client=trust.client_ca_file,
                                                        requestheader=trust.requestheader_ca_file)
            self._https.config.client_trust = client_trust if client_trust.names else None

    # running -------------------------------------------------------------------------------------------

    def main(self, argv: Sequence[str] | None = None) -> None:
        """Parse kube-style flags and serve until SIGTERM/SIGINT."""
        args = parse_args(parser(f"python -m services.{self.name}", self.__doc__ or "", self.default_etcd_prefix),
                          None if argv is None else list(argv))
        runtime.setup_logging(self.name, args.v)
        tracing.setup(self.name, args.tracing_config_file)
        runtime.run(lambda stop: self.serve(args, stop))
        tracing.shutdown()

    async def serve(self, args: Any, stop: asyncio.Event) -> None:
        self.configure(args)
        assert self.storage is not None
        trust = await self._delegation(args)
        await self.storage.start()
        if self.auditor is not None:
            await self.auditor.start()
        for inf in self.informers.values():
            inf.start()
        if self.lifecycle is not None:
            self.lifecycle.namespaces.start()
        server = https.make_server(self, args.bind_address, args.secure_port, args.tls_cert_file,
                                   args.tls_private_key_file, client_ca_file=trust.client_ca_file,
                                   requestheader_ca_file=trust.requestheader_ca_file)
        self._https = server
        if self.reloader is not None:
            self.reloader.start()
        log.info("%s serving %s on https://%s:%d (etcd %s, prefix %s)", self.name, self.group, args.bind_address,
                 args.secure_port, args.etcd_servers, args.etcd_prefix)
        try:
            await https.serve_until(server, stop)
        finally:
            for inf in self.informers.values():
                await inf.stop()
            if self.lifecycle is not None:
                await self.lifecycle.namespaces.stop()
            if self.reloader is not None:
                await self.reloader.stop()
            await self.storage.stop()
            await self.deadlines.stop()
            if self.auditor is not None:  # after the listener has drained: every event is delivered
                await self.auditor.stop()
            for close in self._closers:
                await close()

    async def ready(self) -> tuple[bool, list[str]]:
        failed = []
        if self.storage is None or not await self.storage.ping():
            failed.append("etcd")
        failed += [f"informer-sync:{p}" for p, inf in self.informers.items() if not inf.synced.is_set()]
        failed += [f"admission:{p.name}" for p in self.admission if not p.ready()]
        return not failed, failed

    # the ASGI front ------------------------------------------------------------------------------------

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        await self.handler(Context(scope, receive, send))

    async def _serve(self, rc: RequestContext) -> None:
        """The API handler behind the filters: a kind's resource path, the server's own documents, or
        the FastAPI application."""
        ctx: Context = rc  # type: ignore[assignment]
        info: RequestInfo = ctx.info
        accept = ctx.header(b"accept")
        if info.is_resource_request and info.api_group == self.group and not info.subresource:
            kind = self.by_plural.get(info.resource)
            if kind is not None and info.api_version in kind.versions and info.api_version in self.versions:
                await self._resource(ctx, info, kind, accept)
                return
        static = self._static(ctx.path, accept)
        if static is not None:
            if ctx.method not in ("GET", "HEAD"):
                raise APIError("the server does not allow this method on the requested resource",
                               code=405, reason="MethodNotAllowed")
            body, ctype = static if not callable(static) else await static()
            await ctx.respond(200, body, ctype)
            return

        async def send(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                ctx.code, ctx.response_started = message["status"], True
                message = {**message, "headers": ctx.response_headers(list(message.get("headers") or ()))}
            await ctx.send(message)

        ctx.scope["user"] = ctx.user
        await self.app(ctx.scope, ctx.receive, send)
        if not ctx.code:
            ctx.code = 500

    def _static(self, path: str, accept: str) -> Any:
        """(body, content type) of the server's own non-resource documents, or a coroutine making it."""
        group_path = f"/apis/{self.group}"
        if path == "/apis":
            v = negotiation.negotiate_discovery(accept)
            if v == "v2":
                return self.discovery.aggregated["v2"], negotiation.DISCOVERY_V2
            if v == "v2beta1":
                return self.discovery.aggregated["v2beta1"], negotiation.DISCOVERY_V2BETA1
            return self.discovery.group_list, JSON
        if path == group_path:
            return self.discovery.group, JSON
        if path.startswith(group_path + "/") and path[len(group_path) + 1:] in self.discovery.versions:
            return self.discovery.versions[path[len(group_path) + 1:]], JSON
        if path == "/openapi/v3":
            return self.openapi.index, JSON
        if path.startswith("/openapi/v3/") and path[len("/openapi/v3/"):] in self.openapi.v3:
            return self.openapi.v3[path[len("/openapi/v3/"):]], JSON
        if path == "/openapi/v2":
            form = openapi_v2.negotiate(accept)
            if form is None:
                raise APIError("only application/json and protobuf are served", code=406, reason="NotAcceptable")
            return (self.openapi.v2.json, JSON) if form == openapi_v2.JSON else \
                (self.openapi.v2.protobuf, openapi_v2.PROTOBUF)
        if path in ("/healthz", "/livez"):
            return b"ok", "text/plain; charset=utf-8"
        if path == "/readyz":
            return self._readyz
        if path == "/metrics":
            return self._metrics
        return None

    @staticmethod
    async def _metrics() -> tuple[bytes, str]:
        """The server's registry, rendered in a thread: the loop keeps serving between the GIL's switches
        instead of stalling every request in flight for the whole scrape (its collectors take their own
        locks or read only the process, as those of the default registry services/common/metrics.render
        renders in its thread do)."""
        return await asyncio.to_thread(generate_latest, REGISTRY), CONTENT_TYPE_LATEST

    async def _readyz(self) -> tuple[bytes, str]:
        ok, failed = await self.ready()
        if not ok:
            raise APIError("readyz check failed: " + ", ".join(failed), code=500, reason="InternalError")
        return b"ok", "text/plain; charset=utf-8"

    async def _resource(self, ctx: Context, info: RequestInfo, kind: Kind, accept: str) -> None:
        if kind.namespaced != bool(info.namespace) and info.verb not in ("list", "watch"):
            raise NotFound("the server could not find the requested resource")
        if bad_name := invalid_path_name(info):
            raise BadRequest(bad_name)
        out = negotiation.negotiate_output(accept)
        body, ctype = b"", ""
        if info.verb in ("create", "update", "patch", "delete"):
            body = await _read_body(ctx.receive)
            ctype = ctx.header(b"content-type")
            if body and info.verb != "patch":
                body, _ = negotiation.decode_body(info.verb, ctype, body)
            if ctx.audit is not None:
                ctx.audit.set_request(body)
        table = out.table and info.verb in ("get", "list", "watch")
        assert self.handlers is not None and self.storage is not None
        req = rpb.APIRequest(verb=info.verb, group=info.api_group, version=info.api_version,
                             resource=info.resource, namespace=info.namespace, name=info.path_name,
                             query=ctx.query, body=body, content_type=ctype, table=table, user=ctx.user,
                             user_agent=ctx.header(b"user-agent"))
        if info.verb == "watch":
            await self._watch(ctx, events(self.handlers, self.storage, req), info)
            return
        resp, timing = await self.handlers.handle(req)
        ctx.timings.extend(timing.items())
        data = resp.body
        if ctx.response_chunks is not None and out.content_type != JSON:  # the audit keeps the JSON
            ctx.response_chunks.append(data)
        if out.format == "yaml":
            data = negotiation.json_to_yaml(data)
        await ctx.respond(resp.code, data, out.content_type, warning_headers(resp.warnings))

    async def _watch(self, ctx: Context, lines: AsyncIterator[bytes], info: RequestInfo) -> None:
        query, send, receive = ctx.query, ctx.send, ctx.receive
        try:
            timeout = float(query["timeoutSeconds"]) if query.get("timeoutSeconds") else \
                self.min_request_timeout * (1 + random.random())
        except ValueError:
            raise BadRequest(f'timeoutSeconds: Invalid value: "{query["timeoutSeconds"]}"') from None
        events = until_timeout(lines, timeout)
        await ctx.start(200, [(b"content-type", JSON.encode()), (b"cache-control", b"no-cache, private")])
        established()  # a watch is traced for its setup only
        if ctx.audit is not None:
            ctx.audit.stage("ResponseStarted", 200)

        async def pump() -> None:
            async for line in events:
                await send({"type": "http.response.body", "body": line, "more_body": True})

        async def disconnected() -> None:
            while (await receive())["type"] != "http.disconnect":
                pass

        tasks = [asyncio.ensure_future(pump()), asyncio.ensure_future(disconnected())]
        streams = LONGRUNNING.labels("WATCH", self.group, info.api_version, info.resource,
                                     "namespace" if info.namespace else "cluster", "apiserver")
        streams.inc()
        try:
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        finally:
            streams.dec()
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            with contextlib.suppress(Exception):
                await events.aclose()
        with contextlib.suppress(Exception):
            await send({"type": "http.response.body", "body": b"", "more_body": False})

    # FastAPI's errors as Status --------------------------------------------------------------------

    @staticmethod
    async def _fastapi_api_error(request: Request, exc: APIError) -> Response:
        return Response(exc.body(), status_code=exc.code, media_type=JSON, headers=exc.headers)

    @staticmethod
    async def _fastapi_http_error(request: Request, exc: StarletteHTTPException) -> Response:
        if exc.status_code == 404:
            e: APIError = NotFound("the server could not find the requested resource")
        elif exc.status_code == 405:
            e = APIError("the server does not allow this method on the requested resource", code=405,
                         reason="MethodNotAllowed")
        else:
            e = APIError(str(exc.detail), code=exc.status_code, reason="")
        return Response(e.body(), status_code=e.code, media_type=JSON)


async def _read_body(receive: Any, limit: int = 3 << 20) -> bytes:
    chunks, size = [], 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise BadRequest("the client went away")
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise APIError("Request entity too large: limit is 3145728", code=413, reason="RequestEntityTooLarge")
        chunks.append(chunk)
        if not message.get("more_body"):
            return b"".join(chunks)
