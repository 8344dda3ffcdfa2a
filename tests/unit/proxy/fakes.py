"""Small fake auth, apf and registry servicers for the proxy's unit tests (never used outside them)."""
from __future__ import annotations

import asyncio

import grpc
import orjson

from apiary_pb import apf_pb2 as fpb
from apiary_pb import apf_pb2_grpc as fgrpc
from apiary_pb import auth_pb2 as apb
from apiary_pb import auth_pb2_grpc as agrpc
from apiary_pb import envelope_pb2 as pb
from apiary_pb import registry_pb2 as rpb
from apiary_pb import registry_pb2_grpc as rgrpc
from services.common import errors, grpcutil, mux, watchmux
from services.common.identity import AUTHENTICATED, user_pb

TOKENS = {"alice-token": ("alice", ["dev"]), "admin-token": ("admin", ["system:masters"]),
          "busy-token": ("busy", []), "imp-token": ("imp", [])}
RBAC_RESOURCES = ("roles", "clusterroles", "rolebindings", "clusterrolebindings")


class FakeAuth(agrpc.AuthServicer):
    def __init__(self) -> None:
        self.authn_calls = 0
        self.authz_calls = 0
        self.attributes: list[pb.RequestAttributes] = []
        self.revoked: set[str] = set()  # users whose grants are gone (an RBAC change)

    @grpcutil.api_method
    async def Authenticate(self, request, context):
        self.authn_calls += 1
        if request.token:
            if request.token not in TOKENS:
                return apb.AuthenticateResponse(authenticated=False, reason="invalid bearer token")
            name, groups = TOKENS[request.token]
            return apb.AuthenticateResponse(authenticated=True, user=user_pb(name, [*groups, AUTHENTICATED]))
        if request.has_cert:
            return apb.AuthenticateResponse(authenticated=True, user=user_pb(
                request.cert_common_name, [*request.cert_organizations, AUTHENTICATED]))
        return apb.AuthenticateResponse(authenticated=False)

    @grpcutil.api_method
    async def Authorize(self, request, context):
        self.authz_calls += 1
        a = request.attributes
        self.attributes.append(a)
        if a.user.name in self.revoked:
            return apb.AuthorizeResponse(decision="NoOpinion")
        if "system:masters" in a.user.groups or a.user.name == "busy":
            return apb.AuthorizeResponse(decision="Allow")
        if a.user.name == "imp" and a.verb == "impersonate":
            # imp may act as alice (or the demo/robot service account) in group dev with a scopes extra
            if (a.resource, a.name) in (("users", "alice"), ("groups", "dev"), ("uids", "1234")):
                return apb.AuthorizeResponse(decision="Allow")
            if (a.resource, a.subresource, a.name) == ("userextras", "scopes", "view"):
                return apb.AuthorizeResponse(decision="Allow")
            if (a.resource, a.namespace, a.name) == ("serviceaccounts", "demo", "robot"):
                return apb.AuthorizeResponse(decision="Allow")
            return apb.AuthorizeResponse(decision="NoOpinion")
        if a.user.name == "alice" and a.verb in ("get", "list", "watch") and a.namespace == "demo":
            return apb.AuthorizeResponse(decision="Allow")
        if a.user.name == "alice" and not a.resource_request and a.path in ("/version", "/api", "/apis"):
            return apb.AuthorizeResponse(decision="Allow")
        return apb.AuthorizeResponse(decision="NoOpinion")


class FakeAPF(fgrpc.FlowControlServicer):
    def __init__(self) -> None:
        self.held: set[int] = set()
        self.acquired = 0
        self.wait_limits: list[float] = []
        self.released: list[int] = []
        self.released_event = asyncio.Event()

    async def Seats(self, request_iterator, context):
        async for batch in request_iterator:
            answers = []
            for req in batch.requests:
                if req.WhichOneof("kind") == "acquire":
                    if req.acquire.user.name == "busy":
                        answers.append(fpb.SeatResponse(id=req.id, granted=False, retry_after_seconds=3,
                                                        reason="queue-full", flow_schema_uid="fs-uid",
                                                        priority_level_uid="pl-uid"))
                        continue
                    self.acquired += 1
                    self.wait_limits.append(req.wait_limit)
                    self.held.add(req.id)
                    answers.append(fpb.SeatResponse(id=req.id, granted=True, flow_schema="global-default",
                                                    priority_level="global-default", flow_schema_uid="fs-uid",
                                                    priority_level_uid="pl-uid"))
                else:
                    self.held.discard(req.id)
                    self.released.append(req.id)
                    self.released_event.set()
            if answers:
                yield fpb.SeatResponses(responses=answers)


