"""The controller-manager's Client from a kubeconfig against a real HTTPS server on loopback (aiohttp's
TestServer with certificates made by services/cluster/certs.py): the client certificate or the bearer token the
kubeconfig names reaches the server over TLS verified with its CA; Status answers become their errors;
discovery asks for aggregated discovery as client-go does."""
from __future__ import annotations

import base64
import json
import ssl
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from services.common.errors import Conflict, NotFound, ServiceUnavailable
from services.controllermanager.client import AGGREGATED_DISCOVERY, USER_AGENT, Client, Resource
from services.cluster import certs

LEASES = Resource("coordination.k8s.io", "v1", "leases", "Lease", True, frozenset({"get", "update"}))
DISCOVERY = {"kind": "APIGroupDiscoveryList", "apiVersion": "apidiscovery.k8s.io/v2", "items": [
    {"metadata": {"name": "coordination.k8s.io"}, "versions": [{"version": "v1", "freshness": "Current", "resources": [
        {"resource": "leases", "responseKind": {"group": "coordination.k8s.io", "version": "v1", "kind": "Lease"},
         "scope": "Namespaced", "singularResource": "lease", "verbs": ["get", "update"]}]}]}]}
DISCOVERY_TYPE = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"


@pytest.fixture
def pki(tmp_path: Path) -> Path:
    ca = certs.make_ca(tmp_path / "ca", "test-ca")
    certs.make_cert(tmp_path / "apiserver", ca, "kube-apiserver", server=True)
    certs.make_cert(tmp_path / "controller-manager", ca, "system:kube-controller-manager", client=True)
    return tmp_path


@pytest.fixture
async def server(pki: Path) -> AsyncIterator[tuple[TestServer, list[dict[str, Any]]]]:
    """An HTTPS API that answers each request with who asked (certificate subject, Authorization, User-Agent)."""
    seen: list[dict[str, Any]] = []

    async def handle(request: web.Request) -> web.StreamResponse:
        assert request.transport is not None
        cert = request.transport.get_extra_info("peercert") or {}
        subject = dict(kv[0] for kv in cert.get("subject", ()))
        who = {"cn": subject.get("commonName", ""), "authorization": request.headers.get("Authorization", ""),
               "userAgent": request.headers.get("User-Agent", ""), "accept": request.headers.get("Accept", ""),
               "path": request.path, "method": request.method}
        seen.append(who)
        if request.path in ("/api", "/apis"):
            body = DISCOVERY if request.path == "/apis" else {**DISCOVERY, "items": []}
            return web.Response(body=json.dumps(body), headers={"Content-Type": DISCOVERY_TYPE})
        if request.path.endswith("/missing"):
            return web.json_response({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 404,
                                      "reason": "NotFound", "message": 'leases.coordination.k8s.io "missing" not found',
                                      "details": {"name": "missing", "group": "coordination.k8s.io", "kind": "leases"}},
                                     status=404)
        if request.method == "PUT":
            return web.json_response({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 409,
                                      "reason": "Conflict", "message": "the object has been modified"}, status=409)
        return web.json_response({"kind": "Lease", "metadata": {"name": "l"}, "who": who})

    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(pki / "ca.crt"))
    ctx.load_cert_chain(pki / "apiserver.crt", pki / "apiserver.key")
    ctx.verify_mode = ssl.CERT_OPTIONAL  # a client certificate when the kubeconfig has one, else the token
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handle)
    srv = TestServer(app, host="127.0.0.1")
    await srv.start_server(ssl=ctx)
    try:
        yield srv, seen
    finally:
        await srv.close()


def kubeconfig(path: Path, server: str, cluster: str, user: str) -> str:
    path.write_text("apiVersion: v1\nkind: Config\n"
                    f"clusters:\n- name: c\n  cluster:\n    server: {server}\n    {cluster}\n"
                    f"users:\n- name: u\n  user:\n    {user}\n"
                    "contexts:\n- name: x\n  context:\n    cluster: c\n    user: u\ncurrent-context: x\n")
    return str(path)


async def test_the_client_certificate_of_the_kubeconfig_and_statuses(pki: Path, server) -> None:
    srv, seen = server
    path = kubeconfig(pki / "cm.kubeconfig", str(srv.make_url("")).rstrip("/"), f"certificate-authority: {pki / 'ca.crt'}",
                      f"client-certificate: {pki / 'controller-manager.crt'}\n    "
                      f"client-key: {pki / 'controller-manager.key'}")
    client = Client.from_kubeconfig(path)
    try:
        lease = await client.get(LEASES, "kube-system", "l")
        assert lease["who"]["cn"] == "system:kube-controller-manager" and lease["who"]["authorization"] == ""
        assert lease["who"]["path"] == "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/l"
        assert lease["who"]["userAgent"] == USER_AGENT
        with pytest.raises(NotFound) as missing:
            await client.get(LEASES, "kube-system", "missing")
        assert missing.value.details == {"name": "missing", "group": "coordination.k8s.io", "kind": "leases"}
        with pytest.raises(Conflict, match="the object has been modified"):
            await client.update(LEASES, {"metadata": {"name": "l", "namespace": "kube-system"}})
        assert await client.discover() == [Resource("coordination.k8s.io", "v1", "leases", "Lease", True,
                                                    frozenset({"get", "update"}))]
        assert [s["accept"] for s in seen if s["path"] in ("/api", "/apis")] == [AGGREGATED_DISCOVERY] * 2
    finally:
        await client.close()


async def test_a_bearer_token_and_an_embedded_ca(pki: Path, server) -> None:
    srv, _ = server
    ca = base64.b64encode((pki / "ca.crt").read_bytes()).decode()
    path = kubeconfig(pki / "token.kubeconfig", str(srv.make_url("")).rstrip("/"),
                      f"certificate-authority-data: {ca}", "token: s3cret")
    client = Client.from_kubeconfig(path)
    try:
        who = (await client.get(LEASES, "kube-system", "l"))["who"]
        assert who["authorization"] == "Bearer s3cret" and who["cn"] == ""
    finally:
        await client.close()


async def test_a_server_the_ca_does_not_trust_is_unavailable(pki: Path, server, tmp_path: Path) -> None:
    srv, seen = server
    certs.make_ca(tmp_path / "other-ca", "other-ca")
    path = kubeconfig(pki / "other.kubeconfig", str(srv.make_url("")).rstrip("/"),
                      f"certificate-authority: {tmp_path / 'other-ca.crt'}", "token: s3cret")
    client = Client.from_kubeconfig(path)
    try:
        with pytest.raises(ServiceUnavailable, match="(?i)certificate"):
            await client.get(LEASES, "kube-system", "l")
        assert seen == []
    finally:
        await client.close()
