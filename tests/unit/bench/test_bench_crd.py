"""The custom resources' bench helpers: the CRD and its objects, the ConfigMap of the same size, the summary."""
from __future__ import annotations

import json

from services.apis.strategies.apiextensions import validate_spec
from services.apiserver import structural
from services.apiserver.cel.compilation import compile_schema
from services.apiserver.cel.validation import Validator
from tools.bench_crd import SCHEMA, crd, ready_crds, ready_summary, sized_configmap, widget


def _leaves(schema: dict) -> int:
    props = schema.get("properties")
    return sum(_leaves(s) for s in props.values()) if props else 1


def test_the_crd_is_valid_with_about_twenty_fields_and_two_rules():
    spec = crd("bench.crd.apiary.test", "Widget")["spec"]
    assert validate_spec(spec) == []
    assert 18 <= _leaves(SCHEMA) <= 22
    assert len(SCHEMA["properties"]["spec"]["x-kubernetes-validations"]) == 2


def test_the_widget_passes_the_schema_and_the_rules_and_a_bad_one_fails_a_rule():
    rules = Validator(compile_schema(SCHEMA))
    good = widget("obj-000001")
    assert structural.validate(good, SCHEMA) == [] and rules.validate(good) == []
    causes = rules.validate(widget("bad", path="relative")) + rules.validate(widget("bad", replicas=1))
    assert sorted(c["message"] for c in causes) == ['Invalid value: "object": endpoint.path must be absolute',
                                                    'Invalid value: "object": minReplicas must not exceed replicas']


def test_the_configmap_has_the_size_asked():
    for size in (478, 1000):
        assert len(json.dumps(sized_configmap("obj-000001", size), separators=(",", ":"))) == size
    assert sized_configmap("obj-000001", 10)["data"]["key"] == ""


def test_ready_crds_are_of_distinct_groups_and_kinds():
    pairs = ready_crds(30)
    assert len({g for g, _ in pairs}) == len({k for _, k in pairs}) == 30
    names = {crd(g, k)["metadata"]["name"] for g, k in pairs}
    assert len(names) == 30


def test_ready_summary_takes_p50_and_p90_in_ms():
    r = ready_summary([(0.05 * i, 0.1 * i) for i in range(1, 11)])
    assert (r["p50_ms"], r["p90_ms"], r["crds"]) == (600.0, 1000.0, 10)
    assert (r["established_p50_ms"], r["established_p90_ms"]) == (300.0, 500.0)
