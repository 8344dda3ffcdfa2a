"""The handler chain in process (httpx ASGITransport) against fake auth, apf and registry servicers."""
import asyncio
import time

import httpx
import orjson
import pytest
import yaml
from prometheus_client import REGISTRY

from apiary_pb import apf_pb2_grpc as fgrpc
from apiary_pb import auth_pb2_grpc as agrpc
from apiary_pb import registry_pb2_grpc as rgrpc
from services.apiserver.negotiation import DISCOVERY_V2, DISCOVERY_V2BETA1
from services.common import grpcutil
from services.common.errors import TooManyRequests
from services.common.flowcontrol import EXEMPT_FLOW_SCHEMA_UID, EXEMPT_PRIORITY_LEVEL_UID
from services.proxy.app import ProxyApp
from services.proxy.discovery import openapi_hash
from services.proxy.filters.apf import SEAT_LONG_RUNNING, SEAT_MUTATING, SEAT_READ_ONLY, MaxInFlight
from tests.waiting import until

from .fakes import OPENAPI_V1, start_fakes, with_cert

ADMIN = {"Authorization": "Bearer admin-token"}
ALICE = {"Authorization": "Bearer alice-token"}


class Stack:
    pass


@pytest.fixture
async def stack():
    server, addr, auth, apf, registry = await start_fakes()
    channels = {name: grpcutil.make_channel(None, addr) for name in ("auth", "apf", "registry")}
    proxy = ProxyApp(agrpc.AuthStub(channels["auth"]), fgrpc.FlowControlStub(channels["apf"]),
                     rgrpc.RegistryStub(channels["registry"]), channels=channels)
    proxy.start()
    await asyncio.wait_for(proxy.apiservices.synced.wait(), 5)
    await asyncio.wait_for(proxy.discovery.loaded.wait(), 5)
    s = Stack()
    s.proxy, s.auth, s.apf, s.registry, s.server, s.addr = proxy, auth, apf, registry, server, addr
    s.client = httpx.AsyncClient(transport=httpx.ASGITransport(app=with_cert(proxy.app)), base_url="https://t")
    yield s
    await s.client.aclose()
    await proxy.stop()
    for ch in channels.values():
        await ch.close()
    await s.server.stop(None)


async def test_get_json_with_headers(stack):
    r = await stack.client.get("/api/v1/namespaces/demo/configmaps/c", headers=ADMIN)
    assert r.status_code == 200
    assert r.headers["content-type"] == "application/json"
    assert r.json()["metadata"]["name"] == "c"
    assert r.headers["warning"] == '299 - "use \\"v2\\" instead"'
    # system:masters: the mandatory exempt FlowSchema, decided in the proxy
    assert r.headers["x-kubernetes-pf-flowschema-uid"] == EXEMPT_FLOW_SCHEMA_UID
    assert r.headers["x-kubernetes-pf-prioritylevel-uid"] == EXEMPT_PRIORITY_LEVEL_UID
    assert stack.apf.acquired == 0
    assert len(r.headers["audit-id"]) == 36
    timing = r.headers["server-timing"]
    for stage in ("authn;dur=", "apf;dur=", "authz;dur=", "registry;dur=", "storage;dur=1.25"):
        assert stage in timing
    req = stack.registry.requests[-1]
    assert (req.verb, req.namespace, req.name, req.resource, req.user.name) == ("get", "demo", "c", "configmaps",
                                                                                  "admin")
    assert req.audit_id == r.headers["audit-id"]


async def test_seat_from_apf(stack):
    r = await stack.client.get("/api/v1/namespaces/demo/configmaps/c", headers=ALICE)
    assert r.status_code == 200
    assert r.headers["x-kubernetes-pf-flowschema-uid"] == "fs-uid"
    assert r.headers["x-kubernetes-pf-prioritylevel-uid"] == "pl-uid"
    assert stack.apf.acquired == 1
    assert stack.apf.wait_limits[-1] == pytest.approx(15.0, abs=0.5)  # a quarter of --request-timeout's 60 s
    await asyncio.wait_for(stack.apf.released_event.wait(), 2)
    assert not stack.apf.held
    r = await stack.client.get("/api/v1/namespaces/demo/configmaps/c?timeout=8s", headers=ALICE)
    assert r.status_code == 200 and stack.apf.wait_limits[-1] == pytest.approx(2.0, abs=0.5)


