"""Identities and decisions from outside the cluster: JWT issuers by --authentication-config, a token
webhook, and authorization webhooks by --authorization-config.

The module starts its own stack (its own state directory and ports) whose auth service trusts two
OIDC issuers, a TokenReview webhook and a SubjectAccessReview webhook written for the tests, all real
HTTPS servers on loopback.
"""
from __future__ import annotations

import json
import os
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import TEST_OFFSET, Kubectl
from tools.fakeservers import AuthzWebhook, Issuer, TokenWebhook
from tests.integration.procs import free_port
from services.cluster.stack import ROOT, Stack
from tests.waiting import wait_for

STATE = ROOT / ".apiary" / "test-authn"
OFFSET = TEST_OFFSET + 300
WEBHOOK_TTL = 3.0

HOOK_USER = {"username": "hooky", "uid": "hook-uid", "groups": ["hookers"], "extra": {"example.com/via": ["hook"]}}


def auth_config(first: Issuer, second: Issuer) -> str:
    def ca(i: Issuer) -> str:
        return "\n".join("      " + line for line in i.ca_pem.strip().splitlines())

    return f"""apiVersion: apiserver.config.k8s.io/v1
kind: AuthenticationConfiguration
anonymous:
  enabled: true
  conditions:
  - path: /version
jwt:
- issuer:
    url: {first.url}
    audiences: [apiary]
    certificateAuthority: |
{ca(first)}
  claimValidationRules:
  - expression: "!has(claims.blocked) || claims.blocked != true"
    message: the token is blocked
  claimMappings:
    username:
      claim: sub
      prefix: "oidc:"
    groups:
      claim: groups
      prefix: "oidc:"
    uid:
      expression: "has(claims.uid) ? claims.uid : ''"
    extra:
    - key: example.com/tenant
      valueExpression: "has(claims.tenant) ? claims.tenant : ''"
  userValidationRules:
  - expression: "!user.username.startsWith('oidc:system')"
    message: no system users from this issuer
- issuer:
    url: {second.url}
    audiences: [other, apiary]
    audienceMatchPolicy: MatchAny
    certificateAuthority: |
{ca(second)}
  claimValidationRules:
  - expression: "claims.email_verified == true"
    message: the email must be verified
  claimMappings:
    username:
      expression: "'second:' + claims.email"
    groups:
      expression: "claims.roles.map(r, 'role:' + r)"
"""


def authz_config(hook: Path, dead: Path) -> str:
    def webhook(name: str, kubeconfig: Path, policy: str, namespace: str) -> str:
        return f"""- type: Webhook
  name: {name}
  webhook:
    timeout: 3s
    subjectAccessReviewVersion: v1
    matchConditionSubjectAccessReviewVersion: v1
    failurePolicy: {policy}
    authorizedTTL: 1s
    unauthorizedTTL: 1s
    connectionInfo:
      type: KubeConfigFile
      kubeConfigFile: {kubeconfig}
    matchConditions:
    - expression: "has(request.resourceAttributes) && request.resourceAttributes.namespace == '{namespace}'"
"""
    return ("apiVersion: apiserver.config.k8s.io/v1\nkind: AuthorizationConfiguration\nauthorizers:\n"
            + webhook("decider", hook, "NoOpinion", "webhooked")
            + webhook("down-deny", dead, "Deny", "down-deny")
            + webhook("down-noop", dead, "NoOpinion", "down-noop")
            + "- type: RBAC\n  name: rbac\n")


def decide(review: dict[str, Any]) -> dict[str, Any]:
    if review["spec"]["user"] == "oidc:welcome":
        return {"allowed": True, "reason": "the webhook says yes"}
    return {"allowed": False, "denied": True, "reason": "the webhook says no"}


