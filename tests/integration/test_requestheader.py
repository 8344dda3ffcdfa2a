"""Who a request acts as, against the real stack: request-header authentication and impersonation.

X-Remote-* headers count only from the front-proxy client certificate; from the admin certificate,
a bearer token or no credentials they are ignored. kubectl --as / --as-group impersonate.
"""
from __future__ import annotations

import ssl
import time
from collections.abc import Iterator

import httpx
import pytest

from services.cluster.stack import Stack

CONFIGMAPS = "/api/v1/namespaces/default/configmaps"
ALICE_CANNOT_LIST = ('configmaps is forbidden: User "alice" cannot list resource "configmaps" in API group "" '
                     'in the namespace "default"')


def _client(stack: Stack, cert: str | None = None, token: str | None = None) -> httpx.Client:
    pki = stack.state / "pki"
    ctx = ssl.create_default_context(cafile=str(pki / "ca.crt"))
    if cert:
        ctx.load_cert_chain(str(pki / f"{cert}.crt"), str(pki / f"{cert}.key"))
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return httpx.Client(base_url=stack.server, verify=ctx, timeout=30, headers=headers)


@pytest.fixture(scope="module")
def front_proxy(stack: Stack) -> Iterator[httpx.Client]:
    with _client(stack, cert="front-proxy-client") as c:
        yield c


@pytest.fixture(scope="module")
def alice(stack: Stack, tokens: dict[str, str]) -> Iterator[httpx.Client]:
    with _client(stack, token=tokens["alice"]) as c:
        yield c


@pytest.fixture(scope="module")
def nobody(stack: Stack) -> Iterator[httpx.Client]:
    with _client(stack) as c:
        yield c


# request-header authentication -----------------------------------------------------------------

def test_spoofed_headers_from_the_admin_certificate_are_ignored(admin: httpx.Client) -> None:
    r = admin.get(CONFIGMAPS, headers={"X-Remote-User": "alice", "X-Remote-Group": "nobody"})
    assert r.status_code == 200, r.text


def test_spoofed_headers_with_a_token_are_ignored(alice: httpx.Client) -> None:
    r = alice.get(CONFIGMAPS, headers={"X-Remote-User": "kubernetes-admin", "X-Remote-Group": "system:masters"})
    assert r.status_code == 403
    assert r.json()["message"] == ALICE_CANNOT_LIST


def test_spoofed_headers_without_credentials_are_ignored(nobody: httpx.Client) -> None:
    r = nobody.get(CONFIGMAPS, headers={"X-Remote-User": "kubernetes-admin", "X-Remote-Group": "system:masters"})
    assert r.status_code in (401, 403)
    if r.status_code == 403:
        assert 'User "system:anonymous"' in r.json()["message"]


def test_front_proxy_certificate_asserts_the_identity(front_proxy: httpx.Client) -> None:
    r = front_proxy.get(CONFIGMAPS, headers={"X-Remote-User": "alice", "X-Remote-Group": "dev"})
    assert r.status_code == 403
    assert r.json()["message"] == ALICE_CANNOT_LIST
    # the groups it asserts count as well
    r = front_proxy.get(CONFIGMAPS, headers={"X-Remote-User": "alice", "X-Remote-Group": "system:masters"})
    assert r.status_code == 200, r.text


def test_front_proxy_certificate_is_not_a_user_identity(front_proxy: httpx.Client) -> None:
    # signed by the request-header CA only: without X-Remote-User no authenticator accepts it
    r = front_proxy.get(CONFIGMAPS)
    assert r.status_code == 401 and r.json()["reason"] == "Unauthorized"


# impersonation ---------------------------------------------------------------------------------

def test_kubectl_as(kubectl) -> None:  # type: ignore[no-untyped-def]
    p = kubectl.run("--as", "alice", "-n", "default", "get", "cm", check=False)
    assert p.returncode != 0
    assert f"Error from server (Forbidden): {ALICE_CANNOT_LIST}" in p.stderr
    p = kubectl.run("--as", "alice", "--as-group", "system:masters", "-n", "default", "get", "cm", "-o", "name")
    assert p.returncode == 0


def test_impersonation_needs_permission(kubectl, tokens: dict[str, str]) -> None:  # type: ignore[no-untyped-def]
    p = kubectl.with_token(tokens["alice"], "alice").run("--as", "kubernetes-admin", "get", "cm", check=False)
    assert p.returncode != 0
    assert ('users "kubernetes-admin" is forbidden: User "alice" cannot impersonate resource "users" in API group "" '
            "at the cluster scope") in p.stderr


def test_impersonated_groups_without_a_user(admin: httpx.Client) -> None:
    r = admin.get(CONFIGMAPS, headers={"Impersonate-Group": "system:masters"})
    assert r.status_code == 400 and r.json()["reason"] == "BadRequest"
    assert r.json()["message"] == "requested [{Group  system:masters    }] without impersonating a user"


# authorization cache ---------------------------------------------------------------------------

def _rbac_served(admin: httpx.Client) -> bool:
    return admin.get("/apis/rbac.authorization.k8s.io/v1/namespaces/default/rolebindings").status_code == 200


def test_deleted_rolebinding_stops_granting_within_a_second(admin: httpx.Client, alice: httpx.Client) -> None:
    if not _rbac_served(admin):
        pytest.skip("the registry does not serve rbac.authorization.k8s.io yet")
    base = "/apis/rbac.authorization.k8s.io/v1/namespaces/default"
    role = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": {"name": "cm-reader-rh"},
            "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list"]}]}
    binding = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
               "metadata": {"name": "alice-cm-reader-rh"},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "cm-reader-rh"},
               "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "alice"}]}
    assert admin.post(f"{base}/roles", json=role).status_code == 201
    try:
        assert admin.post(f"{base}/rolebindings", json=binding).status_code == 201
        deadline = time.monotonic() + 10
        while alice.get(CONFIGMAPS).status_code != 200:
            assert time.monotonic() < deadline, "the new RoleBinding never granted"
            time.sleep(0.05)
        for _ in range(5):  # warm the proxy's decision cache
            assert alice.get(CONFIGMAPS).status_code == 200
        assert admin.delete(f"{base}/rolebindings/alice-cm-reader-rh").status_code == 200
        deadline = time.monotonic() + 10
        while (r := alice.get(CONFIGMAPS)).status_code == 200:  # the cached decision is invalidated
            assert time.monotonic() < deadline, "the deleted RoleBinding still grants"
            time.sleep(0.05)
        assert r.status_code == 403 and r.json()["message"] == ALICE_CANNOT_LIST
    finally:
        admin.delete(f"{base}/rolebindings/alice-cm-reader-rh")
        admin.delete(f"{base}/roles/cm-reader-rh")
