"""RBAC, reviews and ServiceAccount tokens against the real stack (registry serves rbac.authorization.k8s.io,
the review kinds and serviceaccounts/token, forwarding them to the auth service)."""
from __future__ import annotations

import ssl
import time
import uuid

import httpx
import pytest

from services.cluster.stack import Stack
from tests.waiting import wait_for

RBAC = "/apis/rbac.authorization.k8s.io/v1"


def client(stack: Stack, token: str | None = None) -> httpx.Client:
    ctx = ssl.create_default_context(cafile=str(stack.state / "pki" / "ca.crt"))
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return httpx.Client(base_url=stack.server, verify=ctx, headers=headers, timeout=30)


@pytest.fixture(scope="module")
def ns(admin: httpx.Client) -> str:
    name = f"rbac-{uuid.uuid4().hex[:6]}"
    r = admin.post("/api/v1/namespaces", json={"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    assert r.status_code == 201, r.text
    return name


def test_bootstrap_policy_present_once(admin: httpx.Client) -> None:
    names = [o["metadata"]["name"] for o in admin.get(f"{RBAC}/clusterroles").json()["items"]]
    for n in ("cluster-admin", "admin", "edit", "view", "system:discovery", "system:basic-user",
              "system:public-info-viewer", "system:auth-delegator"):
        assert names.count(n) == 1, n
    bindings = [o["metadata"]["name"] for o in admin.get(f"{RBAC}/clusterrolebindings").json()["items"]]
    assert bindings.count("cluster-admin") == 1 and bindings.count("system:public-info-viewer") == 1
    r = admin.get(f"{RBAC}/namespaces/kube-system/roles/extension-apiserver-authentication-reader")
    assert r.status_code == 200
    # aggregation filled admin ⊇ edit ⊇ view
    view = wait_for(lambda: admin.get(f"{RBAC}/clusterroles/view").json().get("rules"))
    assert view and admin.get(f"{RBAC}/clusterroles/admin").json().get("rules")


def test_anonymous_gets_public_info_only(stack: Stack) -> None:
    with client(stack) as anon:
        assert anon.get("/healthz").status_code == 200
        assert anon.get("/version").status_code == 200
        r = anon.get("/api/v1/namespaces")
        assert r.status_code == 403 and r.json()["message"].startswith('namespaces is forbidden: User "system:anonymous"')


def test_subject_access_review(admin: httpx.Client, ns: str) -> None:
    body = {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
            "spec": {"user": "alice", "resourceAttributes": {"namespace": ns, "verb": "get", "resource": "configmaps"}}}
    r = admin.post("/apis/authorization.k8s.io/v1/subjectaccessreviews", json=body)
    assert r.status_code == 201, r.text
    assert r.json()["status"]["allowed"] is False
    r = admin.post("/apis/authorization.k8s.io/v1/subjectaccessreviews", json={**body, "spec": {}})
    assert r.status_code == 422 and r.json()["reason"] == "Invalid"


def test_binding_grants_and_revocation_is_prompt(stack: Stack, admin: httpx.Client, tokens: dict[str, str],
                                                  ns: str) -> None:
    role = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": "cm-reader"},
            "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list"]}]}
    assert admin.post(f"{RBAC}/namespaces/{ns}/roles", json=role).status_code == 201
    binding = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": "alice"},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "cm-reader"},
               "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "alice"}]}
    with client(stack, tokens["alice"]) as alice:
        assert alice.get(f"/api/v1/namespaces/{ns}/configmaps").status_code == 403
        assert admin.post(f"{RBAC}/namespaces/{ns}/rolebindings", json=binding).status_code == 201
        assert wait_for(lambda: alice.get(f"/api/v1/namespaces/{ns}/configmaps").status_code == 200, 2)
        ssar = {"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
                "spec": {"resourceAttributes": {"namespace": ns, "verb": "list", "resource": "configmaps"}}}
        r = alice.post("/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", json=ssar)
        assert r.status_code == 201 and r.json()["status"]["allowed"] is True, r.text
        # escalation: alice may not grant what she lacks
        secrets = {**role, "metadata": {"name": "sneaky"},
                   "rules": [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}]}
        r = alice.post(f"{RBAC}/namespaces/{ns}/roles", json=secrets)
        assert r.status_code == 403
        assert admin.delete(f"{RBAC}/namespaces/{ns}/rolebindings/alice").status_code == 200
        start = time.monotonic()
        assert wait_for(lambda: alice.get(f"/api/v1/namespaces/{ns}/configmaps").status_code == 403, 3)
        assert time.monotonic() - start < 1.5


