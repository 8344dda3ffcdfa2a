"""The object envelope (services/common/envelope.py): round trips and ill-typed metadata."""
from __future__ import annotations

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from apiary_pb import envelope_pb2 as pb
from services.common.envelope import from_envelope, to_envelope, to_json
from services.common.errors import BadRequest

text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=20)
names = st.from_regex(r"[a-z0-9]([-a-z0-9]{0,20}[a-z0-9])?", fullmatch=True)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | text,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(text, inner, max_size=4),
    max_leaves=12,
)


@st.composite
def objects(draw: st.DrawFn) -> dict:
    meta: dict = {"name": draw(names)}
    for key, strategy in (
        ("namespace", names), ("uid", names), ("resourceVersion", st.integers(1, 2**40).map(str)),
        ("generation", st.integers(1, 2**40)), ("creationTimestamp", st.just("2026-12-01T00:00:00Z")),
        ("labels", st.dictionaries(names, text, min_size=1, max_size=3)),
        ("annotations", st.dictionaries(names, text, min_size=1, max_size=3)),
        ("finalizers", st.lists(names, min_size=1, max_size=3)),
        ("ownerReferences", st.lists(st.fixed_dictionaries(
            {"apiVersion": st.just("v1"), "kind": st.just("ConfigMap"), "name": names, "uid": names},
            optional={"controller": st.booleans(), "blockOwnerDeletion": st.booleans()}), min_size=1, max_size=2)),
    ):
        if draw(st.booleans()):
            meta[key] = draw(strategy)
    body = draw(st.dictionaries(text.filter(lambda k: k not in ("apiVersion", "kind", "metadata")), json_values,
                                max_size=4))
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, **body}


@given(objects())
def test_round_trip(obj: dict) -> None:
    env = to_envelope(obj)
    assert from_envelope(env) == obj
    assert orjson.loads(to_json(env)) == obj  # the spliced JSON is the same object
    again = pb.Object.FromString(env.SerializeToString())  # and so is its wire form
    assert from_envelope(again) == obj


def test_an_empty_body_is_an_empty_object() -> None:
    env = to_envelope({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "n"}})
    assert env.body == b"{}"
    assert orjson.loads(to_json(env)) == {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "n"}}


@pytest.mark.parametrize("meta, message", [
    ("x", "metadata: expected an object"),
    ({"name": 5}, "metadata.name: expected a string"),
    ({"namespace": ["a"]}, "metadata.namespace: expected a string"),
    ({"labels": {"a": 1}}, "metadata.labels: expected a map of strings"),
    ({"annotations": ["a"]}, "metadata.annotations: expected a map of strings"),
    ({"finalizers": "a"}, "metadata.finalizers: expected a list of strings"),
    ({"finalizers": [1]}, "metadata.finalizers: expected a list of strings"),
    ({"generation": "one"}, "metadata: invalid literal for int()"),
    ({"ownerReferences": ["x"]}, "metadata: "),
])
def test_ill_typed_metadata_is_a_bad_request(meta: object, message: str) -> None:
    with pytest.raises(BadRequest) as e:
        to_envelope({"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta})
    assert e.value.message.startswith(message) and e.value.code == 400