APISERVICES = {
    "kind": "APIServiceList", "apiVersion": "apiregistration.k8s.io/v1", "metadata": {"resourceVersion": "5"},
    "items": [
        {"kind": "APIService", "apiVersion": "apiregistration.k8s.io/v1",
         "metadata": {"name": "v1.apps", "resourceVersion": "3"}, "spec": {"service": None, "group": "apps",
                                                                          "version": "v1"}},
        {"kind": "APIService", "apiVersion": "apiregistration.k8s.io/v1",
         "metadata": {"name": "v1alpha1.restaurant.example.com", "resourceVersion": "4"},
         "spec": {"service": {"namespace": "pizza", "name": "api"}, "group": "restaurant.example.com",
                  "version": "v1alpha1"}},
    ],
}
CORE_V2 = {"kind": "APIGroupDiscoveryList", "apiVersion": "apidiscovery.k8s.io/v2", "metadata": {},
           "items": [{"metadata": {"name": ""}, "versions": [{"version": "v1", "freshness": "Current",
                                                               "resources": []}]}]}
GROUP_LIST = {"kind": "APIGroupList", "apiVersion": "v1", "groups": [
    {"name": "apps", "versions": [{"groupVersion": "apps/v1", "version": "v1"}],
     "preferredVersion": {"groupVersion": "apps/v1", "version": "v1"}}]}
OPENAPI_V1 = b'{"openapi":"3.0.0","info":{"title":"Kubernetes","version":"v1.33.0"},"paths":{}}'


def configmap(name: str, ns: str = "demo") -> dict:
    return {"kind": "ConfigMap", "apiVersion": "v1",
            "metadata": {"name": name, "namespace": ns, "resourceVersion": "7"}, "data": {"k": "v"}}


AGGREGATOR_RESOURCES = ("services", "endpoints", "endpointslices")
# informers served an empty list and a quiet watch, never recorded: the aggregator's, the proxy's CRDs and
# its exempt flowcontrol objects
QUIET_RESOURCES = AGGREGATOR_RESOURCES + ("customresourcedefinitions", "flowschemas", "prioritylevelconfigurations")


