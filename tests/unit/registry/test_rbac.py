"""rbac.authorization.k8s.io kinds, the escalation check, the review kinds and serviceaccounts/token."""
from __future__ import annotations

import datetime

import orjson
import pytest

from apiary_pb import registry_pb2 as rpb
from services.apis import schemas
from services.apis.install import new_catalogue
from services.apiserver import discovery, printers
from services.apiserver.registry.rest import strategy_for
from services.common import errors, identity
from services.registry import watch

CATALOGUE = new_catalogue()


RBAC = "rbac.authorization.k8s.io"
RBAC_V1 = RBAC + "/v1"
MASTER = identity.user_pb("kubernetes-admin", [identity.SYSTEM_MASTERS, identity.AUTHENTICATED])


def role(name: str = "editor", ns: str = "default", rules: list | None = None) -> dict:
    return {"apiVersion": RBAC_V1, "kind": "Role", "metadata": {"name": name, "namespace": ns},
            "rules": rules if rules is not None else [{"apiGroups": [""], "resources": ["configmaps"],
                                                       "verbs": ["get", "list"]}]}


def binding(name: str = "b", ns: str = "default", kind: str = "RoleBinding", ref_kind: str = "Role",
            ref_name: str = "editor", subjects: list | None = None) -> dict:
    meta = {"name": name, "namespace": ns} if ns else {"name": name}
    return {"apiVersion": RBAC_V1, "kind": kind, "metadata": meta,
            "roleRef": {"kind": ref_kind, "name": ref_name},
            "subjects": subjects if subjects is not None else [{"kind": "User", "name": "alice"}]}


def _validate(resource: str, obj: dict) -> list[dict]:
    info = CATALOGUE.lookup(RBAC, "v1", resource)
    strategy = strategy_for(info)
    strategy.canonicalize(obj)
    return strategy.validate(obj)


# Validation -----------------------------------------------------------------------


def test_policy_rule_validation():
    causes = _validate("roles", role(rules=[{"apiGroups": [""], "resources": ["pods"]},
                                            {"verbs": ["get"], "nonResourceURLs": ["/healthz"]},
                                            {"verbs": ["get"]}]))
    assert [(c["field"], c["message"]) for c in causes] == [
        ("rules[0].verbs", "Required value: verbs must contain at least one value"),
        ("rules[1].nonResourceURLs", 'Invalid value: []string{"/healthz"}: namespaced rules cannot apply to '
                                     "non-resource URLs"),
        ("rules[2].apiGroups", "Required value: resource rules must supply at least one api group"),
        ("rules[2].resources", "Required value: resource rules must supply at least one resource"),
    ]
    cr = role(rules=[{"verbs": ["get"], "nonResourceURLs": ["/healthz", "/livez"]},
                     {"verbs": ["get"], "nonResourceURLs": ["/x"], "resources": ["pods"]}])
    cr["kind"] = "ClusterRole"
    del cr["metadata"]["namespace"]
    assert [(c["field"], c["message"]) for c in _validate("clusterroles", cr)] == [
        ("rules[1].nonResourceURLs", 'Invalid value: []string{"/x"}: rules cannot apply to both regular '
                                     "resources and non-resource URLs"),
    ]


def test_rbac_names_are_path_segments():
    assert _validate("clusterroles", {"metadata": {"name": "system:discovery"}, "rules": []}) == []
    causes = _validate("clusterroles", {"metadata": {"name": "a/b"}})
    assert [c["message"] for c in causes] == ["Invalid value: \"a/b\": may not contain '/'"]
    causes = _validate("roles", {"metadata": {"name": "..", "namespace": "default"}})
    assert [c["message"] for c in causes] == ["Invalid value: \"..\": may not be '..'"]


def test_aggregation_rule_validation():
    cr = {"metadata": {"name": "agg"}, "aggregationRule": {"clusterRoleSelectors": []}}
    assert [c["field"] for c in _validate("clusterroles", cr)] == ["aggregationRule.clusterRoleSelectors"]
    cr["aggregationRule"]["clusterRoleSelectors"] = [
        {"matchLabels": {"rbac.example.com/aggregate": "true"}},
        {"matchExpressions": [{"key": "a", "operator": "In"}, {"key": "b", "operator": "Maybe"}]}]
    assert [c["field"] for c in _validate("clusterroles", cr)] == [
        "aggregationRule.clusterRoleSelectors[1].matchExpressions[0].values",
        "aggregationRule.clusterRoleSelectors[1].matchExpressions[1].operator"]