def test_whoami_and_rules_review(stack: Stack, tokens: dict[str, str]) -> None:
    with client(stack, tokens["alice"]) as alice:
        r = alice.post("/apis/authentication.k8s.io/v1/selfsubjectreviews",
                       json={"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"})
        assert r.status_code == 201, r.text
        assert r.json()["status"]["userInfo"]["username"] == "alice"
        r = alice.post("/apis/authorization.k8s.io/v1/selfsubjectrulesreviews",
                       json={"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectRulesReview",
                             "spec": {"namespace": "default"}})
        assert r.status_code == 201, r.text
        assert any("selfsubjectaccessreviews" in x["resources"] for x in r.json()["status"]["resourceRules"])


def test_service_account_token_lifecycle(stack: Stack, admin: httpx.Client, ns: str) -> None:
    sa = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "bot"}}
    assert admin.post(f"/api/v1/namespaces/{ns}/serviceaccounts", json=sa).status_code == 201
    r = admin.post(f"/api/v1/namespaces/{ns}/serviceaccounts/bot/token",
                   json={"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                         "spec": {"expirationSeconds": 600}})
    assert r.status_code == 201, r.text
    token = r.json()["status"]["token"]
    r = admin.post(f"/api/v1/namespaces/{ns}/serviceaccounts/bot/token",
                   json={"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                         "spec": {"expirationSeconds": 60}})
    assert r.status_code == 422
    with client(stack, token) as bot:
        r = bot.post("/apis/authentication.k8s.io/v1/selfsubjectreviews",
                     json={"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"})
        assert r.status_code == 201, r.text
        info = r.json()["status"]["userInfo"]
        assert info["username"] == f"system:serviceaccount:{ns}:bot"
        assert set(info["groups"]) == {"system:serviceaccounts", f"system:serviceaccounts:{ns}",
                                       "system:authenticated"}
        review = admin.post("/apis/authentication.k8s.io/v1/tokenreviews",
                            json={"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
                                  "spec": {"token": token}})
        assert review.status_code == 201 and review.json()["status"]["authenticated"] is True
        assert admin.delete(f"/api/v1/namespaces/{ns}/serviceaccounts/bot").status_code == 200
        # the auth service refuses it at once; the proxy may reuse a success for 10 s, as kube's token cache does
        assert wait_for(lambda: admin.post(
            "/apis/authentication.k8s.io/v1/tokenreviews",
            json={"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": token}},
        ).json()["status"]["authenticated"] is False, 3)
        assert wait_for(lambda: bot.get("/version").status_code == 401, 12)


def test_bootstrap_not_duplicated_after_auth_restart(stack: Stack, admin: httpx.Client) -> None:
    import os
    import signal

    pid = stack.pid("auth")
    assert pid is not None
    os.killpg(pid, signal.SIGTERM)

    def gone() -> bool:
        try:
            os.waitpid(pid, os.WNOHANG)  # the stack fixture's processes are our children
        except ChildProcessError:
            pass
        return stack.pid("auth") is None

    assert wait_for(gone, 10)
    stack.spawn("auth")
    assert not stack.wait(["auth"], 60)
    items = admin.get(f"{RBAC}/clusterroles").json()["items"]
    names = [o["metadata"]["name"] for o in items]
    assert len(names) == len(set(names)) and "cluster-admin" in names


def test_service_account_issuer_discovery(stack: Stack, admin: httpx.Client, ns: str) -> None:
    """A relying party reads the issuer's configuration and keys (as a service account, which kube's
    system:service-account-issuer-discovery binding allows) and verifies a token with them."""
    import jwt

    sa = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "relying-party"}}
    assert admin.post(f"/api/v1/namespaces/{ns}/serviceaccounts", json=sa).status_code == 201
    r = admin.post(f"/api/v1/namespaces/{ns}/serviceaccounts/relying-party/token",
                   json={"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest"})
    assert r.status_code == 201, r.text
    token = r.json()["status"]["token"]
    with client(stack, token) as party:
        r = party.get("/.well-known/openid-configuration")
        assert r.status_code == 200, r.text
        assert r.headers["content-type"] == "application/json"
        assert r.headers["cache-control"] == "public, max-age=3600"
        config = r.json()
        port = stack.port("proxy", "https")
        assert config["jwks_uri"] == f"https://127.0.0.1:{port}/openid/v1/jwks"
        assert config["issuer"] == "https://kubernetes.default.svc.cluster.local"
        keys = party.get("/openid/v1/jwks")
        assert keys.status_code == 200 and keys.headers["content-type"] == "application/jwk-set+json"
    kid = jwt.get_unverified_header(token)["kid"]
    key = jwt.PyJWK(next(k for k in keys.json()["keys"] if k["kid"] == kid))
    claims = jwt.decode(token, key.key, algorithms=config["id_token_signing_alg_values_supported"],
                        audience=config["issuer"], issuer=config["issuer"])
    assert claims["sub"] == f"system:serviceaccount:{ns}:relying-party"
    with client(stack) as anonymous:  # not bound for system:unauthenticated, as kube's default
        assert anonymous.get("/openid/v1/jwks").status_code == 403
