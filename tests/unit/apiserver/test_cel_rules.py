"""x-kubernetes-validations (services/apiserver/cel): the parser the estimator reads, kube's cost estimation
and limits, the CRD validation's causes, and evaluation against objects with self and oldSelf."""
from __future__ import annotations

import copy

import pytest

from services.apiserver.cel import cost
from services.apiserver.cel.compilation import compile_schema, valid_field_path, validate_rules
from services.apiserver.cel.parser import parse
from services.apiserver.cel.validation import Validator, escape

AT = "spec.validation.openAPIV3Schema"


def root(spec: dict, **extra: object) -> dict:
    return {"type": "object", "properties": {"spec": {"type": "object", **spec}}, **extra}


def causes(schema: dict) -> list[str]:
    return [f"{c['field']}: {c['message']}" for c in validate_rules(schema, AT)]


def evaluate(schema: dict, obj: dict, old: dict | None = None, budget: int = cost.RUNTIME_CEL_COST_BUDGET) -> list[str]:
    compiled = compile_schema(schema)
    assert compiled is not None
    return [f"{c['field']}: {c['message']}" for c in Validator(compiled).validate(obj, old, budget)]


def test_parser_reads_macros_members_and_literals():
    n = parse("self.items.all(x, x.matches('^a') && size(x) < 3) ? [1, 2][0] == 1 : {'a': b\"c\"}.a != null")
    assert n.kind == "cond"
    comp = n.args[0]
    assert (comp.kind, comp.name, comp.var) == ("comp", "all", "x")
    assert comp.args[0].kind == "select" and comp.args[0].name == "items"
    assert parse("!(a in b) || -x > 0x10").name == "||"
    assert parse("has(self.a.b)").kind == "has"
    assert parse("'''multi\nline'''.size()").args[0].value == "multi\nline"


def test_sizes_from_schema_bounds_and_from_the_request_size():
    assert cost.max_size({"type": "string", "maxLength": 7}) == 28  # bytes: 4 per code point
    assert cost.max_size({"type": "string"}) == cost.MAX_REQUEST_SIZE_BYTES - 2
    assert cost.max_size({"type": "string", "format": "date"}) == 12
    assert cost.max_size({"type": "array", "items": {"type": "integer"}}) == (cost.MAX_REQUEST_SIZE_BYTES - 2) // 2
    assert cost.max_size({"type": "object", "additionalProperties": {"type": "boolean"}}) == \
        (cost.MAX_REQUEST_SIZE_BYTES - 2) // 10
    assert cost.min_serialized_size({"type": "object", "required": ["ab"], "properties": {"ab": {"type": "string"}}}) \
        == 2 + 2 + 2 + 4


def test_nested_comprehensions_multiply():
    bounded = {"type": "array", "maxItems": 10, "items": {"type": "integer"}}
    est = cost.Estimator({"self": cost.Shape.of(bounded)})
    one = est.cost(parse("self.all(x, x > 0)"))
    two = est.cost(parse("self.all(x, self.all(y, x == y))"))
    assert 10 < one < 100
    assert two > 10 * one


def test_cost_message_factors():
    assert cost.exceeds_message("estimated rule cost", 12_000_000, 10_000_000).startswith(
        "estimated rule cost exceeds budget by factor of 1.200000x (try simplifying")
    assert "factor of 2.5x" in cost.exceeds_message("x", 25, 10)
    assert "factor of more than 100x" in cost.exceeds_message("x", 10_000, 10)


def test_rule_over_an_unbounded_list_costs_too_much():
    schema = root({"properties": {"items": {"type": "array", "items": {"type": "string"}}},
                   "x-kubernetes-validations": [{"rule": "self.items.all(x, self.items.all(y, x == y))"}]})
    at = f"{AT}.properties[spec].x-kubernetes-validations[0].rule"
    assert causes(schema) == [
        f"{at}: Forbidden: estimated rule cost exceeds budget by factor of more than 100x (try simplifying the rule, "
        "or adding maxItems, maxProperties, and maxLength where arrays, maps, and strings are declared)",
        f"{at}: Forbidden: contributed to estimated rule & messageExpression cost total exceeding cost limit for "
        "entire OpenAPIv3 schema",
        f"{AT}: Forbidden: x-kubernetes-validations estimated rule & messageExpression cost total for entire "
        "OpenAPIv3 schema exceeds budget by factor of more than 100x (try simplifying the rule, or adding maxItems, "
        "maxProperties, and maxLength where arrays, maps, and strings are declared)"]
    bounded = copy.deepcopy(schema)
    bounded["properties"]["spec"]["properties"]["items"].update(maxItems=10, items={"type": "string", "maxLength": 8})
    assert causes(bounded) == []


