"""TokenReview, SelfSubjectReview, the access reviews, SelfSubjectRulesReview and escalation checks."""
from __future__ import annotations

import orjson
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa

from apiary_pb import auth_pb2 as apb
from services.auth.__main__ import build, parse_args
from services.auth.policy import load_bootstrap_policy
from services.auth.authenticators.serviceaccount import ServiceAccountAuthenticator
from services.auth.serviceaccount import DEFAULT_ISSUER, TokenIssuer
from services.common.errors import BadRequest, Forbidden, Invalid, NotFound
from services.common.identity import user_pb


ALICE = user_pb("alice", ["system:authenticated"])
ADMIN = user_pb("admin", ["system:masters", "system:authenticated"])
KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)


@pytest.fixture
def servicer(tmp_path):
    tokens = tmp_path / "tokens.csv"
    tokens.write_text('admintoken,admin,admin-uid,"system:masters"\nalicetoken,alice,alice-uid\n')
    s = build(parse_args(["--token-auth-file", str(tokens)]))
    load_bootstrap_policy(s.index)

    async def lookup(ns, name):
        return {"metadata": {"uid": "sa-uid"}} if (ns, name) == ("demo", "bot") else None

    sa = ServiceAccountAuthenticator([KEY.public_key()], [DEFAULT_ISSUER], [DEFAULT_ISSUER], lookup)
    s.reviewer.service_accounts = sa
    idx = s.index
    idx.apply("Role", {"metadata": {"name": "cm-reader", "namespace": "demo"},
                       "rules": [{"verbs": ["get", "list"], "apiGroups": [""], "resources": ["configmaps"]}]})
    idx.apply("RoleBinding", {"metadata": {"name": "alice-reads", "namespace": "demo"},
                              "roleRef": {"kind": "Role", "name": "cm-reader"},
                              "subjects": [{"kind": "User", "name": "alice"}]})
    return s


async def review(s, resource: str, body: dict, user=ALICE, namespace: str = "", group: str = "") -> dict:
    group = group or ("authentication.k8s.io" if resource in ("tokenreviews", "selfsubjectreviews")
                      else "authorization.k8s.io")
    req = apb.ReviewRequest(group=group, version="v1", resource=resource, namespace=namespace,
                            body=orjson.dumps(body), user=user)
    return await s.reviewer.review(req)


async def test_token_review(servicer) -> None:
    out = await review(servicer, "tokenreviews", {"spec": {"token": "alicetoken"}})
    assert out["kind"] == "TokenReview" and out["status"]["authenticated"] is True
    assert out["status"]["user"] == {"username": "alice", "uid": "alice-uid", "groups": ["system:authenticated"]}
    assert out["status"]["audiences"] == [DEFAULT_ISSUER]
    bad = await review(servicer, "tokenreviews", {"spec": {"token": "nope"}})
    assert bad["status"] == {"authenticated": False, "user": {}, "error": "invalid bearer token"}
    token = TokenIssuer(KEY).sign("demo", "bot", "sa-uid", ["vault"], 3600)[0]
    sa = await review(servicer, "tokenreviews", {"spec": {"token": token, "audiences": ["vault"]}})
    assert sa["status"]["user"]["username"] == "system:serviceaccount:demo:bot"
    assert sa["status"]["audiences"] == ["vault"]
    with pytest.raises(BadRequest, match="token is required"):
        await review(servicer, "tokenreviews", {"spec": {}})


async def test_self_subject_review(servicer) -> None:
    out = await review(servicer, "selfsubjectreviews", {"apiVersion": "authentication.k8s.io/v1"})
    assert out["status"] == {"userInfo": {"username": "alice", "groups": ["system:authenticated"]}}


async def test_access_reviews(servicer) -> None:
    ra = {"namespace": "demo", "verb": "get", "resource": "configmaps"}
    out = await review(servicer, "selfsubjectaccessreviews", {"spec": {"resourceAttributes": ra}})
    assert out["status"]["allowed"] is True and "alice-reads/demo" in out["status"]["reason"]
    out = await review(servicer, "selfsubjectaccessreviews",
                       {"spec": {"resourceAttributes": {**ra, "verb": "delete"}}})
    assert out["status"] == {"allowed": False}
    sar = {"spec": {"user": "alice", "resourceAttributes": ra}}
    assert (await review(servicer, "subjectaccessreviews", sar))["status"]["allowed"] is True
    out = await review(servicer, "subjectaccessreviews",
                       {"spec": {"groups": ["system:unauthenticated"],
                                 "nonResourceAttributes": {"path": "/healthz", "verb": "get"}}})
    assert out["status"]["allowed"] is True
    local = await review(servicer, "localsubjectaccessreviews", sar, namespace="demo")
    assert local["status"]["allowed"] is True and local["metadata"]["namespace"] == "demo"
    with pytest.raises(BadRequest, match="spec.resourceAttributes.namespace must match namespace: other"):
        await review(servicer, "localsubjectaccessreviews", sar, namespace="other")


async def test_access_review_validation(servicer) -> None:
    with pytest.raises(Invalid) as e:
        await review(servicer, "subjectaccessreviews", {"spec": {}})
    causes = {c["field"]: c["message"] for c in e.value.details["causes"]}
    assert causes == {
        "spec.resourceAttributes": "Invalid value: null: exactly one of nonResourceAttributes or "
                                   "resourceAttributes must be specified",
        "spec.user": 'Invalid value: "": at least one of user or group must be specified'}
    assert e.value.message.startswith('SubjectAccessReview.authorization.k8s.io "" is invalid: [')
    with pytest.raises(Invalid, match="cannot be specified in combination"):
        await review(servicer, "selfsubjectaccessreviews",
                     {"spec": {"resourceAttributes": {}, "nonResourceAttributes": {}}})
    with pytest.raises(BadRequest):
        await review(servicer, "selfsubjectaccessreviews", {"spec": "x"})