async def test_list_query_and_yaml(stack):
    r = await stack.client.get("/api/v1/namespaces/demo/configmaps?limit=500&labelSelector=a%3Db&limit=1",
                               headers={**ADMIN, "Accept": "application/yaml"})
    assert r.status_code == 200
    assert r.headers["content-type"] == "application/yaml"
    assert r.text.startswith("kind: ConfigMapList\napiVersion: v1\n")
    assert yaml.safe_load(r.text)["items"][0]["metadata"]["name"] == "a"
    req = stack.registry.requests[-1]
    assert req.verb == "list" and dict(req.query) == {"limit": "500", "labelSelector": "a=b"}


async def test_table(stack):
    accept = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"
    r = await stack.client.get("/api/v1/namespaces/demo/configmaps/c", headers={**ADMIN, "Accept": accept})
    assert r.json()["kind"] == "Table" and stack.registry.requests[-1].table


async def test_not_acceptable(stack):
    r = await stack.client.get("/api/v1/namespaces/demo/configmaps/c",
                               headers={**ADMIN, "Accept": "application/vnd.kubernetes.protobuf"})
    assert r.status_code == 406 and r.json()["reason"] == "NotAcceptable"


async def test_unauthorized(stack):
    r = await stack.client.get("/api/v1/namespaces/demo/configmaps", headers={"Authorization": "Bearer nope"})
    assert r.status_code == 401
    assert r.content == (b'{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":'
                         b'"Unauthorized","reason":"Unauthorized","code":401}\n')


async def test_authn_cache(stack):
    for _ in range(3):
        assert (await stack.client.get("/api/v1/namespaces/demo/configmaps", headers=ALICE)).status_code == 200
    assert stack.auth.authn_calls == 1
    assert stack.auth.authz_calls == 1  # the same decision within its TTL
    for _ in range(2):
        await stack.client.get("/api/v1/namespaces/demo/configmaps", headers={"Authorization": "Bearer nope"})
    assert stack.auth.authn_calls == 3  # failures are not cached


async def test_forbidden(stack):
    r = await stack.client.get("/api/v1/namespaces/other/configmaps/c", headers=ALICE)
    assert r.status_code == 403
    assert r.json() == {
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": 'configmaps "c" is forbidden: User "alice" cannot get resource "configmaps" in API group "" '
                   'in the namespace "other"',
        "reason": "Forbidden", "details": {"name": "c", "kind": "configmaps"}, "code": 403}
    r = await stack.client.get("/foo", headers=ALICE)
    assert r.status_code == 403
    assert r.json()["message"] == 'forbidden: User "alice" cannot get path "/foo"'


async def test_client_certificate(stack):
    r = await stack.client.get("/api/v1/namespaces/demo/configmaps/c", headers={"X-Test-Cert": "carol/system:masters"})
    assert r.status_code == 200
    assert stack.registry.requests[-1].user.name == "carol"
    assert "system:authenticated" in stack.registry.requests[-1].user.groups


async def test_apf_rejection(stack):
    r = await stack.client.get("/api/v1/namespaces/demo/configmaps", headers={"Authorization": "Bearer busy-token"})
    assert r.status_code == 429
    assert r.headers["retry-after"] == "3"
    assert r.headers["x-kubernetes-pf-flowschema-uid"] == "fs-uid"
    body = r.json()
    assert body["message"] == "Too many requests, please try again later."
    assert body["reason"] == "TooManyRequests" and body["details"] == {"retryAfterSeconds": 3}


