"""AuthorizationConfiguration validation (kube's messages), webhook authorizer decisions, caching and failures."""
from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from apiary_pb import envelope_pb2 as pb
from services.apiserver.fielderrors import ConfigError
from services.auth import authzconfig
from services.common import cel
from services.auth.__main__ import build, parse_args
from services.auth.authorizers import ALLOW, DENY, NO_OPINION, Union
from services.auth.authorizers.modes import RBACAuthorizer
from services.auth.authorizers.rbac import RBACIndex
from services.auth.authorizers.webhook import WebhookAuthorizer, WebhookSettings
from services.auth.webhookclient import WebhookError
from services.common.identity import user_pb
from tests.fakeclock import FakeClock

HEAD = "apiVersion: apiserver.config.k8s.io/v1\nkind: AuthorizationConfiguration\n"


def kubeconfig(tmp_path: Path) -> Path:
    p = tmp_path / "hook.kubeconfig"
    p.write_text("apiVersion: v1\nkind: Config\nclusters:\n- name: h\n  cluster:\n    server: https://127.0.0.1:1/\n"
                 "users:\n- name: u\n  user: {}\ncontexts:\n- name: c\n  context: {cluster: h, user: u}\n"
                 "current-context: c\n")
    return p


def webhook(kc: Path, **over: Any) -> str:
    w = {"timeout": "3s", "subjectAccessReviewVersion": "v1", "failurePolicy": "Deny", "authorizedTTL": "5m",
         "unauthorizedTTL": "30s", "connectionInfo": f"{{type: KubeConfigFile, kubeConfigFile: {kc}}}"}
    w.update(over)
    body = "".join(f"    {k}: {v}\n" for k, v in w.items() if v is not None)
    return f"- type: Webhook\n  name: hook\n  webhook:\n{body}"


def errors(text: str) -> str:
    with pytest.raises(ConfigError) as e:
        authzconfig.parse((HEAD + text).encode(), "f")
    return str(e.value)


def test_a_good_chain(tmp_path: Path) -> None:
    entries = authzconfig.parse((HEAD + "authorizers:\n" + webhook(kubeconfig(tmp_path)) +
                                 "- {type: RBAC, name: rbac}\n").encode(), "f")
    chain = authzconfig.AuthorizerChain(RBACIndex()).build(entries)
    assert [a.name for a in chain] == ["Privileged", "Webhook/hook", "RBAC"]


@pytest.mark.parametrize("body,message", [
    ("authorizers: []\n", "authorizers: Required value: at least one authorization mode must be defined"),
    ("authorizers:\n- {type: Bogus, name: b}\n",
     'authorizers[0].type: Unsupported value: "Bogus": supported values: "AlwaysAllow", "AlwaysDeny", "Node", '
     '"RBAC", "Webhook"'),
    ("authorizers:\n- {type: RBAC, name: a}\n- {type: RBAC, name: b}\n", 'authorizers[1].type: Duplicate value: "RBAC"'),
    ("authorizers:\n- {type: RBAC, name: Not_Valid}\n", 'authorizers[0].name: Invalid value: "Not_Valid": authorizer '
                                                        'name is invalid'),
    ("authorizers:\n- {type: Webhook, name: w}\n", "authorizers[0].webhook: Required value: required when type=Webhook"),
])
def test_chain_messages_are_kubes(body: str, message: str) -> None:
    assert message in errors(body)