def test_rules_on_items_of_an_unbounded_list_are_multiplied_by_its_cardinality():
    item = {"type": "string", "x-kubernetes-validations": [{"rule": "self.contains('a')"}]}
    schema = root({"properties": {"names": {"type": "array", "items": item}}})
    assert [c.split(": ")[0] for c in causes(schema)][0].endswith("items.x-kubernetes-validations[0].rule")
    bounded = copy.deepcopy(schema)
    bounded["properties"]["spec"]["properties"]["names"]["maxItems"] = 100
    bounded["properties"]["spec"]["properties"]["names"]["items"]["maxLength"] = 64
    assert causes(bounded) == []


def test_compile_errors_reasons_field_paths_and_transition_rules():
    schema = root({"properties": {"replicas": {"type": "integer"},
                                  "tags": {"type": "array", "maxItems": 4,
                                           "items": {"type": "string", "maxLength": 4,
                                                     "x-kubernetes-validations": [{"rule": "self == oldSelf"}]}}},
                   "x-kubernetes-validations": [
                       {"rule": "self.replicas >"},
                       {"rule": "self.replicas", "messageExpression": "1 +"},
                       {"rule": "self.replicas > 1", "reason": "Bad"},
                       {"rule": "self.replicas > 1", "fieldPath": ".nope"},
                       {"rule": "self.replicas > 1", "optionalOldSelf": True},
                       {"rule": "'x' + 'y'"},
                       {"rule": "self.replicas > other"},
                       {"rule": ""}]})
    at = f"{AT}.properties[spec]"
    got = causes(schema)
    assert got[0].startswith(
        f'{at}.x-kubernetes-validations[0].rule: Invalid value: apiextensions.ValidationRule{{Rule:"self.replicas >", '
        'Message:"", MessageExpression:"", Reason:(*apiextensions.FieldValueErrorReason)(nil), FieldPath:"", '
        'OptionalOldSelf:(*bool)(nil)}: compilation failed: ERROR: <input>:1:')
    assert got[1].startswith(f"{at}.x-kubernetes-validations[1].messageExpression: Invalid value: "
                             "apiextensions.ValidationRule{")
    assert "messageExpression compilation failed: ERROR" in got[1]
    assert got[2:] == [
        f'{at}.x-kubernetes-validations[2].reason: Unsupported value: "Bad": supported values: "FieldValueDuplicate", '
        '"FieldValueForbidden", "FieldValueInvalid", "FieldValueRequired"',
        f'{at}.x-kubernetes-validations[3].fieldPath: Invalid value: ".nope": fieldPath must be a valid path',
        f"{at}.x-kubernetes-validations[4].optionalOldSelf: Invalid value: true: may not be set if oldSelf is not "
        "used in rule",
        f'{at}.x-kubernetes-validations[5].rule: Invalid value: apiextensions.ValidationRule{{Rule:"\'x\' + \'y\'", '
        'Message:"", MessageExpression:"", Reason:(*apiextensions.FieldValueErrorReason)(nil), FieldPath:"", '
        'OptionalOldSelf:(*bool)(nil)}: cel expression must evaluate to a bool',
        f'{at}.x-kubernetes-validations[6].rule: Invalid value: apiextensions.ValidationRule{{Rule:"self.replicas > '
        'other", Message:"", MessageExpression:"", Reason:(*apiextensions.FieldValueErrorReason)(nil), FieldPath:"", '
        "OptionalOldSelf:(*bool)(nil)}: compilation failed: ERROR: <input>:1:1: undeclared reference to 'other' "
        "(in container '')",
        f"{at}.x-kubernetes-validations[7].rule: Required value: rule is not specified",
        f'{at}.properties[tags].items.x-kubernetes-validations[0].rule: Invalid value: "self == oldSelf": oldSelf '
        f"cannot be used on the uncorrelatable portion of the schema within {at}.properties[tags].items"]


def test_valid_field_path():
    s = {"type": "object", "properties": {
        "a": {"type": "object", "properties": {"b.c": {"type": "string"}}},
        "m": {"type": "object", "additionalProperties": {"type": "integer"}},
        "l": {"type": "array", "items": {"type": "string"}}}}
    assert valid_field_path(".a['b.c']", s) == "a.b.c"
    assert valid_field_path(".m.anything", s) == "m[anything]"
    assert valid_field_path(".l[2]", s) == "l[2]"
    assert valid_field_path(".x", s) is None
    assert valid_field_path("a", s) is None