def test_binding_defaults_and_validation():
    b = binding(subjects=[{"kind": "User", "name": "alice"}, {"kind": "Group", "name": "devs"},
                          {"kind": "ServiceAccount", "name": "sa"}])
    assert _validate("rolebindings", b) == []
    assert b["roleRef"]["apiGroup"] == RBAC
    assert [s.get("apiGroup") for s in b["subjects"]] == [RBAC, RBAC, None]

    bad = binding(ref_kind="Pod", ref_name="", subjects=[{"kind": "Robot", "name": ""},
                                                       {"kind": "ServiceAccount", "name": "Bad_Name",
                                                        "apiGroup": "x"}])
    bad["roleRef"]["apiGroup"] = "example.com"
    assert [(c["field"], c["reason"]) for c in _validate("rolebindings", bad)] == [
        ("roleRef.apiGroup", "FieldValueNotSupported"),
        ("roleRef.kind", "FieldValueNotSupported"),
        ("roleRef.name", "FieldValueRequired"),
        ("subjects[0].name", "FieldValueRequired"),
        ("subjects[0].kind", "FieldValueNotSupported"),
        ("subjects[1].name", "FieldValueInvalid"),
        ("subjects[1].apiGroup", "FieldValueNotSupported"),
    ]
    crb = binding(ns="", kind="ClusterRoleBinding", subjects=[{"kind": "ServiceAccount", "name": "sa"}])
    causes = _validate("clusterrolebindings", crb)
    assert [(c["field"], c["message"]) for c in causes] == [
        ("roleRef.kind", 'Unsupported value: "Role": supported values: "ClusterRole"'),
        ("subjects[0].namespace", "Required value"),
    ]


async def test_role_crud_and_storage_keys(api, storage):
    code, obj = await api("create", "roles", "default", body=role(), user=MASTER)
    assert code == 201 and obj["kind"] == "Role" and obj["apiVersion"] == RBAC_V1
    assert "/registry/roles/default/editor" in storage.data
    await api("create", "clusterroles", body={"apiVersion": RBAC_V1, "kind": "ClusterRole",
                                              "metadata": {"name": "system:x"}, "rules": []}, user=MASTER)
    assert "/registry/clusterroles/system:x" in storage.data
    await api("create", "rolebindings", "default", body=binding(), user=MASTER)
    assert "/registry/rolebindings/default/b" in storage.data
    await api("create", "clusterrolebindings", body=binding(ns="", kind="ClusterRoleBinding",
                                                            ref_kind="ClusterRole", ref_name="system:x"),
              user=MASTER)
    assert "/registry/clusterrolebindings/b" in storage.data
    _, lst = await api("list", "roles", "")
    assert lst["kind"] == "RoleList" and [i["metadata"]["name"] for i in lst["items"]] == ["editor"]
    _, patched = await api("patch", "roles", "default", "editor",
                           body=[{"op": "add", "path": "/rules/0/verbs/-", "value": "watch"}],
                           content_type="application/json-patch+json", user=MASTER)
    assert patched["rules"][0]["verbs"] == ["get", "list", "watch"]
    code, _ = await api("delete", "roles", "default", "editor", user=MASTER)
    assert code == 200 and "/registry/roles/default/editor" not in storage.data


async def test_role_ref_is_immutable(api):
    await api("create", "rolebindings", "default", body=binding(), user=MASTER)
    changed = binding(ref_kind="ClusterRole", ref_name="view")
    with pytest.raises(errors.Invalid) as e:
        await api("update", "rolebindings", "default", "b", body=changed, user=MASTER)
    assert e.value.message == (
        'RoleBinding.rbac.authorization.k8s.io "b" is invalid: roleRef: Invalid value: rbac.RoleRef{'
        'APIGroup:"rbac.authorization.k8s.io", Kind:"ClusterRole", Name:"view"}: cannot change roleRef')
    # Subjects may change.
    code, _ = await api("update", "rolebindings", "default", "b",
                        body=binding(subjects=[{"kind": "Group", "name": "g"}]), user=MASTER)
    assert code == 200


async def test_strict_field_validation_on_rbac(api):
    body = role()
    body["rules"][0]["verb"] = ["get"]
    with pytest.raises(errors.BadRequest) as e:
        await api("create", "roles", "default", body=body, query={"fieldValidation": "Strict"}, user=MASTER)
    assert e.value.message == 'strict decoding error: unknown field "rules[0].verb"'