@pytest.mark.parametrize("over,message", [
    ({"timeout": "45s"}, 'authorizers[0].webhook.timeout: Invalid value: "45s": must be > 0s and <= 30s'),
    ({"failurePolicy": "Allow"}, 'authorizers[0].webhook.failurePolicy: Unsupported value: "Allow": supported values: '
                                 '"NoOpinion", "Deny"'),
    ({"subjectAccessReviewVersion": None}, "authorizers[0].webhook.subjectAccessReviewVersion: Required value"),
    ({"matchConditions": "[{expression: 'true'}]"},
     "authorizers[0].webhook.matchConditionSubjectAccessReviewVersion: Required value: required if match conditions "
     "are specified"),
    ({"matchConditionSubjectAccessReviewVersion": "v1", "matchConditions": "[{expression: 'request.user =='}]"},
     "authorizers[0].webhook.matchConditions[0].expression: Invalid value: \"request.user ==\": compilation failed: "),
    ({"connectionInfo": "{type: KubeConfigFile, kubeConfigFile: relative.yaml}"},
     'authorizers[0].webhook.connectionInfo.kubeConfigFile: Invalid value: "relative.yaml": must be an absolute path'),
])
def test_webhook_messages_are_kubes(tmp_path: Path, over: dict[str, Any], message: str) -> None:
    assert message in errors("authorizers:\n" + webhook(kubeconfig(tmp_path), **over))


def test_the_file_excludes_the_legacy_flags(tmp_path: Path) -> None:
    path = tmp_path / "a.yaml"
    path.write_text(HEAD + "authorizers:\n- {type: RBAC, name: rbac}\n")
    with pytest.raises(SystemExit, match="--authorization-config can not be specified when --authorization-mode"):
        build(parse_args(["--authorization-config", str(path), "--authorization-mode", "RBAC"]))
    with pytest.raises(SystemExit, match="authorization-mode Webhook's authorization config file not passed"):
        build(parse_args(["--authorization-mode", "RBAC,Webhook"]))
    servicer = build(parse_args(["--authorization-mode", "Webhook,RBAC",
                                 "--authorization-webhook-config-file", str(kubeconfig(tmp_path))]))
    assert [a.name for a in servicer.authorizer.authorizers] == ["Privileged", "Webhook/webhook", "RBAC"]


class FakeClient:
    def __init__(self, status: dict[str, Any] | None) -> None:
        self.status, self.bodies = status, []

    async def post(self, body: dict[str, Any]) -> dict[str, Any]:
        self.bodies.append(body)
        if self.status is None:
            raise WebhookError('Post "https://hook": connection refused')
        return {"status": self.status}


def attrs(namespace: str = "ns", user: str = "u") -> pb.RequestAttributes:
    return pb.RequestAttributes(user=user_pb(user, ["g"]), verb="get", resource_request=True, namespace=namespace,
                          api_version="v1", resource="pods", name="p")


def authorizer(status: dict[str, Any] | None, policy: str = NO_OPINION, conditions: tuple[str, ...] = ()) \
        -> tuple[WebhookAuthorizer, FakeClient]:
    client = FakeClient(status)
    s = WebhookSettings("hook", 3, "v1", 60, 60, policy, [cel.compile_expression(c) for c in conditions])
    return WebhookAuthorizer(s, client), client  # type: ignore[arg-type]


def test_allowed_and_denied_answers_are_cached() -> None:
    a, client = authorizer({"allowed": False, "denied": True, "reason": "no"})

    async def run() -> None:
        assert await a.authorize_with_error(attrs()) == (DENY, "no", "")
        assert await a.authorize_with_error(attrs()) == (DENY, "no", "")
        assert a.calls == 1
        assert client.bodies[0]["spec"]["resourceAttributes"]["namespace"] == "ns"
        assert client.bodies[0]["apiVersion"] == "authorization.k8s.io/v1"

    asyncio.run(run())


def test_cached_answers_expire_after_their_ttls() -> None:
    clock = FakeClock()
    allowed, denied = FakeClient({"allowed": True}), FakeClient({"allowed": False, "denied": True})
    settings = WebhookSettings("hook", 3, "v1", 60, 30, NO_OPINION)
    a = WebhookAuthorizer(settings, allowed, clock)  # type: ignore[arg-type]
    d = WebhookAuthorizer(settings, denied, clock)  # type: ignore[arg-type]

    async def run() -> None:
        assert (await a.evaluate(attrs()))[::3] == (ALLOW, 60) and (await d.evaluate(attrs()))[::3] == (DENY, 30)
        clock.advance(29)
        assert (await a.evaluate(attrs()))[::3] == (ALLOW, 31) and (await d.evaluate(attrs()))[::3] == (DENY, 1)
        assert a.calls == d.calls == 1
        clock.advance(2)  # past the unauthorizedTTL, within the authorizedTTL
        await a.evaluate(attrs())
        await d.evaluate(attrs())
        assert a.calls == 1 and d.calls == 2
        clock.advance(30)
        await a.evaluate(attrs())
        assert a.calls == 2

    asyncio.run(run())


