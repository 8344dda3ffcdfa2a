"""The aggregation proxy against a real HTTPS aggregated server (tools.fakeservers.AggregatedBackend)
registered with a Service, Endpoints and an APIService on the shared stack."""
from __future__ import annotations

import base64
import json
import ssl
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.openmetrics.parser import text_string_to_metric_families as openmetrics_families

from tools.fakeservers import AggregatedBackend, SilentServer
from services.cluster.stack import Stack
from tests.waiting import wait_for

GROUP, VERSION = "wardle.example.com", "v1alpha1"
GV = f"{GROUP}/{VERSION}"
APISERVICE = f"{VERSION}.{GROUP}"
NS = "wardle"


def apply(admin: httpx.Client, path: str, obj: dict[str, Any]) -> dict[str, Any]:
    """Create, or replace what is there."""
    r = admin.post(path, json=obj)
    if r.status_code == 409:
        current = admin.get(f"{path}/{obj['metadata']['name']}").json()
        obj["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
        r = admin.put(f"{path}/{obj['metadata']['name']}", json=obj)
    assert r.status_code in (200, 201), r.text
    return r.json()


def modify(admin: httpx.Client, path: str, change: Callable[[dict[str, Any]], None]) -> None:
    """GET, change, PUT; again on a conflict (the availability controller writes status meanwhile)."""
    for _ in range(10):
        obj = admin.get(path).json()
        change(obj)
        r = admin.put(path, json=obj)
        if r.status_code != 409:
            assert r.status_code == 200, r.text
            return
    raise AssertionError(f"PUT {path} kept conflicting")


def register(admin: httpx.Client, backend: AggregatedBackend | SilentServer, service: str, group: str,
             ca_pem: bytes, version: str = VERSION) -> None:
    """What the local runner (or a cluster's endpoints controller) writes for an aggregated server."""
    apply(admin, f"/api/v1/namespaces/{NS}/services", {
        "apiVersion": "v1", "kind": "Service", "metadata": {"name": service, "namespace": NS},
        "spec": {"ports": [{"port": 443, "targetPort": backend.port}]}})
    apply(admin, f"/api/v1/namespaces/{NS}/endpoints", {
        "apiVersion": "v1", "kind": "Endpoints", "metadata": {"name": service, "namespace": NS},
        "subsets": [{"addresses": [{"ip": "127.0.0.1"}], "ports": [{"port": backend.port}]}]})
    apply(admin, "/apis/apiregistration.k8s.io/v1/apiservices", {
        "apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
        "metadata": {"name": f"{version}.{group}"},
        "spec": {"group": group, "version": version, "groupPriorityMinimum": 1000, "versionPriority": 15,
                 "service": {"namespace": NS, "name": service}, "caBundle": base64.b64encode(ca_pem).decode()}})


@pytest.fixture(scope="module")
def backend(stack: Stack, admin: httpx.Client, tmp_path_factory: pytest.TempPathFactory) -> Iterator[AggregatedBackend]:
    b = AggregatedBackend(tmp_path_factory.mktemp("backend"), stack.state / "pki" / "front-proxy-ca.crt",
                          group=GROUP, version=VERSION, service="api", namespace=NS).start()
    r = admin.post("/api/v1/namespaces", json={"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    assert r.status_code in (201, 409), r.text
    register(admin, b, "api", GROUP, b.ca_pem)
    wait_for(lambda: admin.get(f"/apis/{GV}/whoamis").status_code == 200, what="forwarding to start")
    try:
        yield b
    finally:
        b.stop()
        admin.delete(f"/apis/apiregistration.k8s.io/v1/apiservices/{APISERVICE}")


def test_identity_headers_replace_what_the_client_sent(admin: httpx.Client, backend: AggregatedBackend) -> None:
    r = admin.get(f"/apis/{GV}/whoamis", headers={"X-Remote-User": "evil", "X-Remote-Group": "system:masters",
                                                    "X-Remote-Extra-Scopes": "all"})
    assert r.status_code == 200, r.text
    seen = r.json()["headers"]
    assert seen["x-remote-user"] == ["kubernetes-admin"]
    assert sorted(seen["x-remote-group"]) == ["system:authenticated", "system:masters"]
    assert "x-remote-extra-scopes" not in seen and "authorization" not in seen
    # impersonation runs in the proxy: the server sees the impersonated user, no Impersonate-* header
    r = admin.get(f"/apis/{GV}/whoamis", headers=[("Impersonate-User", "bob"),
                                                    ("Impersonate-Group", "system:masters"),
                                                    ("Impersonate-Extra-Reason", "a%20test")])
    assert r.status_code == 200, r.text
    seen = r.json()["headers"]
    assert seen["x-remote-user"] == ["bob"]
    assert sorted(seen["x-remote-group"]) == ["system:authenticated", "system:masters"]
    assert seen["x-remote-extra-reason"] == ["a%20test"]
    assert not [k for k in seen if k.startswith("impersonate-")]


def test_backend_connections_are_pooled(admin: httpx.Client, backend: AggregatedBackend) -> None:
    assert admin.get(f"/apis/{GV}/whoamis").status_code == 200
    before = backend.connections
    for _ in range(20):
        assert admin.get(f"/apis/{GV}/whoamis").status_code == 200
    # sequential requests share a kept-alive connection (the controllers may open one of their own)
    assert backend.connections - before <= 2


def test_authorization_runs_before_forwarding(stack: Stack, backend: AggregatedBackend,
                                              tokens: dict[str, str]) -> None:
    # the requests for whoamis only: the controller-manager lists and watches the backend's resources too
    whoamis = lambda: len([p for _, p in backend.requests if "/whoamis" in p])  # noqa: E731
    before = whoamis()
    ctx = ssl.create_default_context(cafile=str(stack.state / "pki" / "ca.crt"))
    with httpx.Client(base_url=stack.server, verify=ctx, timeout=30) as alice:
        r = alice.get(f"/apis/{GV}/whoamis", headers={"Authorization": f"Bearer {tokens['alice']}"})
    assert r.status_code == 403, r.text
    assert r.json()["reason"] == "Forbidden"
    assert whoamis() == before


def test_large_create_list_and_streaming_watch(admin: httpx.Client, backend: AggregatedBackend) -> None:
    big = {"apiVersion": GV, "kind": "Flunder", "metadata": {"name": "big"}, "spec": {"data": "x" * (3 << 20)}}
    r = admin.post(f"/apis/{GV}/namespaces/{NS}/flunders", content=json.dumps(big).encode(),
                   headers={"Content-Type": "application/json"})
    assert r.status_code == 201, r.text[:300]
    assert r.json()["receivedBytes"] > 3 << 20
    listed = admin.get(f"/apis/{GV}/namespaces/{NS}/flunders").json()
    assert [o["metadata"]["name"] for o in listed["items"]] == ["big"]
    lines: list[dict[str, Any]] = []
    got_one = threading.Event()

    def watch() -> None:
        with admin.stream("GET", f"/apis/{GV}/namespaces/{NS}/flunders?watch=true",
                          timeout=httpx.Timeout(30, read=60)) as resp:
            assert resp.status_code == 200
            for line in resp.iter_lines():
                lines.append(json.loads(line))
                if any(e["object"]["metadata"]["name"] == "small" for e in lines):
                    got_one.set()
                    return

    t = threading.Thread(target=watch, daemon=True)
    t.start()
    wait_for(lambda: len(lines) >= 1, what="the watch's first event")  # the big one, replayed
    small = {"apiVersion": GV, "kind": "Flunder", "metadata": {"name": "small"}}
    assert admin.post(f"/apis/{GV}/namespaces/{NS}/flunders", json=small).status_code == 201
    # the event arrives while the watch is held open: it was flushed through the proxy as it came
    assert got_one.wait(60)
    t.join(10)


AGGREGATED = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"


def remote_group(admin: httpx.Client) -> tuple[list[str], dict[str, Any]]:
    r = admin.get("/apis", headers={"Accept": AGGREGATED})
    assert r.headers["content-type"] == AGGREGATED
    items = r.json()["items"]
    names = [i["metadata"]["name"] for i in items]
    return names, next((i for i in items if i["metadata"]["name"] == GROUP), {})


def test_discovery_merges_the_remote_group(admin: httpx.Client, backend: AggregatedBackend, kubectl: Any) -> None:
    names, group = wait_for(lambda: (x := remote_group(admin))[1] and x, what="the remote group in /apis")
    # groupPriorityMinimum 1000: after every group apiary serves itself (all above 16000)
    assert names.index(GROUP) > names.index("discovery.k8s.io")
    version = group["versions"][0]
    assert (version["version"], version["freshness"]) == (VERSION, "Current")
    assert [r["resource"] for r in version["resources"]] == ["flunders"]
    legacy = admin.get("/apis").json()
    assert {"groupVersion": GV, "version": VERSION} in next(g for g in legacy["groups"] if g["name"] == GROUP)["versions"]
    r = admin.get(f"/apis/{GROUP}")
    assert r.status_code == 200 and r.json()["preferredVersion"]["groupVersion"] == GV
    assert admin.get(f"/apis/{GV}").json()["resources"][0]["name"] == "flunders"
    out = kubectl.run("get", "flunders", "-n", NS, "-o", "name").stdout
    assert "big" in out or out == ""


def test_openapi_v3_of_the_remote_group_version(admin: httpx.Client, backend: AggregatedBackend,
                                                kubectl: Any) -> None:
    index = wait_for(lambda: (i := admin.get("/openapi/v3").json()["paths"]).get(f"apis/{GV}") and i,
                     what="the remote group-version in the OpenAPI v3 index")
    assert "api/v1" in index
    doc = admin.get(index[f"apis/{GV}"]["serverRelativeURL"]).json()
    assert f"com.example.wardle.{VERSION}.Flunder" in doc["components"]["schemas"]
    out = kubectl.run("explain", "flunders.spec", f"--api-version={GV}").stdout
    assert "FlunderSpec is what a Flunder wants." in out and "reference" in out


def test_upgrade_requests_are_refused(admin: httpx.Client, backend: AggregatedBackend) -> None:
    r = admin.get(f"/apis/{GV}/namespaces/{NS}/flunders",
                  headers={"Connection": "Upgrade", "Upgrade": "SPDY/3.1"})
    assert r.status_code == 400, r.text
    assert r.json()["kind"] == "Status"


def test_wrong_ca_bundle_is_refused(admin: httpx.Client, backend: AggregatedBackend,
                                    tmp_path: Path) -> None:
    other = AggregatedBackend(tmp_path, backend.front_proxy_ca, name="other")  # only for its CA
    path = f"/apis/apiregistration.k8s.io/v1/apiservices/{APISERVICE}"
    modify(admin, path, lambda o: o["spec"].update(caBundle=base64.b64encode(other.ca_pem).decode()))
    try:
        r = wait_for(lambda: (x := admin.get(f"/apis/{GV}/whoamis")).status_code == 503 and x,
                     what="the APIService's new caBundle to take effect")
        assert APISERVICE in r.json()["message"]
        assert "certificate" in r.json()["message"].lower()
    finally:
        modify(admin, path, lambda o: o["spec"].update(caBundle=base64.b64encode(backend.ca_pem).decode()))
    wait_for(lambda: admin.get(f"/apis/{GV}/whoamis").status_code == 200, what="the right caBundle again")


def test_garbage_and_silence_from_the_backend(admin: httpx.Client, backend: AggregatedBackend) -> None:
    r = admin.get(f"/apis/{GV}/garbages")
    assert r.status_code == 503, r.text
    assert APISERVICE in r.json()["message"]
    # a request that is never answered ends at its deadline, the rest of the API is unaffected
    r = admin.get(f"/apis/{GV}/slows?timeout=2s")
    assert r.status_code == 504, r.text
    assert admin.get("/api/v1/namespaces/default/configmaps").status_code == 200


def test_silent_server_gives_504_within_the_timeout(admin: httpx.Client, backend: AggregatedBackend) -> None:
    silent = SilentServer().start()
    try:
        register(admin, silent, "silent", "silent.example.com", backend.ca_pem)
        # 503 until the proxy has seen the Service and Endpoints, then the request's deadline: 504
        r = wait_for(lambda: (x := admin.get("/apis/silent.example.com/v1alpha1/things?timeout=2s"))
                     .status_code == 504 and x, what="the silent server's request to time out")
        assert r.json()["reason"] == "Timeout"
    finally:
        silent.stop()
        admin.delete(f"/apis/apiregistration.k8s.io/v1/apiservices/{VERSION}.silent.example.com")


def condition(admin: httpx.Client, name: str = APISERVICE) -> dict[str, Any]:
    obj = admin.get(f"/apis/apiregistration.k8s.io/v1/apiservices/{name}").json()
    return next((c for c in (obj.get("status") or {}).get("conditions") or [] if c["type"] == "Available"), {})


def apiservice_row(kubectl: Any) -> list[str]:
    out = kubectl.run("get", "apiservices", APISERVICE, "--no-headers").stdout.split()
    return out[:2] + [" ".join(out[2:-1])]


def test_availability(admin: httpx.Client, backend: AggregatedBackend, kubectl: Any) -> None:
    ok = wait_for(lambda: (c := condition(admin)).get("status") == "True" and c, what="Available=True")
    assert (ok["reason"], ok["message"]) == ("Passed", "all checks passed")
    assert apiservice_row(kubectl) == [APISERVICE, f"{NS}/api", "True"]
    local = condition(admin, "v1.apiregistration.k8s.io")
    assert (local["status"], local["reason"], local["message"]) == ("True", "Local",
                                                                    "Local APIServices are always available")
    # a Service port the APIService does not name
    path = f"/apis/apiregistration.k8s.io/v1/apiservices/{APISERVICE}"
    modify(admin, path, lambda o: o["spec"]["service"].update(port=8443))
    try:
        bad = wait_for(lambda: (c := condition(admin)).get("reason") == "ServicePortError" and c,
                       what="ServicePortError")
        assert bad["status"] == "False"
        assert bad["message"] == f'service/api in "{NS}" is not listening on port 8443'
    finally:
        modify(admin, path, lambda o: o["spec"]["service"].update(port=443))
    wait_for(lambda: condition(admin).get("status") == "True", what="Available=True again")


def test_backend_down_then_up(admin: httpx.Client, backend: AggregatedBackend, kubectl: Any) -> None:
    wait_for(lambda: condition(admin).get("status") == "True", what="Available=True")
    backend.stop()
    try:
        r = admin.get(f"/apis/{GV}/whoamis")
        assert r.status_code == 503, r.text
        status = r.json()
        assert status["kind"] == "Status" and status["reason"] == "ServiceUnavailable"
        assert APISERVICE in status["message"]
        down = wait_for(lambda: (c := condition(admin)).get("status") == "False" and c, 60,
                        "Available=False")
        assert down["reason"] == "FailedDiscoveryCheck"
        assert f"/apis/{GV}" in down["message"]
        assert apiservice_row(kubectl) == [APISERVICE, f"{NS}/api", "False (FailedDiscoveryCheck)"]
        kubectl.run("get", "configmaps", "-n", "default")
        wait_for(lambda: remote_group(admin)[1].get("versions", [{}])[0].get("freshness") == "Stale", 60,
                 "the remote group marked Stale")
        resources = kubectl.run("api-resources", check=False)
        assert resources.returncode == 0, resources.stderr
        assert "configmaps" in resources.stdout
        metrics = admin.get("/metrics").text
        assert f'aggregator_unavailable_apiservice{{name="{APISERVICE}"}} 1.0' in metrics
        assert f'aggregator_unavailable_apiservice_total{{name="{APISERVICE}",reason="FailedDiscoveryCheck"}}' \
            in metrics
        # kube's gauge and counter of one stem, as a Prometheus scrape reads them: a strict OpenMetrics
        # parser takes the whole exposition (two families of one name would be refused)
        r = admin.get("/metrics", headers={"Accept": "application/openmetrics-text;version=1.0.0,text/plain;q=0.5"})
        assert r.headers["content-type"].startswith("application/openmetrics-text")
        families = {f.name: f for f in openmetrics_families(r.text)}
        gauge, counter = families["aggregator_unavailable_apiservice"], families["aggregator_unavailable_apiservice_total"]
        assert gauge.type == "gauge" and counter.type == "unknown"
        assert [s.value for s in gauge.samples if s.labels == {"name": APISERVICE}] == [1.0]
        assert [(s.name, s.value >= 1) for s in counter.samples
                if s.labels == {"name": APISERVICE, "reason": "FailedDiscoveryCheck"}] == [
            ("aggregator_unavailable_apiservice_total", True)]
    finally:
        backend.start()
    wait_for(lambda: admin.get(f"/apis/{GV}/whoamis").status_code == 200, what="the backend back")
    wait_for(lambda: condition(admin).get("status") == "True", 60, "Available=True after the restart")
    wait_for(lambda: remote_group(admin)[1]["versions"][0]["freshness"] == "Current", 60,
             "the remote group Current again")


@pytest.mark.parametrize("name,spec,message", [
    ("v1.both.example.com", {"caBundle": base64.b64encode(b"x").decode(), "insecureSkipTLSVerify": True},
     'spec.insecureSkipTLSVerify: Invalid value: true: may not be true if caBundle is present'),
    ("v1.zero.example.com", {"versionPriority": 0},
     "spec.versionPriority: Invalid value: 0: must be positive and less than 1000"),
    ("v1.wrong.example.com", {"group": "other.example.com"},
     'metadata.name: Invalid value: "v1.wrong.example.com": must be `spec.version+"."+spec.group`: '
     '"v1.other.example.com"'),
    ("v1.gpm.example.com", {"groupPriorityMinimum": 20001},
     "spec.groupPriorityMinimum: Invalid value: 20001: must be positive and less than 20000"),
])
def test_apiservice_bad_input(admin: httpx.Client, name: str, spec: dict[str, Any], message: str) -> None:
    group = name.split(".", 1)[1]
    body = {"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService", "metadata": {"name": name},
            "spec": {"group": group, "version": "v1", "groupPriorityMinimum": 1000, "versionPriority": 15,
                     "service": {"namespace": NS, "name": "api"}, **spec}}
    r = admin.post("/apis/apiregistration.k8s.io/v1/apiservices", json=body)
    assert r.status_code == 422, r.text
    status = r.json()
    assert status["reason"] == "Invalid"
    assert status["message"] == f'APIService.apiregistration.k8s.io "{name}" is invalid: {message}'


def test_service_port_defaults_to_443(admin: httpx.Client) -> None:
    body = {"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService", "metadata": {"name": "v1.port.example.com"},
            "spec": {"group": "port.example.com", "version": "v1", "groupPriorityMinimum": 1000, "versionPriority": 15,
                     "service": {"namespace": NS, "name": "api"}, "insecureSkipTLSVerify": True}}
    r = admin.post("/apis/apiregistration.k8s.io/v1/apiservices", json=body)
    assert r.status_code == 201, r.text
    assert r.json()["spec"]["service"]["port"] == 443
    admin.delete("/apis/apiregistration.k8s.io/v1/apiservices/v1.port.example.com")


def test_extension_apiserver_authentication_is_published_and_kept(stack: Stack, admin: httpx.Client) -> None:
    path = "/api/v1/namespaces/kube-system/configmaps/extension-apiserver-authentication"
    pki = stack.state / "pki"
    cm = wait_for(lambda: (r := admin.get(path)).status_code == 200 and r.json(), what="the ConfigMap")
    data = cm["data"]
    assert data["client-ca-file"] == (pki / "ca.crt").read_text()
    assert data["requestheader-client-ca-file"] == (pki / "front-proxy-ca.crt").read_text()
    assert json.loads(data["requestheader-allowed-names"]) == ["front-proxy-client"]
    assert json.loads(data["requestheader-username-headers"]) == ["X-Remote-User"]
    assert json.loads(data["requestheader-group-headers"]) == ["X-Remote-Group"]
    assert json.loads(data["requestheader-extra-headers-prefix"]) == ["X-Remote-Extra-"]
    # an edit is put right, and so is a deletion
    modify(admin, path, lambda o: o["data"].update({"requestheader-allowed-names": '["mallory"]'}))
    wait_for(lambda: admin.get(path).json()["data"] == data, what="the edit reverted")
    assert admin.delete(path).status_code == 200
    wait_for(lambda: (r := admin.get(path)).status_code == 200 and r.json()["data"] == data,
             what="the ConfigMap recreated")


def test_kubectl_create_of_a_remote_kind(kubectl: Any, backend: AggregatedBackend) -> None:
    out = kubectl.run("create", "-f", "-", input=(
        f"apiVersion: {GV}\nkind: Flunder\nmetadata:\n  name: from-kubectl\n  namespace: {NS}\n"), check=False)
    assert out.returncode == 0, out.stderr
    assert any(o["metadata"]["name"] == "from-kubectl" for o in backend.objects)


def test_external_name_service(admin: httpx.Client, backend: AggregatedBackend, tmp_path: Path) -> None:
    """An ExternalName Service resolves to its DNS name, with the APIService's port."""
    ext = AggregatedBackend(tmp_path, backend.front_proxy_ca, group="ext.example.com", version="v1",
                            service="extapi", namespace=NS, name="ext").start()
    try:
        apply(admin, f"/api/v1/namespaces/{NS}/services", {
            "apiVersion": "v1", "kind": "Service", "metadata": {"name": "extapi", "namespace": NS},
            "spec": {"type": "ExternalName", "externalName": "localhost"}})
        apply(admin, "/apis/apiregistration.k8s.io/v1/apiservices", {
            "apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService", "metadata": {"name": "v1.ext.example.com"},
            "spec": {"group": "ext.example.com", "version": "v1", "groupPriorityMinimum": 1000, "versionPriority": 15,
                     "service": {"namespace": NS, "name": "extapi", "port": ext.port},
                     "caBundle": base64.b64encode(ext.ca_pem).decode()}})
        r = wait_for(lambda: (x := admin.get("/apis/ext.example.com/v1/whoamis")).status_code == 200 and x,
                     what="forwarding through the ExternalName Service")
        assert r.json()["headers"]["x-remote-user"] == ["kubernetes-admin"]
        wait_for(lambda: condition(admin, "v1.ext.example.com").get("reason") == "Passed", what="Available")
    finally:
        ext.stop()
        admin.delete("/apis/apiregistration.k8s.io/v1/apiservices/v1.ext.example.com")
