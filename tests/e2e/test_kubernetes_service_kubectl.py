"""The `kubernetes` Service as kube-apiserver keeps it, through kubectl: in `default`, ClusterIP the first address
of the service range, port 443 "https" to the API server's port, with Endpoints and an EndpointSlice listing the
API server (each proxy replica's lease; tests/integration/test_replicas.py has two), put back when deleted;
`kubectl cluster-info` names the control plane."""
from __future__ import annotations

import json
import time
from collections.abc import Callable
from urllib.parse import urlsplit

import pytest

pytestmark = pytest.mark.stack


def eventually(check: Callable[[], object], what: str, timeout: float = 30.0) -> object:
    deadline = time.monotonic() + timeout
    while not (value := check()):
        assert time.monotonic() < deadline, f"{what} never happened"
        time.sleep(0.2)
    return value


def get(kubectl, *args: str) -> dict | None:
    r = kubectl.run("get", *args, "-o", "json", check=False)
    return json.loads(r.stdout) if r.returncode == 0 else None


def test_service_endpoints_and_slice(kubectl):
    port = urlsplit(kubectl.stack.server).port
    svc = eventually(lambda: get(kubectl, "-n", "default", "service", "kubernetes"), "the Service")
    assert svc["metadata"]["labels"] == {"component": "apiserver", "provider": "kubernetes"}
    spec = svc["spec"]
    assert spec["clusterIP"] == "10.96.0.1" and spec["clusterIPs"] == ["10.96.0.1"] and spec["type"] == "ClusterIP"
    assert spec["ports"] == [{"name": "https", "port": 443, "protocol": "TCP", "targetPort": port}]
    row = kubectl.run("get", "-n", "default", "service", "kubernetes", "--no-headers").stdout.split()
    assert row[:5] == ["kubernetes", "ClusterIP", "10.96.0.1", "<none>", "443/TCP"]

    endpoints = eventually(lambda: (e := get(kubectl, "-n", "default", "endpoints", "kubernetes")) and
                           e.get("subsets") and e, "the Endpoints")
    assert endpoints["subsets"] == [{"addresses": [{"ip": "127.0.0.1"}],
                                     "ports": [{"name": "https", "port": port, "protocol": "TCP"}]}]
    assert endpoints["metadata"]["labels"] == {"endpointslice.kubernetes.io/skip-mirror": "true"}
    slices = get(kubectl, "-n", "default", "endpointslices", "-l", "kubernetes.io/service-name=kubernetes")
    assert [(s["metadata"]["name"], s["addressType"], s["endpoints"], s["ports"]) for s in slices["items"]] == [
        ("kubernetes", "IPv4", [{"addresses": ["127.0.0.1"], "conditions": {"ready": True}}],
         [{"name": "https", "port": port, "protocol": "TCP"}])]
    leases = get(kubectl, "-n", "kube-system", "leases", "-l", "apiserver.kubernetes.io/identity=kube-apiserver")
    assert [lease["metadata"]["annotations"]["apiary.io/endpoint"] for lease in leases["items"]] == \
        [f"127.0.0.1:{port}"]

    out = kubectl.run("cluster-info").stdout
    assert f"Kubernetes control plane is running at https://127.0.0.1:{port}" in out


def test_deleted_objects_come_back(kubectl):
    eventually(lambda: get(kubectl, "-n", "default", "endpointslice", "kubernetes"), "the EndpointSlice")
    kubectl.run("-n", "default", "delete", "endpoints", "kubernetes")
    kubectl.run("-n", "default", "delete", "endpointslice", "kubernetes")
    kubectl.run("-n", "default", "delete", "service", "kubernetes")
    # recreated within the controller's sync interval (10 s)
    eventually(lambda: (e := get(kubectl, "-n", "default", "endpoints", "kubernetes")) and e.get("subsets"),
               "the Endpoints again")
    eventually(lambda: get(kubectl, "-n", "default", "endpointslice", "kubernetes"), "the EndpointSlice again")
    svc = eventually(lambda: get(kubectl, "-n", "default", "service", "kubernetes"), "the Service again")
    assert svc["spec"]["clusterIP"] == "10.96.0.1"