async def test_apf_unreachable_falls_back_to_max_in_flight(stack):
    """A proxy whose apf service stops: exempt requests never notice; the others are served under
    the max-in-flight limits, which the proxy says in a metric; once apf is back, seats come from it."""
    apf_server, apf_addr, _, apf, _ = await start_fakes()
    apf_channel = grpcutil.make_channel(None, apf_addr)
    channels = {"auth": grpcutil.make_channel(None, stack.addr),
                "registry": grpcutil.make_channel(None, stack.addr), "apf": apf_channel}
    proxy = ProxyApp(agrpc.AuthStub(channels["auth"]), fgrpc.FlowControlStub(apf_channel),
                     rgrpc.RegistryStub(channels["registry"]), channels=channels)
    proxy.start()
    client = httpx.AsyncClient(transport=httpx.ASGITransport(app=proxy.app), base_url="https://t")
    url = "/api/v1/namespaces/demo/configmaps"
    try:
        await asyncio.wait_for(proxy.discovery.loaded.wait(), 5)
        assert (await client.get(url, headers=ALICE)).status_code == 200
        assert apf.acquired == 1
        port = int(apf_addr.rsplit(":", 1)[1])
        await apf_server.stop(None)
        await until(lambda: proxy.apf.falling_back, what="the fallback to max-in-flight")
        assert proxy.apf.falling_back and REGISTRY.get_sample_value("apiary_apf_fallback") == 1
        r = await asyncio.wait_for(client.get(url, headers=ALICE), 5)
        assert r.status_code == 200 and "x-kubernetes-pf-flowschema-uid" not in r.headers
        r = await asyncio.wait_for(client.get(url, headers=ADMIN), 5)
        assert r.status_code == 200
        assert r.headers["x-kubernetes-pf-flowschema-uid"] == EXEMPT_FLOW_SCHEMA_UID
        assert proxy.apf.fallback.inflight == {SEAT_READ_ONLY: 0, SEAT_MUTATING: 0}

        apf_server, _, _, apf, _ = await start_fakes(port)
        t0 = time.monotonic()
        while not proxy.apf.ready() or proxy.apf.falling_back:
            await client.get(url, headers=ALICE)
            assert time.monotonic() - t0 < 2, "the seat stream did not come back"
            await asyncio.sleep(0.02)
        r = await client.get(url, headers=ALICE)
        assert r.status_code == 200 and r.headers["x-kubernetes-pf-flowschema-uid"] == "fs-uid"
        assert REGISTRY.get_sample_value("apiary_apf_fallback") == 0
    finally:
        await client.aclose()
        await proxy.stop()
        for ch in channels.values():
            await ch.close()
        await apf_server.stop(None)


async def test_priority_and_fairness_disabled(stack):
    """--enable-priority-and-fairness=false: the apf service is never asked, no FlowSchema is named, the
    max-in-flight limits apply, and the debug dumps are not served (404, as kube without APF)."""
    channels = {name: grpcutil.make_channel(None, stack.addr) for name in ("auth", "apf", "registry")}
    proxy = ProxyApp(agrpc.AuthStub(channels["auth"]), fgrpc.FlowControlStub(channels["apf"]),
                     rgrpc.RegistryStub(channels["registry"]), channels=channels, enable_priority_and_fairness=False,
                     max_requests_inflight=1)
    proxy.start()
    client = httpx.AsyncClient(transport=httpx.ASGITransport(app=with_cert(proxy.app)), base_url="https://t")
    try:
        await asyncio.wait_for(proxy.discovery.loaded.wait(), 5)
        assert proxy.apf.ready()
        for headers in (ALICE, ADMIN):
            r = await client.get("/api/v1/namespaces/demo/configmaps", headers=headers)
            assert r.status_code == 200 and "x-kubernetes-pf-flowschema-uid" not in r.headers
        assert stack.apf.acquired == 0
        seat = proxy.apf.fallback.acquire("get")  # the one read-only seat taken: alice gets 429, admin not
        try:
            assert (await client.get("/api/v1/namespaces/demo/configmaps", headers=ALICE)).status_code == 429
            assert (await client.get("/api/v1/namespaces/demo/configmaps", headers=ADMIN)).status_code == 200
        finally:
            proxy.apf.fallback.release(seat)
        r = await client.get("/debug/api_priority_and_fairness/dump_priority_levels", headers=ADMIN)
        assert r.status_code == 404 and r.text == "404 page not found\n"
    finally:
        await client.aclose()
        await proxy.stop()
        for ch in channels.values():
            await ch.close()


