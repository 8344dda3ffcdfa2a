"""Fields kept by x-kubernetes-preserve-unknown-fields are typed by their value (smd's deduced type): objects are
granular maps, so two appliers own different keys; lists and scalars are owned whole."""
from __future__ import annotations

from services.apiserver import typed

SCHEMA = {"type": "object", "properties": {"spec": {
    "type": "object", "x-kubernetes-preserve-unknown-fields": True,
    "properties": {"ports": {"type": "array", "x-kubernetes-list-type": "set", "items": {"type": "integer"}}}}}}
P = typed.Parser({})


def test_unknown_fields_are_deduced() -> None:
    obj = {"spec": {"ports": [80], "extra": {"a": 1, "b": {"c": "x"}}, "hosts": ["h1", "h2"], "n": 3}}
    assert P.field_set(obj, SCHEMA) == {("f:spec", "f:ports", "v:80"), ("f:spec", "f:extra", "f:a"),
                                        ("f:spec", "f:extra", "f:b", "f:c"), ("f:spec", "f:hosts"), ("f:spec", "f:n")}


def test_merge_of_deduced_maps_is_granular_and_lists_atomic() -> None:
    lhs = {"spec": {"extra": {"a": 1}, "hosts": ["h1"]}}
    rhs = {"spec": {"extra": {"b": 2}, "hosts": ["h2"]}}
    assert P.merge(lhs, rhs, SCHEMA) == {"spec": {"extra": {"a": 1, "b": 2}, "hosts": ["h2"]}}
    assert P.remove(P.merge(lhs, rhs, SCHEMA), SCHEMA, {("f:spec", "f:extra", "f:a")}) == \
        {"spec": {"extra": {"b": 2}, "hosts": ["h2"]}}