def test_match_conditions_skip_the_webhook() -> None:
    a, _ = authorizer({"allowed": True}, conditions=("request.resourceAttributes.namespace == 'kube-system'",))

    async def run() -> None:
        assert await a.authorize_with_error(attrs("default")) == (NO_OPINION, "", "")
        assert a.calls == 0
        assert (await a.authorize_with_error(attrs("kube-system")))[0] == ALLOW

    asyncio.run(run())


@pytest.mark.parametrize("policy", [DENY, NO_OPINION])
def test_failure_policy(policy: str) -> None:
    a, _ = authorizer(None, policy)
    decision, reason, error = asyncio.run(a.authorize_with_error(attrs()))
    assert decision == policy and "connection refused" in error
    assert asyncio.run(a.authorize_with_error(attrs()))[0] == policy and a.calls == 2  # failures are not cached


def test_the_union_carries_the_error_unless_someone_allows() -> None:
    a, _ = authorizer(None, NO_OPINION)
    d = asyncio.run(Union([a, RBACAuthorizer(RBACIndex())]).authorize(attrs()))
    assert d.decision == NO_OPINION and "connection refused" in d.error


def test_a_broken_file_keeps_the_last_chain(tmp_path: Path) -> None:
    path = tmp_path / "authz.yaml"
    path.write_text(HEAD + "authorizers:\n- {type: RBAC, name: rbac}\n")
    servicer = build(parse_args(["--authorization-config", str(path)]))
    watcher = servicer.authz_watcher
    assert watcher is not None and [a.name for a in servicer.authorizer.authorizers] == ["Privileged", "RBAC"]
    assert not watcher.reload((HEAD + "authorizers:\n- {type: Bogus, name: b}\n").encode())
    assert [a.name for a in servicer.authorizer.authorizers] == ["Privileged", "RBAC"]
    assert watcher.reload((HEAD + "authorizers:\n- {type: AlwaysDeny, name: deny}\n- {type: RBAC, name: rbac}\n").encode())
    assert [a.name for a in servicer.authorizer.authorizers] == ["Privileged", "AlwaysDeny", "RBAC"]


def test_a_false_condition_wins_over_one_that_fails() -> None:
    a, _ = authorizer({"allowed": True}, DENY, ("request.resourceAttributes.namespace == 'x'",
                                                "has(request.resourceAttributes)"))
    nonresource = pb.RequestAttributes(user=user_pb("u"), verb="get", path="/version")
    assert asyncio.run(a.authorize_with_error(nonresource)) == (NO_OPINION, "", "")
    b, _ = authorizer({"allowed": True}, DENY, ("request.resourceAttributes.namespace == 'x'",))
    decision, _, error = asyncio.run(b.authorize_with_error(nonresource))
    assert decision == DENY and "evaluation failed" in error and b.calls == 0


def test_the_decision_carries_the_webhooks_ttl() -> None:
    allow, _ = authorizer({"allowed": True})
    d = asyncio.run(Union([allow]).authorize(attrs()))
    assert d.decision == ALLOW and d.ttl == 60
    skipped, _ = authorizer({"allowed": True}, conditions=("false",))
    assert asyncio.run(Union([skipped, RBACAuthorizer(RBACIndex())]).authorize(attrs())).ttl == float("inf")
    down, _ = authorizer(None, NO_OPINION)
    assert asyncio.run(Union([down, RBACAuthorizer(RBACIndex())]).authorize(attrs())).ttl == 0


def test_the_file_is_decoded_strictly() -> None:
    assert errors("authorizers:\n- {type: RBAC, name: rbac, mode: x}\n") == (
        "failed to decode authorization configuration file 'f': strict decoding error: unknown field "
        '"authorizers[0].mode"')
