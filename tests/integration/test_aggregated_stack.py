"""The local runner's aggregated servers: a stack of its own that runs an aggregated server as one
more process, registered (Service, Endpoints, APIService, RBAC) as a cluster would register it."""
from __future__ import annotations

import ssl
import time
from collections.abc import Iterator

import httpx
import pytest

from tests.conftest import TEST_OFFSET
from services.cluster.aggregated import AggregatedServer, APIServiceSpec
from services.cluster.stack import ROOT, Stack

OFFSET = TEST_OFFSET + 600
GROUP, VERSION = "stacked.example.com", "v1beta1"
SERVER = AggregatedServer(name="stacked-apiserver", namespace="stacked", port=8443, module="tools.fakeservers",
                          apiservices=(APIServiceSpec(GROUP, VERSION, 1000, 15),),
                          args=("--group", GROUP, "--version", VERSION))


@pytest.fixture(scope="module")
def stacked() -> Iterator[Stack]:
    s = Stack(ROOT / ".apiary" / "test-aggregated", OFFSET, aggregated=[SERVER])
    s.start(fresh=True)
    try:
        yield s
    finally:
        s.stop(quiet=True)


def test_stack_runs_and_registers_the_aggregated_server(stacked: Stack) -> None:
    pki = stacked.state / "pki"
    ctx = ssl.create_default_context(cafile=str(pki / "ca.crt"))
    ctx.load_cert_chain(str(pki / "admin.crt"), str(pki / "admin.key"))
    with httpx.Client(base_url=stacked.server, verify=ctx, timeout=30) as admin:
        ep = admin.get("/api/v1/namespaces/stacked/endpoints/stacked-apiserver").json()
        assert ep["subsets"][0]["addresses"] == [{"ip": "127.0.0.1"}]
        assert ep["subsets"][0]["ports"][0]["port"] == 8443 + OFFSET
        deadline = time.monotonic() + 60
        while True:
            api = admin.get(f"/apis/apiregistration.k8s.io/v1/apiservices/{VERSION}.{GROUP}").json()
            cond = next((c for c in (api.get("status") or {}).get("conditions") or []), {})
            if cond.get("status") == "True":
                break
            assert time.monotonic() < deadline, cond
            time.sleep(0.3)
        assert cond["reason"] == "Passed"
        r = admin.get(f"/apis/{GROUP}/{VERSION}/whoamis")
        assert r.status_code == 200, r.text
        assert r.json()["headers"]["x-remote-user"] == ["kubernetes-admin"]
        binding = admin.get("/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/"
                            "stacked-apiserver:system:auth-delegator").json()
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "stacked-apiserver",
                                        "namespace": "stacked"}]
    # its own identity may do what an aggregated server needs: read the front-proxy trust, review
    # tokens and access (the auth-delegator and auth-reader bindings), and no more
    ctx = ssl.create_default_context(cafile=str(pki / "ca.crt"))
    ctx.load_cert_chain(str(pki / "stacked-apiserver-client.crt"), str(pki / "stacked-apiserver-client.key"))
    with httpx.Client(base_url=stacked.server, verify=ctx, timeout=30) as own:
        r = own.get("/api/v1/namespaces/kube-system/configmaps/extension-apiserver-authentication")
        assert r.status_code == 200, r.text
        r = own.post("/apis/authorization.k8s.io/v1/subjectaccessreviews", json={
            "apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
            "spec": {"user": "alice", "resourceAttributes": {"verb": "get", "resource": "pods"}}})
        assert r.status_code == 201, r.text
        assert own.get("/api/v1/namespaces/kube-system/secrets").status_code == 403
    assert stacked.status()
    # start is idempotent: everything healthy is left alone
    pid = stacked.pid("stacked-apiserver")
    stacked.start()
    assert stacked.pid("stacked-apiserver") == pid