# Escalation ----------------------------------------------------------------------


async def test_escalation_check_on_create_update_patch(api, auth, storage):
    await api("create", "roles", "default", body=role())
    calls = [c for c in auth.calls if c[0] == "CheckEscalation"]
    assert len(calls) == 1
    req = calls[0][1]
    assert (req.user.name, req.namespace, req.kind) == ("alice", "default", "Role")
    sent = orjson.loads(req.object)
    assert sent["rules"][0]["resources"] == ["configmaps"] and sent["metadata"]["uid"]

    auth.calls.clear()
    await api("patch", "roles", "default", "editor", body={"rules": [{"apiGroups": [""], "resources": ["secrets"],
                                                                     "verbs": ["get"]}]},
              content_type="application/merge-patch+json")
    (_, req), = auth.calls
    assert orjson.loads(req.object)["rules"][0]["resources"] == ["secrets"]

    # Only garbage-collection fields change: no check (IsOnlyMutatingGCFields).
    auth.calls.clear()
    await api("patch", "roles", "default", "editor", body={"metadata": {"finalizers": ["example.com/x"]}},
              content_type="application/merge-patch+json")
    assert auth.calls == []


async def test_escalation_refusal_passes_through(api, auth, storage):
    auth.deny = errors.forbidden("roles", RBAC, "editor", 'user "alice" (groups=["devs"]) is attempting to '
                                 "grant RBAC permissions not currently held")
    with pytest.raises(errors.Forbidden) as e:
        await api("create", "roles", "default", body=role())
    assert e.value.message.startswith('roles.rbac.authorization.k8s.io "editor" is forbidden: user "alice"')
    assert "/registry/roles/default/editor" not in storage.data
    # Dry-run is checked as well.
    with pytest.raises(errors.Forbidden):
        await api("create", "rolebindings", "default", body=binding(), query={"dryRun": "All"})
    assert [c[1].kind for c in auth.calls] == ["Role", "RoleBinding"]
    # allowed=false without an error is a refusal too.
    auth.deny, auth.allowed = None, False
    with pytest.raises(errors.Forbidden) as e:
        await api("create", "clusterroles", body={"metadata": {"name": "cr"}, "rules": []})
    assert "attempting to grant RBAC permissions not currently held" in e.value.message


async def test_system_masters_and_other_kinds_skip_the_check(api, auth):
    await api("create", "roles", "default", body=role(), user=MASTER)
    await api("create", "configmaps", "default", body={"metadata": {"name": "c"}})
    assert auth.calls == []


# Printers ------------------------------------------------------------------------


def test_rbac_printers():
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    for resource in ("roles", "clusterroles"):
        assert [c["name"] for c in printers.column_definitions(CATALOGUE.convertor(RBAC, resource))] == \
            ["Name", "Created At"]
    cols = printers.column_definitions(CATALOGUE.convertor(RBAC, "rolebindings"))
    assert [(c["name"], c["priority"]) for c in cols] == [
        ("Name", 0), ("Role", 0), ("Age", 0), ("Users", 1), ("Groups", 1), ("ServiceAccounts", 1)]
    assert cols == printers.column_definitions(CATALOGUE.convertor(RBAC, "clusterrolebindings"))
    r = role()
    r["metadata"]["creationTimestamp"] = "2024-05-01T10:00:00Z"
    assert printers.row(CATALOGUE.convertor(RBAC, "roles"), r, "None")["cells"] == \
        ["editor", "2024-05-01T10:00:00Z"]
    b = binding(subjects=[{"kind": "User", "name": "u1"}, {"kind": "User", "name": "u2"},
                          {"kind": "Group", "name": "g"}, {"kind": "ServiceAccount", "name": "sa", "namespace": "ns"}])
    b["metadata"]["creationTimestamp"] = now
    cells = printers.row(CATALOGUE.convertor(RBAC, "rolebindings"), b, "None")["cells"]
    assert cells[:2] == ["b", "Role/editor"] and cells[2].endswith("s")
    assert cells[3:] == ["u1, u2", "g", "ns/sa"]


