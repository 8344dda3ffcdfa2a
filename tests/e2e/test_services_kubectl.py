"""Services and Endpoints with kubectl: create service, get svc/endpoints columns, ClusterIP allocation."""
from __future__ import annotations

import ipaddress
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx


def test_create_service_and_columns(kubectl: Any) -> None:
    ns = f"svc-{uuid.uuid4().hex[:6]}"
    kubectl.run("create", "namespace", ns)
    kubectl.run("-n", ns, "create", "service", "clusterip", "web", "--tcp=80:8080", "--tcp=443:8443")
    kubectl.run("-n", ns, "create", "service", "externalname", "ext", "--external-name", "example.com")
    out = kubectl.run("-n", ns, "get", "svc").stdout.splitlines()
    assert out[0].split() == ["NAME", "TYPE", "CLUSTER-IP", "EXTERNAL-IP", "PORT(S)", "AGE"]
    rows = {line.split()[0]: line.split() for line in out[1:]}
    assert rows["web"][1] == "ClusterIP"
    assert ipaddress.ip_address(rows["web"][2]) in ipaddress.ip_network("10.96.0.0/12")
    assert rows["web"][3:5] == ["<none>", "80/TCP,443/TCP"]
    assert rows["ext"][1:5] == ["ExternalName", "<none>", "example.com", "<none>"]
    wide = kubectl.run("-n", ns, "get", "svc", "web", "-o", "wide").stdout.splitlines()
    assert wide[0].split()[-1] == "SELECTOR" and wide[1].split()[-1] == "app=web"
    kubectl.run("-n", ns, "apply", "-f", "-", input=(
        "apiVersion: v1\nkind: Endpoints\nmetadata:\n  name: web\n"
        "subsets:\n- addresses:\n  - ip: 127.0.0.1\n  - ip: 127.0.0.2\n  ports:\n  - port: 8080\n"))
    out = kubectl.run("-n", ns, "get", "endpoints").stdout.splitlines()
    assert out[0].split() == ["NAME", "ENDPOINTS", "AGE"]
    assert out[1].split()[:2] == ["web", "127.0.0.1:8080,127.0.0.2:8080"]
    kubectl.run("-n", ns, "apply", "-f", "-", input=(
        "apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata:\n  name: web-1\n"
        "  labels:\n    kubernetes.io/service-name: web\naddressType: IPv4\n"
        "endpoints:\n- addresses: [127.0.0.1]\nports:\n- port: 8080\n  name: 80-8080\n"))
    out = kubectl.run("-n", ns, "get", "endpointslices").stdout.splitlines()
    assert out[0].split() == ["NAME", "ADDRESSTYPE", "PORTS", "ENDPOINTS", "AGE"]
    assert out[1].split()[:4] == ["web-1", "IPv4", "8080", "127.0.0.1"]
    described = kubectl.run("-n", ns, "describe", "svc", "web").stdout
    assert "ClusterIP" in described and "127.0.0.1:8080" in described
    kubectl.run("delete", "namespace", ns, "--wait=false")


def test_cluster_ips_unique_under_concurrent_creates_and_released(admin: httpx.Client) -> None:
    ns = "default"
    names = [f"conc-{uuid.uuid4().hex[:6]}-{i}" for i in range(12)]

    def create(name: str) -> httpx.Response:
        return admin.post(f"/api/v1/namespaces/{ns}/services", json={
            "apiVersion": "v1", "kind": "Service", "metadata": {"name": name},
            "spec": {"ports": [{"port": 80}]}})

    with ThreadPoolExecutor(len(names)) as pool:
        answers = list(pool.map(create, names))
    assert [r.status_code for r in answers] == [201] * len(names), [r.text for r in answers if r.status_code != 201]
    ips = [r.json()["spec"]["clusterIP"] for r in answers]
    assert len(set(ips)) == len(ips)
    # a taken address cannot be had twice; once its Service is gone it can
    taken = ips[0]
    r = admin.post(f"/api/v1/namespaces/{ns}/services", json={
        "apiVersion": "v1", "kind": "Service", "metadata": {"name": "conc-again"},
        "spec": {"clusterIP": taken, "ports": [{"port": 80}]}})
    assert r.status_code == 422 and "provided IP is already allocated" in r.json()["message"], r.text
    for name in names:
        assert admin.delete(f"/api/v1/namespaces/{ns}/services/{name}").status_code == 200
    r = admin.post(f"/api/v1/namespaces/{ns}/services", json={
        "apiVersion": "v1", "kind": "Service", "metadata": {"name": "conc-again"},
        "spec": {"clusterIP": taken, "ports": [{"port": 80}]}})
    assert r.status_code == 201, r.text
    assert r.json()["spec"]["clusterIP"] == taken
    admin.delete(f"/api/v1/namespaces/{ns}/services/conc-again")
