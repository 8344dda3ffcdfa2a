"""Admission policies' pieces: rule matching, what a policy converts into CEL, typed literals, the type check,
object-count quota keys, quantities."""
from __future__ import annotations

from decimal import Decimal

import pytest

from apiary_pb import admission_pb2 as adpb
from apiary_pb import envelope_pb2 as pb
from services.admission.attributes import Attributes
from services.admission.matching import MatchResources, Rule
from services.admission.policy import EvalError, Expression, Needs
from services.admission.typechecking import type_check
from services.apis.install import new_catalogue
from services.common import cel, quantity
from services.common.envelope import to_envelope
from services.common.quota import keys_for, resource_of

CATALOGUE = new_catalogue()


def attrs(op: str = "CREATE", group: str = "", version: str = "v1", resource: str = "configmaps",
          sub: str = "", ns: str = "n", obj: dict | None = None) -> Attributes:
    req = adpb.AdmissionRequest(operation=op, attributes=pb.RequestAttributes(
        api_group=group, api_version=version, resource=resource, subresource=sub, namespace=ns, name="x"))
    if obj is not None:
        req.object.CopyFrom(to_envelope(obj))
    return Attributes(req, CATALOGUE)


@pytest.mark.parametrize("rule,a,want", [
    ({"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["configmaps"]}, attrs(), True),
    ({"operations": ["UPDATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["configmaps"]}, attrs(), False),
    ({"operations": ["*"], "apiGroups": ["*"], "apiVersions": ["*"], "resources": ["*"]}, attrs(), True),
    ({"operations": ["*"], "apiGroups": ["*"], "apiVersions": ["*"], "resources": ["*"]}, attrs(sub="status"), False),
    ({"operations": ["*"], "apiGroups": ["*"], "apiVersions": ["*"], "resources": ["*/status"]},
     attrs(sub="status"), True),
    ({"operations": ["*"], "apiGroups": ["*"], "apiVersions": ["*"], "resources": ["*/*"]}, attrs(sub="scale"), True),
    ({"operations": ["*"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["configmaps"], "scope": "Cluster"},
     attrs(), False),
    ({"operations": ["*"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["configmaps"],
      "resourceNames": ["y"]}, attrs(), False),
])
def test_rules(rule: dict, a: Attributes, want: bool) -> None:
    assert Rule(rule).matches(a) is want


def test_selectors_and_exclusions() -> None:
    m = MatchResources({"resourceRules": [{"operations": ["*"], "apiGroups": ["*"], "apiVersions": ["*"],
                                           "resources": ["*"]}],
                        "excludeResourceRules": [{"operations": ["*"], "apiGroups": [""], "apiVersions": ["*"],
                                                  "resources": ["secrets"]}],
                        "namespaceSelector": {"matchLabels": {"env": "prod"}},
                        "objectSelector": {"matchExpressions": [{"key": "skip", "operator": "DoesNotExist"}]}})
    prod = {"metadata": {"name": "n", "labels": {"env": "prod"}}}
    assert m.matches(attrs(obj={"metadata": {"name": "x"}}), prod)
    assert not m.matches(attrs(obj={"metadata": {"name": "x"}}), {"metadata": {"name": "n"}})
    assert not m.matches(attrs(obj={"metadata": {"name": "x", "labels": {"skip": "1"}}}), prod)
    assert not m.matches(attrs(resource="secrets", obj={"metadata": {"name": "x"}}), prod)
    # a namespace is matched by its own labels
    assert m.matches(attrs(resource="namespaces", ns="", obj=prod), None)


def test_needs_prunes_to_what_expressions_read() -> None:
    n = Needs(["!has(object.data) || size(object.data) <= int(params.data.max)",
               "object.metadata.name.startsWith('a') && object.metadata.labels.all(k, k != 'x')",
               "'a,b'.split(',').size() == 2"])
    assert n.variables == {"object", "params"}
    assert n.paths["object"] == {("data",), ("metadata", "name"), ("metadata", "labels")}
    assert set(n.functions) == {"split"}
    obj = {"metadata": {"name": "a", "managedFields": [{"big": 1}], "labels": {"k": "v"}}, "data": {"x": "1"},
           "kind": "ConfigMap"}
    assert n.prune("object", obj) == {"metadata": {"name": "a", "labels": {"k": "v"}}, "data": {"x": "1"}}
    whole = Needs(["object == oldObject"])
    assert whole.prune("object", obj) is obj


def test_missing_field_is_an_error_not_false() -> None:
    e = Expression("object.data.missing == 'x'")
    with pytest.raises(EvalError, match="resulted in error: no such key: missing"):
        e.evaluate(cel.activation({"object": {"data": {}}}))
    assert Expression("has(object.data.missing)").evaluate(cel.activation({"object": {"data": {}}})) is False
    assert Expression("size(").error.startswith("compilation failed: ERROR: <input>:1:6")


def test_kube_library_functions() -> None:
    ctx = cel.activation({}, cel.KUBE_LIBRARY)
    for expr, want in [("'A,b'.split(',')", ["A", "b"]), ("['a','b'].join('-')", "a-b"),
                       ("'Ab'.lowerAscii()", "ab"), ("[3, 1, 2].sum()", 6), ("[1, 2].isSorted()", True),
                       ("'abc'.indexOf('c')", 2), ("'a1b22'.findAll('[0-9]+')", ["1", "22"]),
                       ("'hello'.substring(1, 3)", "el")]:
        assert cel.compile_expression(expr).evaluate(ctx) == want, expr


def test_typed_literals_as_maps() -> None:
    src = 'object.x == "JSONPatch{a: 1}" ? [] : [JSONPatch{op: "add", path: "/a/" + jsonpatch.escapeKey("b/c"), value: {"k": 1}}]'
    out = cel.struct_literals_as_maps(src)
    assert '"JSONPatch{a: 1}"' in out  # string literals untouched
    value = cel.compile_expression(out).evaluate(cel.activation({"object": {"x": ""}}, cel.KUBE_LIBRARY))
    assert value == [{"op": "add", "path": "/a/b~1c", "value": {"k": 1}}]
    apply = cel.struct_literals_as_maps('Object{metadata: Object.metadata{labels: {"a": "b"}}}')
    assert cel.compile_expression(apply).evaluate(cel.activation({})) == {"metadata": {"labels": {"a": "b"}}}


def test_type_check_against_the_schema() -> None:
    policy = {"spec": {"matchConstraints": {"resourceRules": [
        {"apiGroups": [""], "apiVersions": ["v1"], "resources": ["configmaps"], "operations": ["*"]}]},
        "validations": [{"expression": "object.data.anything == 'x' && object.metadata.name != ''"},
                        {"expression": "object.spec.replicas > 1"}]}}
    (w,) = type_check(policy, CATALOGUE)
    assert w["fieldRef"] == "spec.validations[1].expression"
    assert w["warning"].startswith("/v1, Kind=ConfigMap: ERROR: <input>:1:7: undefined field 'spec'")


def test_quota_keys_and_quantities() -> None:
    assert keys_for("", "configmaps") == ("count/configmaps", "configmaps")
    assert keys_for("apps", "deployments") == ("count/deployments.apps",)
    assert resource_of("count/deployments.apps") == ("apps", "deployments")
    assert resource_of("requests.cpu") is None
    assert quantity.parse("2") == 2 and quantity.parse("1k") == 1000 and quantity.parse("1Ki") == 1024
    assert quantity.format_count(Decimal(3)) == "3"
    with pytest.raises(ValueError):
        quantity.parse("two")


def test_equivalent_match_gives_the_policy_the_request_in_its_version() -> None:
    from services.admission.attributes import in_version
    from services.admission.policy import context, request_variable

    a = attrs(group="events.k8s.io", resource="events", obj={
        "apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": {"name": "x", "namespace": "n"},
        "note": "it happened", "regarding": {"kind": "ConfigMap", "name": "c"}})
    a.request.kind = "Event"
    core_events = {"resourceRules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"],
                                      "resources": ["events"]}]}
    matched, target = MatchResources(core_events).matched_resource(a)
    assert matched and target is not None and (target.group, target.version, target.plural) == ("", "v1", "events")
    assert MatchResources({**core_events, "matchPolicy": "Exact"}).matched_resource(a) == (False, None)
    # the request's own version matches exactly, through nothing else
    own = {"resourceRules": [{**core_events["resourceRules"][0], "apiGroups": ["events.k8s.io"]}]}
    assert MatchResources(own).matched_resource(a) == (True, None)

    seen = in_version(a, target)
    assert (seen.group, seen.version, seen.resource, seen.kind) == ("", "v1", "events", "Event")
    req = request_variable(seen)
    assert req["kind"] == {"group": "", "version": "v1", "kind": "Event"}
    assert req["requestKind"] == {"group": "events.k8s.io", "version": "v1", "kind": "Event"}
    assert Expression("object.message == 'it happened' && object.apiVersion == 'v1'").evaluate(
        context(seen, None, None)) is True
    changed = dict(seen.object or {}, message="rewritten")
    seen.set_object(changed)
    assert a.object is not None and a.object["note"] == "rewritten" and a.object["apiVersion"] == "events.k8s.io/v1"
    assert seen.object is not None and seen.object["message"] == "rewritten"