class Env:
    def __init__(self, stack: Stack, first: Issuer, second: Issuer, hook: TokenWebhook, config: Path,
                 kubectl: Kubectl, authz: AuthzWebhook) -> None:
        self.stack, self.first, self.second, self.hook, self.config = stack, first, second, hook, config
        self.authz = authz
        self.kubectl = kubectl
        pki = stack.state / "pki"
        self.ctx = ssl.create_default_context(cafile=str(pki / "ca.crt"))
        admin_ctx = ssl.create_default_context(cafile=str(pki / "ca.crt"))
        admin_ctx.load_cert_chain(str(pki / "admin.crt"), str(pki / "admin.key"))
        self.admin = httpx.Client(base_url=stack.server, verify=admin_ctx, timeout=30)

    def get(self, token: str, path: str = "/api/v1/namespaces/default") -> httpx.Response:
        with httpx.Client(base_url=self.stack.server, verify=self.ctx, timeout=30) as c:
            return c.get(path, headers={"Authorization": f"Bearer {token}"})

    def review(self, token: str) -> dict[str, Any]:
        r = self.admin.post("/apis/authentication.k8s.io/v1/tokenreviews",
                            json={"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
                                  "spec": {"token": token}})
        assert r.status_code == 201, r.text
        return r.json()["status"]

    def whoami(self, token: str, name: str) -> dict[str, Any]:
        out = self.kubectl.with_token(token, name).run("auth", "whoami", "-o", "json").stdout
        return json.loads(out)["status"]["userInfo"]

    def metrics(self) -> str:
        return httpx.get(f"http://127.0.0.1:{self.stack.health_port('auth')}/metrics", timeout=10).text

    def reloads(self, status: str) -> float:
        for line in self.metrics().splitlines():
            if line.startswith("apiserver_authentication_config_controller_automatic_reloads_total{") \
                    and f'status="{status}"' in line:
                return float(line.rsplit(" ", 1)[1])
        return 0.0


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    d = tmp_path_factory.mktemp("authn")
    first = Issuer(d, "issuer-one").start()
    second = Issuer(d, "issuer-two", alg="ES256").start()
    hook = TokenWebhook(d, {"hook-good": HOOK_USER}).start()
    config = d / "authentication-config.yaml"
    config.write_text(auth_config(first, second))
    authz = AuthzWebhook(d, decide).start()
    dead = d / "dead-webhook.kubeconfig"
    dead.write_text(authz.kubeconfig(d / "x.kubeconfig").read_text().replace(str(authz.port), str(free_port())))
    authz_file = d / "authorization-config.yaml"
    authz_file.write_text(authz_config(authz.kubeconfig(d / "authz-webhook.kubeconfig"), dead))
    stack = Stack(STATE, OFFSET, extra={"auth": [
        "--authorization-config", str(authz_file),
        "--authentication-config", str(config),
        "--authentication-token-webhook-config-file", str(hook.kubeconfig(d / "token-webhook.kubeconfig")),
        "--authentication-token-webhook-version", "v1",
        "--authentication-token-webhook-cache-ttl", f"{WEBHOOK_TTL}s",
    ]})
    stack.start(fresh=True)
    try:
        yield Env(stack, first, second, hook, config,
                  Kubectl(stack, d, os.environ.get("KUBECTL", "kubectl")), authz)
    finally:
        stack.stop(quiet=True)
        for s in (first, second, hook, authz):
            s.stop()


def test_whoami_shows_the_mapped_user(env: Env) -> None:
    token = env.first.token(sub="alice", groups=["dev", "ops"], uid="u-1", tenant="blue")
    info = env.whoami(token, "alice")
    assert info["username"] == "oidc:alice"
    assert info["uid"] == "u-1"
    assert info["groups"] == ["oidc:dev", "oidc:ops", "system:authenticated"]
    assert info["extra"] == {"example.com/tenant": ["blue"]}


def test_a_token_without_rbac_rights_is_authenticated_but_forbidden(env: Env) -> None:
    r = env.get(env.first.token(sub="bob"))
    assert r.status_code == 403
    assert 'User "oidc:bob" cannot get resource "namespaces"' in r.json()["message"]


@pytest.mark.parametrize("case", ["audience", "expired", "not-yet-valid", "unknown-kid", "issuer", "signature"])
def test_bad_tokens_are_401(env: Env, case: str) -> None:
    i = env.first
    from cryptography.hazmat.primitives.asymmetric import rsa
    token = {
        "audience": lambda: i.token(aud="someone-else"),
        "expired": lambda: i.token(exp=int(time.time()) - 60),
        "not-yet-valid": lambda: i.token(nbf=int(time.time()) + 3600),
        "unknown-kid": lambda: i.token(kid="nobody-knows-me", key=rsa.generate_private_key(65537, 2048)),
        "issuer": lambda: i.token(iss="https://elsewhere.example.com"),
        "signature": lambda: i.token(key=rsa.generate_private_key(65537, 2048)),
    }[case]()
    r = env.get(token)
    assert r.status_code == 401, r.text
    assert r.json()["reason"] == "Unauthorized"
    status = env.review(token)
    assert status["authenticated"] is False
    expected = {
        "audience": 'oidc: expected audience in ["apiary"] got ["someone-else"]',
        "expired": "oidc: token is expired",
        "not-yet-valid": "before the nbf (not before) time",
        "unknown-kid": "failed to verify signature",
        "issuer": "invalid bearer token",
        "signature": "failed to verify signature",
    }[case]
    assert expected in status.get("error", ""), status


def test_claim_validation_rule_refuses(env: Env) -> None:
    token = env.first.token(sub="carol", blocked=True)
    assert env.get(token).status_code == 401
    assert "validation expression '!has(claims.blocked) || claims.blocked != true' failed: the token is blocked" \
        in env.review(token)["error"]