def test_max_in_flight_limits():
    """kube's max-in-flight filter: read-only and mutating requests counted apart, watches not at all."""
    limits = MaxInFlight(read_only=1, mutating=1)
    w1, w2 = limits.acquire("watch"), limits.acquire("watch")
    r = limits.acquire("list")
    m = limits.acquire("create")
    for verb in ("get", "patch"):
        with pytest.raises(TooManyRequests) as e:
            limits.acquire(verb)
        assert e.value.message == "Too many requests, please try again later."
        assert e.value.headers == {"Retry-After": "1"}
    limits.release(m)
    limits.release(r)
    assert limits.inflight == {SEAT_READ_ONLY: 0, SEAT_MUTATING: 0}
    limits.acquire("delete")
    assert (w1.kind, w2.kind) == (SEAT_LONG_RUNNING, SEAT_LONG_RUNNING)


async def test_registry_error_passes_through(stack):
    r = await stack.client.get("/api/v1/namespaces/demo/configmaps/missing", headers=ADMIN)
    assert r.status_code == 404
    assert r.json()["message"] == 'configmaps "missing" not found'
    assert r.json()["details"] == {"name": "missing", "kind": "configmaps"}


async def test_create_yaml_body(stack):
    body = b"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: y\n"
    r = await stack.client.post("/api/v1/namespaces/demo/configmaps", content=body,
                                headers={**ADMIN, "Content-Type": "application/yaml"})
    assert r.status_code == 201
    req = stack.registry.requests[-1]
    assert req.verb == "create" and req.content_type == "application/json"
    assert orjson.loads(req.body) == {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "y"}}


async def test_bad_bodies(stack):
    r = await stack.client.post("/api/v1/namespaces/demo/configmaps", content=b"a: [1",
                                headers={**ADMIN, "Content-Type": "application/yaml"})
    assert r.status_code == 400 and r.json()["message"].startswith("error converting YAML to JSON")
    r = await stack.client.post("/api/v1/namespaces/demo/configmaps", content=b"{",
                                headers={**ADMIN, "Content-Type": "application/json"})
    assert r.status_code == 400
    r = await stack.client.post("/api/v1/namespaces/demo/configmaps", content=b"x=1",
                                headers={**ADMIN, "Content-Type": "text/plain"})
    assert r.status_code == 415 and r.json()["reason"] == "UnsupportedMediaType"


async def test_patch_content_types(stack):
    r = await stack.client.patch("/api/v1/namespaces/demo/configmaps/c", content=b"data:\n  a: b\n",
                                 headers={**ADMIN, "Content-Type": "application/apply-patch+yaml"})
    assert r.status_code == 200
    req = stack.registry.requests[-1]
    assert req.content_type == "application/apply-patch+yaml" and req.body == b'{"data":{"a":"b"}}'
    r = await stack.client.patch("/api/v1/namespaces/demo/configmaps/c", content=b'{"data":{}}',
                                 headers={**ADMIN, "Content-Type": "application/merge-patch+json"})
    assert r.status_code == 200 and stack.registry.requests[-1].content_type == "application/merge-patch+json"


async def test_body_too_large(stack):
    r = await stack.client.post("/api/v1/namespaces/demo/configmaps", content=b"x" * (3 * 1024 * 1024 + 1),
                                headers={**ADMIN, "Content-Type": "application/json"})
    assert r.status_code == 413 and r.json()["reason"] == "RequestEntityTooLarge"