async def test_binding_table(api):
    await api("create", "rolebindings", "default", body=binding(), user=MASTER)
    _, t = await api("list", "rolebindings", "default", table=True)
    assert [c["name"] for c in t["columnDefinitions"]][:3] == ["Name", "Role", "Age"]
    assert t["rows"][0]["cells"][:2] == ["b", "Role/editor"] and t["rows"][0]["cells"][3] == "alice"


# Review kinds ------------------------------------------------------------------------


SSAR = {"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
        "spec": {"resourceAttributes": {"verb": "list", "resource": "configmaps", "namespace": "default"}}}


async def test_review_is_forwarded_not_stored_not_admitted(api, auth, storage, admission):
    code, out = await api("create", "selfsubjectaccessreviews", body=SSAR)
    assert code == 201 and out["status"] == {"allowed": True, "reason": "reviewed for alice"}
    (_, req), = auth.calls
    assert (req.group, req.version, req.resource, req.namespace) == (
        "authorization.k8s.io", "v1", "selfsubjectaccessreviews", "")
    assert orjson.loads(req.body)["spec"] == SSAR["spec"] and req.user.name == "alice"
    assert storage.data == {} and admission.requests == []


async def test_review_kinds_and_namespaces(api, auth):
    for resource, kind in (("tokenreviews", "TokenReview"), ("selfsubjectreviews", "SelfSubjectReview"),
                           ("subjectaccessreviews", "SubjectAccessReview"),
                           ("selfsubjectrulesreviews", "SelfSubjectRulesReview")):
        code, out = await api("create", resource, body={"kind": kind, "apiVersion": ""})
        assert code == 201 and out["kind"] == kind
    lsar = {"kind": "LocalSubjectAccessReview", "apiVersion": "authorization.k8s.io/v1",
            "spec": {"user": "bob", "resourceAttributes": {"verb": "get", "namespace": "team"}}}
    _, out = await api("create", "localsubjectaccessreviews", "team", body=lsar)
    assert out["metadata"]["namespace"] == "team" and auth.calls[-1][1].namespace == "team"
    with pytest.raises(errors.NotFound):
        await api("create", "localsubjectaccessreviews", "", body=lsar)
    lsar["metadata"] = {"namespace": "other"}
    with pytest.raises(errors.BadRequest):
        await api("create", "localsubjectaccessreviews", "team", body=lsar)
    with pytest.raises(errors.BadRequest) as e:
        await api("create", "selfsubjectaccessreviews", body={"kind": "TokenReview"})
    assert "cannot be handled as a SelfSubjectAccessReview" in e.value.message


@pytest.mark.parametrize("verb", ["get", "list", "update", "patch", "delete", "deletecollection"])
async def test_review_kinds_are_create_only(api, verb):
    with pytest.raises(errors.MethodNotAllowed) as e:
        await api(verb, "selfsubjectaccessreviews", name="x" if verb not in ("list", "deletecollection") else "",
                  body=SSAR)
    assert e.value.code == 405
    assert e.value.message == "the server does not allow this method on the requested resource"


async def test_review_watch_is_not_allowed(handlers):
    req = rpb.APIRequest(verb="watch", group="authorization.k8s.io", version="v1",
                         resource="selfsubjectaccessreviews")
    with pytest.raises(errors.MethodNotAllowed):
        async for _ in watch.frames(handlers, req):
            pass


def test_review_discovery_and_finalizer_scope():
    doc = discovery.aggregated(CATALOGUE, core=False)
    authz = next(i for i in doc["items"] if i["metadata"]["name"] == "authorization.k8s.io")
    res = {r["resource"]: r for r in authz["versions"][0]["resources"]}
    assert set(res) == {"localsubjectaccessreviews", "selfsubjectaccessreviews", "selfsubjectrulesreviews",
                        "subjectaccessreviews"}
    assert res["localsubjectaccessreviews"]["scope"] == "Namespaced"
    assert all(r["verbs"] == ["create"] for r in res.values())
    assert res["selfsubjectaccessreviews"]["responseKind"] == {"group": "authorization.k8s.io", "version": "v1",
                                                               "kind": "SelfSubjectAccessReview"}
    legacy = discovery.resource_list(CATALOGUE, "authentication.k8s.io", "v1")
    assert [(r["name"], r["verbs"], "storageVersionHash" in r) for r in legacy["resources"]] == [
        ("selfsubjectreviews", ["create"], False), ("tokenreviews", ["create"], False)]
    assert "localsubjectaccessreviews" not in [r.plural for r in CATALOGUE.namespaced()]
    assert {"roles", "rolebindings"} <= {r.plural for r in CATALOGUE.namespaced()}