async def test_rules_review(servicer) -> None:
    out = await review(servicer, "selfsubjectrulesreviews", {"spec": {"namespace": "demo"}})
    st = out["status"]
    assert st["incomplete"] is False
    assert {"verbs": ["get", "list"], "apiGroups": [""], "resources": ["configmaps"]} in st["resourceRules"]
    assert {"verbs": ["create"], "apiGroups": ["authorization.k8s.io"],
            "resources": ["selfsubjectaccessreviews", "selfsubjectrulesreviews"]} in st["resourceRules"]
    assert any("/api" in r["nonResourceURLs"] for r in st["nonResourceRules"])
    other = await review(servicer, "selfsubjectrulesreviews", {"spec": {"namespace": "other"}})
    assert {"verbs": ["get", "list"], "apiGroups": [""], "resources": ["configmaps"]} not in other["status"]["resourceRules"]
    admin = await review(servicer, "selfsubjectrulesreviews", {"spec": {"namespace": "x"}}, user=ADMIN)
    assert {"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]} in admin["status"]["resourceRules"]
    with pytest.raises(BadRequest, match="no namespace on request"):
        await review(servicer, "selfsubjectrulesreviews", {"spec": {}})


async def test_review_rpc_roundtrip(servicer) -> None:
    req = apb.ReviewRequest(group="authentication.k8s.io", version="v1", resource="selfsubjectreviews",
                            body=b"{}", user=ALICE)
    out = orjson.loads((await servicer.Review(req, None)).body)
    assert out["apiVersion"] == "authentication.k8s.io/v1" and out["status"]["userInfo"]["username"] == "alice"


def escalation(kind: str, obj: dict, user=ALICE, namespace: str = "demo") -> apb.EscalationRequest:
    return apb.EscalationRequest(user=user, namespace=namespace, kind=kind, object=orjson.dumps(obj))


async def test_role_escalation(servicer) -> None:
    check = servicer.escalation.check
    held = {"metadata": {"name": "x"}, "rules": [{"verbs": ["get"], "apiGroups": [""], "resources": ["configmaps"]}]}
    await check(escalation("Role", held))
    more = {"metadata": {"name": "x"}, "rules": [{"verbs": ["get", "delete"], "apiGroups": [""],
                                                  "resources": ["secrets", "configmaps"]}]}
    with pytest.raises(Forbidden) as e:
        await check(escalation("Role", more))
    assert e.value.message == (
        'roles.rbac.authorization.k8s.io "x" is forbidden: user "alice" (groups=["system:authenticated"]) is '
        'attempting to grant RBAC permissions not currently held:\n'
        '{APIGroups:[""], Resources:["configmaps"], Verbs:["delete"]}\n'
        '{APIGroups:[""], Resources:["secrets"], Verbs:["get" "delete"]}')
    with pytest.raises(Forbidden, match='clusterroles.rbac.authorization.k8s.io "x" is forbidden'):
        await check(escalation("ClusterRole", held, namespace=""))  # a Role's namespace grants nothing cluster-wide
    await check(escalation("ClusterRole", more, user=ADMIN, namespace=""))
    # the escalate verb lets alice write anything into roles in demo
    servicer.index.apply("Role", {"metadata": {"name": "esc", "namespace": "demo"},
                                  "rules": [{"verbs": ["escalate"], "apiGroups": ["rbac.authorization.k8s.io"],
                                             "resources": ["roles"]}]})
    servicer.index.apply("RoleBinding", {"metadata": {"name": "esc", "namespace": "demo"},
                                         "roleRef": {"kind": "Role", "name": "esc"},
                                         "subjects": [{"kind": "User", "name": "alice"}]})
    await check(escalation("Role", more))


async def test_binding_escalation(servicer) -> None:
    check = servicer.escalation.check
    binding = {"metadata": {"name": "b"}, "roleRef": {"kind": "Role", "name": "cm-reader"},
               "subjects": [{"kind": "User", "name": "bob"}]}
    await check(escalation("RoleBinding", binding))  # alice holds every permission of cm-reader
    to_edit = {**binding, "roleRef": {"kind": "ClusterRole", "name": "edit"}}
    with pytest.raises(Forbidden) as e:
        await check(escalation("RoleBinding", to_edit))
    assert e.value.message.startswith('rolebindings.rbac.authorization.k8s.io "b" is forbidden: user "alice"')
    with pytest.raises(NotFound, match='clusterroles.rbac.authorization.k8s.io "missing" not found'):
        await check(escalation("RoleBinding", {**binding, "roleRef": {"kind": "ClusterRole", "name": "missing"}}))
    servicer.index.apply("ClusterRole", {"metadata": {"name": "binder"},
                                         "rules": [{"verbs": ["bind"], "apiGroups": ["rbac.authorization.k8s.io"],
                                                    "resources": ["clusterroles"], "resourceNames": ["edit"]}]})
    servicer.index.apply("RoleBinding", {"metadata": {"name": "binder", "namespace": "demo"},
                                         "roleRef": {"kind": "ClusterRole", "name": "binder"},
                                         "subjects": [{"kind": "User", "name": "alice"}]})
    await check(escalation("RoleBinding", to_edit))
    with pytest.raises(Forbidden):
        await check(escalation("ClusterRoleBinding", to_edit, namespace=""))