async def test_routing(stack):
    r = await stack.client.get("/apis/apps/v1/deployments", headers=ADMIN)
    assert r.status_code == 200
    r = await stack.client.get("/apis/restaurant.example.com/v1alpha1/pizzas", headers=ADMIN)
    assert r.status_code == 503 and 'APIService "v1alpha1.restaurant.example.com" is unavailable: service/api in "pizza" is not present' in r.json()["message"]
    r = await stack.client.get("/apis/nope.example.com/v1/things", headers=ADMIN)
    assert r.status_code == 404 and r.json()["reason"] == "NotFound"
    r = await stack.client.get("/api/v2/pods", headers=ADMIN)
    assert r.status_code == 404
    r = await stack.client.get("/api/v1/namespaces/demo/unknowns", headers=ADMIN)
    assert r.status_code == 404  # the registry's answer, passed through
    r = await stack.client.get("/nonexistent", headers=ADMIN)
    assert r.status_code == 404 and r.text == "404 page not found\n"


async def test_root_lists_the_served_paths(stack):
    paths = (await stack.client.get("/", headers=ADMIN)).json()["paths"]
    assert paths == sorted(paths)
    assert {"/api", "/api/v1", "/apis", "/apis/apps", "/apis/apps/v1", "/healthz", "/livez", "/readyz", "/metrics",
            "/openapi/v2", "/openapi/v3", "/version"} <= set(paths)


async def test_people_get_indented_json(stack):
    compact = await stack.client.get("/api/v1/namespaces/demo/configmaps", headers=ADMIN)
    assert b"\n" not in compact.content
    for query, agent in (("", "curl/8.5.0"), ("?pretty=true", "kubectl/v1.33.1")):
        r = await stack.client.get(f"/api/v1/namespaces/demo/configmaps{query}", headers={**ADMIN, "User-Agent": agent})
        assert r.content.startswith(b'{\n  "') and r.json() == compact.json()
    r = await stack.client.get("/apis/nope.example.com/v1/things?pretty=1", headers=ADMIN)
    assert r.status_code == 404 and r.content.startswith(b'{\n  "kind": "Status"')
    r = await stack.client.get("/api/v1/namespaces/demo/configmaps?pretty=false", headers={**ADMIN, "User-Agent": "curl"})
    assert r.content == compact.content


async def test_a_name_that_is_no_path_segment_is_a_bad_request(stack):
    r = await stack.client.get("/api/v1/namespaces/kube-system/secrets/%2F", headers=ADMIN)
    assert r.status_code == 400, r.text
    assert r.json()["message"] == 'Name parameter invalid: "/": may not contain \'/\''
    r = await stack.client.get("/api/v1/namespaces/demo/configmaps/a%2Fb", headers=ADMIN)
    assert r.status_code == 400 and r.json()["reason"] == "BadRequest"


async def test_namespace_object_is_cluster_scoped_for_registry(stack):
    await stack.client.get("/api/v1/namespaces/demo", headers=ADMIN)
    req = stack.registry.requests[-1]
    assert (req.resource, req.name, req.namespace) == ("namespaces", "demo", "")


async def test_watch_streams_events_and_ends_after_timeout(stack):
    r = await stack.client.get("/api/v1/namespaces/demo/configmaps?watch=true&timeoutSeconds=1", headers=ADMIN)
    assert r.status_code == 200
    assert r.headers["content-type"] == "application/json"
    lines = r.content.splitlines()
    assert [orjson.loads(x)["object"]["metadata"]["name"] for x in lines] == ["c0", "c1"]
    assert all(orjson.loads(x)["type"] == "ADDED" for x in lines)
    await asyncio.wait_for(stack.registry.watch_cancelled.wait(), 2)
    await until(lambda: not stack.apf.held, what="the seat released")
    assert not stack.apf.held  # the seat was released once the watch started


async def test_watch_error_before_first_frame(stack):
    r = await stack.client.get("/api/v1/namespaces/demo/secrets?watch=1", headers=ADMIN)
    assert r.status_code == 400 and r.json()["message"] == "unable to parse requirement: bad selector"