CRONTAB = root({"properties": {
    "cronSpec": {"type": "string", "maxLength": 64},
    "replicas": {"type": "integer"}, "minReplicas": {"type": "integer"},
    "image": {"type": "string", "maxLength": 64, "x-kubernetes-validations": [
        {"rule": "self == oldSelf", "message": "image is immutable"}]},
    "ports": {"type": "array", "maxItems": 8, "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"],
              "items": {"type": "object", "required": ["name"], "properties": {
                  "name": {"type": "string", "maxLength": 8}, "port": {"type": "integer"}},
                  "x-kubernetes-validations": [{"rule": "self.port >= oldSelf.port", "message": "ports only grow"}]}},
    "labels": {"type": "object", "maxProperties": 4, "additionalProperties": {
        "type": "string", "maxLength": 10, "x-kubernetes-validations": [{"rule": "self != ''", "reason":
                                                                          "FieldValueRequired"}]}},
    "my-field": {"type": "integer"}},
    "x-kubernetes-validations": [
        {"rule": "self.minReplicas <= self.replicas", "messageExpression":
         "'minReplicas (' + string(self.minReplicas) + ') must not exceed replicas'", "fieldPath": ".minReplicas"},
        {"rule": "!has(self.my__dash__field) || self.my__dash__field > 0", "reason": "FieldValueForbidden"},
        {"rule": "!has(oldSelf.replicas) || self.replicas >= oldSelf.replicas", "message": "no scaling down"},
        {"rule": "oldSelf.hasValue() || self.replicas < 10", "optionalOldSelf": True, "message": "start small"}]})


def obj(**spec: object) -> dict:
    return {"apiVersion": "stable.example.com/v1", "kind": "CronTab", "metadata": {"name": "c"},
            "spec": {"cronSpec": "* * * * */5", "image": "i", "replicas": 2, "minReplicas": 1, **spec}}


def test_schema_with_rules_compiles_without_causes():
    assert causes(CRONTAB) == []


def test_create_evaluates_self_and_skips_transition_rules():
    assert evaluate(CRONTAB, obj()) == []
    assert evaluate(CRONTAB, obj(minReplicas=3, **{"my-field": 0}, labels={"a": ""})) == [
        'spec.minReplicas: Invalid value: "object": minReplicas (3) must not exceed replicas',
        "spec: Forbidden: failed rule: !has(self.my__dash__field) || self.my__dash__field > 0",
        "spec.labels[a]: Required value: failed rule: self != ''"]
    assert evaluate(CRONTAB, obj(replicas=12, minReplicas=1)) == ['spec: Invalid value: "object": start small']


def test_update_evaluates_transition_rules_with_correlated_old_values():
    old = obj(replicas=12, ports=[{"name": "a", "port": 80}, {"name": "b", "port": 90}])
    assert evaluate(CRONTAB, obj(replicas=15, ports=[{"name": "b", "port": 91}, {"name": "c", "port": 1}]), old) == []
    assert evaluate(CRONTAB, obj(replicas=3, image="j", ports=[{"name": "b", "port": 10}]), old) == [
        'spec: Invalid value: "object": no scaling down',
        'spec.image: Invalid value: "string": image is immutable',
        'spec.ports[0]: Invalid value: "object": ports only grow']


def test_evaluation_errors_and_the_runtime_budget():
    schema = root({"properties": {"n": {"type": "integer"}},
                   "x-kubernetes-validations": [{"rule": "self.n > 0"}]})
    assert evaluate(schema, {"spec": {}}) == ['spec: Invalid value: "object": no such key: n evaluating rule: '
                                              "self.n > 0"]
    assert evaluate(schema, {"spec": {"n": 1}}, budget=1) == [
        'spec: Invalid value: "object": validation failed due to running out of cost budget, no further validation '
        'rules will be run']


def test_escaped_property_names():
    assert [escape(n) for n in ("a", "namespace", "a-b", "a.b", "a/b", "a__b")] == [
        "a", "__namespace__", "a__dash__b", "a__dot__b", "a__slash__b", "a__underscores__b"]


@pytest.mark.parametrize("rule", ["self.matches('^[a-z]+$')", "self.lowerAscii() == self",
                                  "self.split('-').size() < 3", "isQuantity(self) || self.contains('b')"])
def test_string_library(rule):
    schema = root({"properties": {"s": {"type": "string", "maxLength": 20,
                                        "x-kubernetes-validations": [{"rule": rule}]}}})
    assert causes(schema) == []
    assert evaluate(schema, {"spec": {"s": "abc"}}) == []