class FakeRegistry(rgrpc.RegistryServicer):
    def __init__(self) -> None:
        self.requests: list[rpb.APIRequest] = []
        self.watch_cancelled = asyncio.Event()
        # Set serve_rbac to serve empty RBAC lists whose watches deliver what is put in rbac_events.
        self.serve_rbac = False
        self.rbac_events: dict[str, asyncio.Queue[dict]] = {r: asyncio.Queue() for r in RBAC_RESOURCES}
        # Cleared to hold the answer to the APIService informer's list (a registry slow to answer it).
        self.apiservices_listable = asyncio.Event()
        self.apiservices_listable.set()

    async def Calls(self, request_iterator, context):
        async for frame in mux.serve_mux(request_iterator, context, mux.unary_methods(self, {"Handle": rpb.APIRequest})):
            yield frame

    @staticmethod
    def _aggregator_background(request: rpb.APIRequest) -> bool:
        """The aggregator's informers and its availability writes (not recorded, not served)."""
        return request.resource in AGGREGATOR_RESOURCES or (
            request.resource == "apiservices" and request.subresource == "status")

    @grpcutil.api_method
    async def Handle(self, request, context):
        if request.resource in QUIET_RESOURCES and request.verb == "list":
            return rpb.APIResponse(code=200, body=b'{"kind":"List","apiVersion":"v1","metadata":'
                                                  b'{"resourceVersion":"1"},"items":[]}')
        if self._aggregator_background(request):
            raise errors.NotFound("the server could not find the requested resource")
        if request.resource in RBAC_RESOURCES:  # the proxy's RBAC informers (not recorded)
            if not self.serve_rbac:
                raise errors.NotFound("the server could not find the requested resource")
            return rpb.APIResponse(code=200, body=orjson.dumps(
                {"kind": "List", "apiVersion": "rbac.authorization.k8s.io/v1", "metadata": {"resourceVersion": "1"},
                 "items": []}))
        self.requests.append(request)
        if request.resource == "apiservices":
            if request.verb == "list":
                await self.apiservices_listable.wait()
            return rpb.APIResponse(code=200, body=orjson.dumps(APISERVICES))
        if request.resource == "configmaps":
            if request.verb == "get":
                if request.name == "missing":
                    raise errors.not_found("configmaps", "", "missing")
                obj = configmap(request.name, request.namespace)
                if request.table:
                    obj = {"kind": "Table", "apiVersion": "meta.k8s.io/v1", "columnDefinitions": [], "rows": []}
                return rpb.APIResponse(code=200, body=orjson.dumps(obj), warnings=['use "v2" instead'],
                                       timing={"storage": 1.25})
            if request.verb == "list" and request.chunked and request.namespace.startswith("parts"):
                head = b'{"kind":"ConfigMapList","apiVersion":"v1","metadata":{"resourceVersion":"9"},"items":['

                async def parts():
                    yield rpb.APIResponse(code=200, body=head + orjson.dumps(configmap("a"))).SerializeToString()
                    if request.namespace == "parts-fail":
                        raise errors.ServiceUnavailable("storage went away")
                    yield b"," + orjson.dumps(configmap("b"))
                    if request.namespace == "parts-slow":  # (a part goes once the next one is there)
                        await asyncio.sleep(30)
                    yield b"]}"
                return mux.Streamed(parts())
            if request.verb == "list":
                return rpb.APIResponse(code=200, body=orjson.dumps(
                    {"kind": "ConfigMapList", "apiVersion": "v1", "metadata": {"resourceVersion": "9"},
                     "items": [configmap("a")]}))
            if request.verb in ("create", "update", "patch"):
                try:  # as the registry: the proxy passes JSON on, the registry decodes it
                    orjson.loads(request.body)
                except orjson.JSONDecodeError as e:
                    raise errors.BadRequest(f"couldn't get version/kind; json parse error: {e}") from None
                return rpb.APIResponse(code=201 if request.verb == "create" else 200, body=request.body)
        if request.resource == "deployments":
            return rpb.APIResponse(code=200, body=b'{"kind":"DeploymentList","apiVersion":"apps/v1","items":[]}')
        if request.resource == "slow":
            await asyncio.sleep(30)
        raise errors.NotFound("the server could not find the requested resource")

    @grpcutil.api_stream
    async def Watch(self, request, context):
        if request.resource in QUIET_RESOURCES:
            await asyncio.sleep(3600)
        if self._aggregator_background(request):
            raise errors.NotFound("the server could not find the requested resource")
        if request.resource in RBAC_RESOURCES:
            if not self.serve_rbac:
                raise errors.NotFound("the server could not find the requested resource")
            queue = self.rbac_events[request.resource]
            while True:
                yield rpb.WatchFrame(data=orjson.dumps(await queue.get()))
        if request.resource == "apiservices":  # the aggregator's informer: its watch opens when it will
            await asyncio.sleep(3600)
        self.requests.append(request)
        if request.resource == "secrets":
            raise errors.BadRequest("unable to parse requirement: bad selector")
        try:
            for i in range(2):
                obj = configmap(f"c{i}")
                yield rpb.WatchFrame(data=orjson.dumps({"type": "ADDED", "object": obj}))
            await asyncio.sleep(3600)
        finally:
            self.watch_cancelled.set()

    async def Watches(self, request_iterator, context):
        """The proxy's watches, multiplexed (the real server side over this fake's Watch)."""
        async def start(wid, raw, sink):
            async for frame in self.Watch.__wrapped__(self, rpb.APIRequest.FromString(raw), context):
                sink.send(wid, frame.data)

        async for batch in watchmux.serve(request_iterator, start):
            yield batch

    async def Discovery(self, request, context):
        return rpb.DiscoveryResponse(
            aggregated_core=orjson.dumps(CORE_V2),
            aggregated_groups=b'{"kind":"APIGroupDiscoveryList","apiVersion":"apidiscovery.k8s.io/v2",'
                              b'"metadata":{},"items":[]}',
            api_versions=b'{"kind":"APIVersions","versions":["v1"]}',
            api_group_list=orjson.dumps(GROUP_LIST),
            resource_lists={"v1": b'{"kind":"APIResourceList","groupVersion":"v1","resources":[]}',
                            "apps/v1": b'{"kind":"APIResourceList","groupVersion":"apps/v1","resources":[]}'},
            openapi={"api/v1": OPENAPI_V1},
        )


async def start_fakes(port: int = 0) -> tuple[grpc.aio.Server, str, FakeAuth, FakeAPF, FakeRegistry]:
    server = grpc.aio.server()
    auth, apf, registry = FakeAuth(), FakeAPF(), FakeRegistry()
    agrpc.add_AuthServicer_to_server(auth, server)
    fgrpc.add_FlowControlServicer_to_server(apf, server)
    mux.add_servicer(rgrpc.add_RegistryServicer_to_server, registry, server)
    port = server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    return server, f"127.0.0.1:{port}", auth, apf, registry


def with_cert(app):
    """Stand-in for the TLS protocol: test headers become the verified-certificate extension.

    X-Test-Cert: <cn>/<o>,<o>; X-Test-CA: the issuing bundles (comma-separated, default "client").
    """
    async def wrapped(scope, receive, send):
        tls = None
        for k, v in scope.get("headers", []):
            if k == b"x-test-cert":
                cn, _, orgs = v.decode().partition("/")
                tls = {"cn": cn, "o": [o for o in orgs.split(",") if o], "ca": ["client"]}
        for k, v in scope.get("headers", []):
            if k == b"x-test-ca" and tls is not None:
                tls["ca"] = [c for c in v.decode().split(",") if c]
        if tls is not None:
            scope["extensions"] = {**(scope.get("extensions") or {}), "tls": tls}
        await app(scope, receive, send)
    return wrapped