async def test_watch_client_disconnect_cancels_stream(stack):
    sent = []
    disconnect = asyncio.Event()

    async def receive():
        if not sent:
            sent.append(1)
            return {"type": "http.request", "body": b"", "more_body": False}
        await disconnect.wait()
        return {"type": "http.disconnect"}

    messages = []

    async def send(msg):
        messages.append(msg)
        lines = b"".join(m.get("body", b"") for m in messages).count(b"\n")
        if lines == 2:  # both events are out (in one write or two)
            disconnect.set()

    scope = {"type": "http", "method": "GET", "path": "/api/v1/watch/namespaces/demo/configmaps",
             "query_string": b"", "headers": [(b"authorization", b"Bearer admin-token")]}
    await asyncio.wait_for(stack.proxy(scope, receive, send), 5)
    assert messages[0]["status"] == 200
    await asyncio.wait_for(stack.registry.watch_cancelled.wait(), 2)


async def test_a_request_ending_with_its_connection_lost_postpones_the_heap_trim(stack, monkeypatch):
    """The lost connection's buffers were counted when it was lost (the HTTPS protocol's connection_lost); the
    request that held it only postpones the pending trim, counting nothing again. A request whose connection
    stays open does neither."""
    from services.common import runtime
    from services.apiserver.serving import CONNECTION_EXTENSION

    calls = []
    monkeypatch.setattr(runtime, "released", lambda nbytes: calls.append(("released", nbytes)))
    monkeypatch.setattr(runtime, "postpone_trim", lambda: calls.append(("postpone_trim",)))

    class Transport:
        closing = False

        def is_closing(self):
            return self.closing

    async def request(path, lose):
        transport, sent, disconnect = Transport(), [], asyncio.Event()

        async def receive():
            if not sent:
                sent.append(1)
                return {"type": "http.request", "body": b"", "more_body": False}
            await disconnect.wait()
            transport.closing = True
            return {"type": "http.disconnect"}

        async def send(msg):
            if lose and msg.get("body", b"").endswith(b"\n"):  # a watch event is out: the client goes
                disconnect.set()

        scope = {"type": "http", "method": "GET", "path": path, "query_string": b"",
                 "headers": [(b"authorization", b"Bearer admin-token")],
                 "extensions": {CONNECTION_EXTENSION: transport}}
        await asyncio.wait_for(stack.proxy(scope, receive, send), 5)

    await request("/api/v1/watch/namespaces/demo/configmaps", lose=True)
    assert calls == [("postpone_trim",)]
    calls.clear()
    await request("/api/v1/namespaces/demo/configmaps/c", lose=False)
    assert calls == []


async def test_discovery(stack):
    r = await stack.client.get("/api", headers={**ADMIN, "Accept": DISCOVERY_V2 + ",application/json"})
    assert r.headers["content-type"] == DISCOVERY_V2
    assert r.json()["kind"] == "APIGroupDiscoveryList"
    r = await stack.client.get("/apis", headers={**ADMIN, "Accept": DISCOVERY_V2BETA1 + ",application/json"})
    assert r.headers["content-type"] == DISCOVERY_V2BETA1
    assert r.json()["apiVersion"] == "apidiscovery.k8s.io/v2beta1"
    r = await stack.client.get("/apis", headers=ADMIN)
    assert r.headers["content-type"] == "application/json" and r.json()["kind"] == "APIGroupList"
    r = await stack.client.get("/api", headers=ADMIN)
    assert r.json() == {"kind": "APIVersions", "versions": ["v1"]}
    r = await stack.client.get("/apis/apps", headers=ADMIN)
    assert r.json()["kind"] == "APIGroup" and r.json()["preferredVersion"]["version"] == "v1"
    r = await stack.client.get("/apis/apps/v1", headers=ADMIN)
    assert r.json()["groupVersion"] == "apps/v1"
    r = await stack.client.get("/api/v1", headers=ADMIN)
    assert r.json()["groupVersion"] == "v1"
    r = await stack.client.get("/apis/nope/v1", headers=ADMIN)
    assert r.status_code == 404