def _kube_cost(schema: dict, rule: str) -> int:
    return cost.Estimator({"self": cost.Shape.of(schema), "oldSelf": cost.Shape.of(schema)}).cost(parse(rule))


def _array(item: dict, max_items: int | None = None) -> dict:
    return {"type": "array", "items": item, **({"maxItems": max_items} if max_items is not None else {})}


def _string(max_length: int | None = None) -> dict:
    return {"type": "string", **({"maxLength": max_length} if max_length is not None else {})}


@pytest.mark.parametrize(("schema", "rule", "expected"), [
    # kube's TestCostEstimation (apiextensions-apiserver schema/cel compilation_test.go), unbounded and bounded
    (_array({"type": "number"}), "self.all(x, true)", 4718591),
    (_array({"type": "number"}, 10), "self.all(x, true)", 32),
    (_array(_string()), "self.all(x, true)", 3145727),
    (_array(_string(), 20), "self.all(x, true)", 62),
    ({"type": "object", "additionalProperties": {"type": "number"}}, "self.all(x, true)", 1348169),
    ({"type": "object", "additionalProperties": _string()}, "self.all(x, true)", 1179647),
    (_array({"type": "string", "format": "date"}), "self.all(x, true)", 725936),
    (_string(), "self.contains('test')", 314574),
    (_string(10), "self.contains('test')", 5),
    (_string(15), "self.startsWith('test')", 2),
    (_string(), 'size(self + "hello") > size("hello")', 314578),
    (_string(4), 'size(self + "hello") > size("hello")', 7),
    (_array(_string(), 8), "self[1] == self[1]", 314577),
    (_array({"type": "number"}, 10), "self.all(x, self.all(y, true))", 352),
    (_array({"type": "number"}, 10), "self.all(x, self.all(y, self.all(z, true)))", 3552),
    (_array({"type": "number"}, 3 * 1024 * 2048), "self.all(x, x == 0.0)", 25165826),
    (_string(50), 'self.matches("x")', 22),
    (_string(), '"".matches("(((((((((())))))))))[0-9]")', 7),
    (_string(), 'self.matches("")', 1),
    (_string(10), "self.find('[0-9]+') == ''", 11),
    (_string(10), "self.lowerAscii() == 'lower!'", 6),
    (_string(), "self.lowerAscii() == 'lower!'", 314575),
    (_array(_string(10), 10), "self.join(' ') == 'aa bb'", 43),
    ({"type": "string", "enum": ["A", "B", "C", "LongValue"]}, "self.contains('A')", 2),
    ({"type": "string", "maxLength": 0}, 'self == "x"', 1),
    (_array({"type": "number"}, 5000), "self[1] == 0.0", 2),
    (_array(_array({"type": "number"})), "self[0][0] == -1.0", 3),
    (_array({"x-kubernetes-int-or-string": True}), "self[0] == 5", 3),
    (_array({"type": "object", "additionalProperties": {"type": "number"}}), "self[0].x > 2.0", 4),
    ({"type": "object", "additionalProperties": {"type": "integer"}}, "oldSelf.size() == self.size()", 5),
])
def test_costs_as_kube_estimates_them(schema, rule, expected):
    assert _kube_cost(schema, rule) == expected


def test_unchanged_values_are_ratcheted():
    schema = root({"properties": {"n": {"type": "integer"}, "m": {"type": "integer"}},
                   "x-kubernetes-validations": [{"rule": "self.n < 5", "message": "n below 5"}]})
    old = {"spec": {"n": 7, "m": 1}}
    assert evaluate(schema, {"spec": {"n": 7, "m": 1}}, old) == []
    assert evaluate(schema, {"spec": {"n": 7, "m": 2}}, old) == ['spec: Invalid value: "object": n below 5']


def test_per_call_limit_with_actual_sizes():
    schema = root({"properties": {"l": {"type": "array", "maxItems": 600, "items": {"type": "integer"}}},
                   "x-kubernetes-validations": [{"rule": "self.l.all(x, self.l.all(y, x <= y || x > y))"}]})
    assert causes(schema) == []  # 2.2M estimated: under the 10M per expression
    assert evaluate(schema, {"spec": {"l": list(range(10))}}) == []
    assert evaluate(schema, {"spec": {"l": list(range(600))}}) == [
        "spec: Invalid value: \"object\": 'operation cancelled: actual cost limit exceeded': no further validation "
        "rules will be run due to call cost exceeds limit for rule: self.l.all(x, self.l.all(y, x <= y || x > y))"]