def test_user_validation_rule_refuses(env: Env) -> None:
    token = env.first.token(sub="system-admin")
    assert env.get(token).status_code == 401
    assert "oidc: error evaluating user info validation rule: validation expression " \
           "'!user.username.startsWith('oidc:system')' failed: no system users from this issuer" \
        in env.review(token)["error"]


def test_a_second_issuer_with_cel_mappings(env: Env) -> None:
    token = env.second.token(aud=["other"], email="dora@example.com", email_verified=True, roles=["a", "b"])
    info = env.whoami(token, "dora")
    assert info["username"] == "second:dora@example.com"
    assert info["groups"] == ["role:a", "role:b", "system:authenticated"]
    unverified = env.second.token(aud="other", email="eve@example.com", email_verified=False, roles=[])
    assert env.get(unverified).status_code == 401


def test_a_rotated_key_is_picked_up_without_restart(env: Env) -> None:
    old = env.first.token(sub="frank")
    assert env.get(old).status_code == 403
    env.first.rotate()
    new = env.first.token(sub="frank")
    # the new kid makes the auth service fetch the JWKS again (at most once a second)
    assert wait_for(lambda: env.get(new).status_code == 403, 15)
    # the old key left the JWKS: a token signed by it no longer verifies (the proxy's 10 s cache aside)
    assert "failed to verify signature" in env.review(old).get("error", "")
    key_sets = [line for line in env.metrics().splitlines()
                if line.startswith("apiserver_authentication_jwt_authenticator_jwks_fetch_last_key_set_info{")]
    assert len(key_sets) == 2   # one JWKS hash per issuer: the rotated one replaced the first


def test_a_broken_config_file_keeps_the_old_one(env: Env) -> None:
    good = env.config.read_text()
    env.config.write_text(good.replace(f"url: {env.first.url}", "url: http://insecure.example.com", 1))
    try:
        assert wait_for(lambda: env.reloads("failure") >= 1, 15)
        assert env.get(env.first.token(sub="gina")).status_code == 403
        log = (env.stack.logs / "auth.log").read_text()
        assert "was not loaded, keeping the last good one" in log
        assert 'jwt[0].issuer.url: Invalid value: "http://insecure.example.com": URL scheme must be https' in log
    finally:
        env.config.write_text(good + "\n")
    assert wait_for(lambda: env.reloads("success") >= 1, 15)
    assert env.get(env.first.token(sub="gina")).status_code == 403


def test_token_webhook_allows_and_caches(env: Env) -> None:
    info = env.whoami("hook-good", "hooky")
    assert info == {**HOOK_USER, "groups": ["hookers", "system:authenticated"]}
    review = env.hook.calls[-1]
    assert review["apiVersion"] == "authentication.k8s.io/v1"
    assert review["spec"]["audiences"] == ["https://kubernetes.default.svc.cluster.local"]


def test_token_webhook_negative_answers_are_cached_for_the_ttl(env: Env) -> None:
    before = len(env.hook.calls)
    assert env.get("hook-bad-1").status_code == 401
    assert env.get("hook-bad-1").status_code == 401
    assert len(env.hook.calls) == before + 1        # the second answer came from the cache
    time.sleep(WEBHOOK_TTL + 0.5)  # the cache's expiry is the behaviour under test
    assert env.get("hook-bad-1").status_code == 401
    assert len(env.hook.calls) == before + 2        # the cached answer expired


def test_token_webhook_down_is_401_without_hanging(env: Env) -> None:
    env.hook.stop()
    r = env.get("hook-never-seen")
    assert r.status_code == 401
    assert "hook-never-seen" not in r.text


def test_anonymous_only_on_the_configured_paths(env: Env) -> None:
    with httpx.Client(base_url=env.stack.server, verify=env.ctx, timeout=30) as c:
        assert c.get("/version").status_code == 200
        r = c.get("/api")
        assert r.status_code == 401 and r.json()["reason"] == "Unauthorized"