async def test_openapi(stack):
    h = openapi_hash(OPENAPI_V1)
    assert h == h.upper() and len(h) == 128
    r = await stack.client.get("/openapi/v3", headers=ADMIN)
    assert r.json() == {"paths": {"api/v1": {"serverRelativeURL": f"/openapi/v3/api/v1?hash={h}"}}}
    r = await stack.client.get(f"/openapi/v3/api/v1?hash={h}", headers=ADMIN)
    assert r.content == OPENAPI_V1 and r.headers["cache-control"] == "public, immutable"
    r = await stack.client.get("/openapi/v3/api/v1", headers=ADMIN)
    assert r.status_code == 200 and r.headers["cache-control"] == "no-cache, private"
    r = await stack.client.get("/openapi/v3/apis/nope/v1", headers=ADMIN)
    assert r.status_code == 404
    r = await stack.client.get("/openapi/v2", headers=ADMIN)
    assert r.status_code == 200


async def test_version_health_metrics(stack):
    r = await stack.client.get("/version", headers=ALICE)
    assert r.json()["gitVersion"] == "v1.33.0-apiary" and r.json()["platform"] == "linux/amd64"
    assert r.json()["major"] == "1" and r.json()["minor"] == "33"
    for path in ("/healthz", "/livez"):
        r = await stack.client.get(path)
        assert (r.status_code, r.text) == (200, "ok")
    # readiness also waits for the apf stream and the aggregator's informers, which the fixture does not
    await until(lambda: stack.proxy.apf.ready() and stack.proxy.aggregator.synced(), what="the proxy ready")
    r = await stack.client.get("/readyz")
    assert (r.status_code, r.text) == (200, "ok")
    await stack.client.get("/api/v1/namespaces/demo/configmaps", headers=ADMIN)
    r = await stack.client.get("/metrics", headers=ADMIN)
    assert r.status_code == 200
    assert 'apiserver_request_total{code="200",component="apiserver",group="",resource="configmaps",' in r.text
    assert "apiserver_request_duration_seconds_bucket" in r.text
    assert 'apiserver_current_inflight_requests{request_kind="readOnly"}' in r.text


async def test_readyz_fails_without_informer(stack):
    stack.proxy.apiservices.synced.clear()
    r = await stack.client.get("/readyz")
    assert r.status_code == 500 and "[-]apiservice-informer failed" in r.text


async def test_json_list_passed_on_in_parts(stack):
    """A JSON list asks the registry for an answer in parts and sends each part on as it comes;
    YAML and Table lists stay whole. A failure after the first part cuts the response off."""
    r = await stack.client.get("/api/v1/namespaces/parts/configmaps", headers=ADMIN)
    assert r.status_code == 200 and "content-length" not in r.headers
    assert [i["metadata"]["name"] for i in r.json()["items"]] == ["a", "b"]
    assert stack.registry.requests[-1].chunked
    r = await stack.client.get("/api/v1/namespaces/demo/configmaps", headers={**ADMIN, "Accept": "application/yaml"})
    assert r.status_code == 200 and not stack.registry.requests[-1].chunked
    try:
        r = await stack.client.get("/api/v1/namespaces/parts-fail/configmaps", headers=ADMIN)
    except (httpx.HTTPError, AssertionError):
        return  # cut off (httpx's ASGI transport asserts on a response the app did not complete)
    with pytest.raises(ValueError):
        orjson.loads(r.content)  # never a whole, valid list


async def test_a_request_may_wait_in_apf_a_quarter_of_its_time_left():
    from services.proxy.filters.apf import MAX_QUEUE_WAIT, queue_wait_limit

    now = asyncio.get_running_loop().time()
    assert queue_wait_limit(None) == 0.0  # no deadline: the apf service's --apf-queue-wait-seconds
    assert queue_wait_limit(now + 60) == pytest.approx(15.0, abs=0.1)  # kube's default: 60 s / 4
    assert queue_wait_limit(now + 8) == pytest.approx(2.0, abs=0.1)  # ?timeout=8s
    assert queue_wait_limit(now + 3600) == MAX_QUEUE_WAIT
    assert queue_wait_limit(now - 1) > 0  # past its deadline: the shortest wait, never the default