# serviceaccounts/token -----------------------------------------------------------------


TOKEN_REQUEST = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                 "spec": {"audiences": ["https://kubernetes.default.svc"]}}


async def test_token_request(api, auth):
    with pytest.raises(errors.NotFound) as e:
        await api("create", "serviceaccounts", "default", "robot", body=TOKEN_REQUEST, subresource="token")
    assert e.value.message == 'serviceaccounts "robot" not found'
    _, sa = await api("create", "serviceaccounts", "default", body={"metadata": {"name": "robot"}})
    code, out = await api("create", "serviceaccounts", "default", "robot", body=TOKEN_REQUEST,
                          subresource="token")
    assert code == 201 and out["kind"] == "TokenRequest" and out["apiVersion"] == "authentication.k8s.io/v1"
    assert out["status"]["token"] == f"token-for-{sa['metadata']['uid']}"
    (_, req), = [c for c in auth.calls if c[0] == "RequestToken"]
    assert (req.namespace, req.name, req.service_account.metadata.uid) == ("default", "robot", sa["metadata"]["uid"])
    assert req.service_account.kind == "ServiceAccount"
    sent = orjson.loads(req.body)
    assert sent["spec"]["expirationSeconds"] == 3600
    assert sent["metadata"] == {"name": "robot", "namespace": "default"}


async def test_token_request_validation(api):
    await api("create", "serviceaccounts", "default", body={"metadata": {"name": "robot"}})
    short = {**TOKEN_REQUEST, "spec": {"audiences": [], "expirationSeconds": 60}}
    with pytest.raises(errors.Invalid) as e:
        await api("create", "serviceaccounts", "default", "robot", body=short, subresource="token")
    assert e.value.message == ('TokenRequest.authentication.k8s.io "" is invalid: spec.expirationSeconds: Invalid '
                               "value: 60: may not specify a duration less than 10 minutes")
    other = {**TOKEN_REQUEST, "metadata": {"name": "someone"}}
    with pytest.raises(errors.Invalid) as e:
        await api("create", "serviceaccounts", "default", "robot", body=other, subresource="token")
    assert "metadata.name: Invalid value: \"someone\": must match the service account name if specified" in \
        e.value.message
    with pytest.raises(errors.MethodNotAllowed):
        await api("get", "serviceaccounts", "default", "robot", subresource="token")


def test_token_subresource_discovery():
    core = discovery.aggregated(CATALOGUE, core=True)
    sa = next(r for r in core["items"][0]["versions"][0]["resources"] if r["resource"] == "serviceaccounts")
    assert sa["subresources"] == [{"subresource": "token", "verbs": ["create"], "responseKind": {
        "group": "authentication.k8s.io", "version": "v1", "kind": "TokenRequest"}}]
    legacy = discovery.resource_list(CATALOGUE, "", "v1")
    tok = next(r for r in legacy["resources"] if r["name"] == "serviceaccounts/token")
    assert (tok["group"], tok["version"], tok["kind"], tok["verbs"]) == (
        "authentication.k8s.io", "v1", "TokenRequest", ["create"])


def test_openapi_for_rbac_and_reviews():
    from services.apiserver import openapi
    docs = openapi.documents(CATALOGUE, schemas)
    rbac = orjson.loads(docs["apis/rbac.authorization.k8s.io/v1"])
    op = rbac["paths"]["/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}/roles/{name}"]["patch"]
    assert "fieldValidation" in [p["name"] for p in op["parameters"]]
    assert op["x-kubernetes-group-version-kind"] == {"group": RBAC, "version": "v1", "kind": "Role"}
    assert rbac["components"]["schemas"]["io.k8s.api.rbac.v1.Role"]["x-kubernetes-group-version-kind"] == [
        {"group": RBAC, "kind": "Role", "version": "v1"}]
    authz = orjson.loads(docs["apis/authorization.k8s.io/v1"])
    path = authz["paths"]["/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"]
    assert set(path) == {"post", "parameters"}
    core = orjson.loads(docs["api/v1"])
    post = core["paths"]["/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token"]["post"]
    assert post["x-kubernetes-group-version-kind"]["kind"] == "TokenRequest"
    assert "io.k8s.api.authentication.v1.TokenRequest" in core["components"]["schemas"]
