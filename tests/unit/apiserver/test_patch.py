import pytest
from hypothesis import given
from hypothesis import strategies as st

from services.apiserver import patch as p
from services.common import errors

json_leaf = st.one_of(st.booleans(), st.integers(), st.text(max_size=5), st.lists(st.integers(), max_size=3))
json_obj = st.recursive(
    st.dictionaries(st.text(max_size=4), json_leaf, max_size=4),
    lambda children: st.dictionaries(st.text(max_size=4), st.one_of(json_leaf, children), max_size=4),
    max_leaves=12,
)


@given(json_obj, json_obj)
def test_merge_patch_round_trip(original, target):
    assert p.apply_merge_patch(original, p.create_merge_patch(original, target)) == target


def test_merge_patch_rfc7386_examples():
    assert p.apply_merge_patch({"a": "b"}, {"a": "c"}) == {"a": "c"}
    assert p.apply_merge_patch({"a": "b"}, {"a": None}) == {}
    assert p.apply_merge_patch({"a": [{"b": "c"}]}, {"a": [1]}) == {"a": [1]}
    assert p.apply_merge_patch({"a": {"b": "c"}}, {"a": {"b": "d", "c": None}}) == {"a": {"b": "d"}}


def test_json_patch_errors():
    doc = {"data": {"a": "1"}}
    assert p.apply_json_patch(doc, [{"op": "replace", "path": "/data/a", "value": "2"}]) == {"data": {"a": "2"}}
    assert doc == {"data": {"a": "1"}}
    with pytest.raises(errors.Invalid) as e:
        p.apply_json_patch(doc, [{"op": "test", "path": "/data/a", "value": "2"}])
    assert e.value.message == "the server rejected our request due to an error in our request"
    assert e.value.details["causes"] == [{"reason": "UnexpectedServerResponse",
                                          "message": "testing value /data/a failed: test failed"}]
    # the ops apply in order: a test after a replace sees the replaced value
    assert p.apply_json_patch(doc, [{"op": "replace", "path": "/data/a", "value": "2"},
                                    {"op": "test", "path": "/data/a", "value": "2"}]) == {"data": {"a": "2"}}
    with pytest.raises(errors.Invalid):
        p.apply_json_patch(doc, [{"op": "remove", "path": "/nope/x"}])
    with pytest.raises(errors.BadRequest):
        p.apply_json_patch(doc, {"op": "add"})


def test_strategic_merge_patch():
    keys = {"metadata.ownerReferences": "uid", "metadata.finalizers": ""}
    doc = {"metadata": {"finalizers": ["a"], "ownerReferences": [{"uid": "1", "name": "x"},
                                                                  {"uid": "2", "name": "y"}],
                        "labels": {"k": "v", "drop": "me"}},
           "data": {"x": "1"}}
    out = p.apply_strategic_merge_patch(doc, {
        "metadata": {"finalizers": ["b", "a"], "labels": {"drop": None, "n": "1"},
                     "ownerReferences": [{"uid": "2", "name": "z"}, {"uid": "1", "$patch": "delete"},
                                         {"uid": "3", "name": "w"}]},
        "data": {"$patch": "replace", "y": "2"},
    }, keys)
    assert out["metadata"]["finalizers"] == ["a", "b"]
    assert out["metadata"]["labels"] == {"k": "v", "n": "1"}
    assert out["metadata"]["ownerReferences"] == [{"uid": "2", "name": "z"}, {"uid": "3", "name": "w"}]
    assert out["data"] == {"y": "2"}
    out = p.apply_strategic_merge_patch(doc, {"metadata": {"$deleteFromPrimitiveList/finalizers": ["a"]}}, keys)
    assert out["metadata"]["finalizers"] == []
    with pytest.raises(errors.Invalid):
        p.apply_strategic_merge_patch(doc, {"metadata": {"ownerReferences": [{"name": "no-uid"}]}}, keys)


def test_patch_type():
    assert p.patch_type("application/merge-patch+json; charset=utf-8") == p.MERGE_PATCH
    with pytest.raises(errors.UnsupportedMediaType) as e:
        p.patch_type("application/json")
    assert e.value.code == 415


def test_too_many_json_patch_operations_is_413():
    ops = [{"op": "test", "path": "/a", "value": 1}] * (p.MAX_JSON_PATCH_OPERATIONS + 1)
    with pytest.raises(errors.RequestEntityTooLarge) as e:
        p.apply_json_patch({"a": 1}, ops)
    assert e.value.code == 413
    assert e.value.message == ("Request entity too large: The allowed maximum operations in a JSON patch is 10000, "
                               "got 10001")


def test_strategic_directives_from_the_schema():
    from services.apis.schemas import definition_for, merge_keys
    keys = merge_keys(definition_for("", "v1", "Service"))
    svc = {"spec": {"ports": [{"port": 80, "name": "a"}, {"port": 81, "name": "b"}], "selector": {"x": "1"}}}
    out = p.apply_strategic_merge_patch(svc, {"spec": {
        "$setElementOrder/ports": [{"port": 81}, {"port": 80}],
        "ports": [{"port": 80, "name": "renamed"}], "selector": {"$patch": "merge", "y": "2"}}}, keys)
    assert out["spec"]["ports"] == [{"port": 81, "name": "b"}, {"port": 80, "name": "renamed"}]
    assert out["spec"]["selector"] == {"x": "1", "y": "2"}
    out = p.apply_strategic_merge_patch({"spec": {}}, {"spec": {"ports": [{"port": 1, "$patch": "merge"}]}}, keys)
    assert out["spec"]["ports"] == [{"port": 1}]
    out = p.apply_strategic_merge_patch(svc, {"spec": {"$retainKeys": ["ports"], "ports": [{"port": 82}]}}, keys)
    assert out["spec"] == {"ports": [{"port": 80, "name": "a"}, {"port": 81, "name": "b"}, {"port": 82}]}
    with pytest.raises(errors.BadRequest):
        p.apply_strategic_merge_patch(svc, {"spec": {"$retainKeys": ["selector"], "ports": []}}, keys)
    with pytest.raises(errors.Invalid):
        p.apply_strategic_merge_patch(svc, {"spec": {"$patch": "sideways"}}, keys)


def test_patch_strategy_replace_from_the_schema():
    from services.apis.schemas import definition_for, merge_keys, replaced_fields
    name = definition_for("policy", "v1", "PodDisruptionBudget")
    assert replaced_fields(name) == {"spec.selector"}
    doc = {"spec": {"selector": {"matchLabels": {"a": "1"}}, "minAvailable": 1}}
    out = p.apply_strategic_merge_patch(doc, {"spec": {"selector": {"matchLabels": {"b": "2"}}}},
                                        merge_keys(name), replaced_fields(name))
    assert out["spec"] == {"selector": {"matchLabels": {"b": "2"}}, "minAvailable": 1}