def test_bad_configuration_files_are_rejected_at_start(tmp_path: Path, env: Env) -> None:
    ca = "\n".join("      " + line for line in env.first.ca_pem.strip().splitlines())
    cases = {
        "http": ("jwt:\n- issuer:\n    url: http://example.com\n    audiences: [a]\n"
                 "  claimMappings:\n    username: {claim: sub, prefix: ''}\n",
                 'jwt[0].issuer.url: Invalid value: "http://example.com": URL scheme must be https'),
        "duplicate": ("jwt:\n" + "- issuer:\n    url: https://example.com\n    audiences: [a]\n"
                      "  claimMappings:\n    username: {claim: sub, prefix: ''}\n" * 2,
                      'jwt[1].issuer.url: Duplicate value: "https://example.com"'),
        "both": ("jwt:\n- issuer:\n    url: https://example.com\n    audiences: [a]\n"
                 "  claimMappings:\n    username: {claim: sub, expression: claims.sub}\n",
                 'jwt[0].claimMappings.username: Invalid value: "": claim and expression can\'t both be set'),
        "cel": ("jwt:\n- issuer:\n    url: https://example.com\n    audiences: [a]\n"
                f"    certificateAuthority: |\n{ca}\n"
                "  claimMappings:\n    username: {expression: \"claims.sub +\"}\n",
                'jwt[0].claimMappings.username.expression: Invalid value: "claims.sub +": compilation failed: '),
    }
    for name, (body, message) in cases.items():
        path = tmp_path / f"{name}.yaml"
        path.write_text("apiVersion: apiserver.config.k8s.io/v1\nkind: AuthenticationConfiguration\n" + body)
        proc = subprocess.run([sys.executable, "-m", "services.auth", "--insecure-internal",
                               "--authentication-config", str(path)],
                              cwd=ROOT, capture_output=True, text=True, timeout=60)
        assert proc.returncode != 0, name
        assert message in proc.stderr, (name, proc.stderr)
    proc = subprocess.run([sys.executable, "-m", "services.auth", "--insecure-internal",
                           "--authentication-config", str(tmp_path / "http.yaml"),
                           "--oidc-issuer-url", "https://example.com", "--oidc-client-id", "a"],
                          cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert "authentication-config file and oidc-* flags are mutually exclusive" in proc.stderr


def test_authz_webhook_decides_what_its_match_conditions_select(env: Env) -> None:
    path = "/api/v1/namespaces/webhooked/configmaps"
    r = env.get(env.first.token(sub="welcome"), path)
    assert r.status_code == 200, r.text
    review = env.authz.calls[-1]
    assert review["apiVersion"] == "authorization.k8s.io/v1"
    assert review["spec"]["resourceAttributes"] == {"namespace": "webhooked", "verb": "list", "group": "",
                                                    "version": "v1", "resource": "configmaps", "subresource": "",
                                                    "name": ""}
    assert review["spec"]["user"] == "oidc:welcome"
    r = env.get(env.first.token(sub="stranger"), path)
    assert r.status_code == 403
    assert r.json()["message"] == ('configmaps is forbidden: User "oidc:stranger" cannot list resource "configmaps" '
                                   'in API group "" in the namespace "webhooked": the webhook says no')


def test_the_proxy_reuses_a_webhook_answer_no_longer_than_its_ttl(env: Env) -> None:
    token, path = env.first.token(sub="stranger"), "/api/v1/namespaces/webhooked/configmaps/ttl"
    calls = len(env.authz.calls)
    assert env.get(token, path).status_code == 403
    time.sleep(2.5)   # unauthorizedTTL is 1s, the proxy's own decision cache 10s
    assert env.get(token, path).status_code == 403
    assert len(env.authz.calls) == calls + 2


def test_requests_the_conditions_do_not_match_fall_through_to_rbac(env: Env) -> None:
    calls = len(env.authz.calls)
    r = env.get(env.first.token(sub="welcome"), "/api/v1/namespaces/default/configmaps")
    assert r.status_code == 403
    assert r.json()["message"].endswith('cannot list resource "configmaps" in API group "" in the namespace "default"')
    assert len(env.authz.calls) == calls
    admin = env.admin.get("/api/v1/namespaces/webhooked/configmaps")   # system:masters never reaches a webhook
    assert admin.status_code == 200 and len(env.authz.calls) == calls


def test_failure_policy_when_the_webhook_is_down(env: Env) -> None:
    r = env.admin.post("/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", json={
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": "oidc-reader-view"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "oidc:reader"}]})
    assert r.status_code == 201, r.text
    token = env.first.token(sub="reader")
    assert wait_for(lambda: env.get(token, "/api/v1/namespaces/default/configmaps").status_code == 200)
    # NoOpinion: the failure leaves the decision to RBAC, which allows
    assert env.get(token, "/api/v1/namespaces/down-noop/configmaps").status_code == 200
    # Deny: the failure denies; an authorizer error without an allow is kube's 500
    r = env.get(token, "/api/v1/namespaces/down-deny/configmaps")
    assert r.status_code == 500, r.text
    assert r.json()["reason"] == "InternalError"
    assert r.json()["message"].startswith("Internal error occurred: ")
    # and one RBAC does not allow gets the same 500 under NoOpinion
    assert env.get(env.first.token(sub="nobody"), "/api/v1/namespaces/down-noop/configmaps").status_code == 500
