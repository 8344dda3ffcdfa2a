"""Server-side apply's field ownership (fieldmanager over typed): sets, conflicts, removal, upgrades."""
from __future__ import annotations

import copy

import orjson
import pytest

from services.apis import schemas
from services.apis.schemas import definition_for
from services.common import errors
from services.apiserver import fieldmanager as fm
from services.apiserver import typed

TYPED = typed.Parser(schemas.ALL)
CM = fm.FieldManager(TYPED, definition_for("", "v1", "ConfigMap"), "v1")
SVC = fm.FieldManager(TYPED, definition_for("", "v1", "Service"), "v1")
ROLE = fm.FieldManager(TYPED, definition_for("rbac.authorization.k8s.io", "v1", "Role"), "rbac.authorization.k8s.io/v1")


def cm(data: dict | None = None, **meta) -> dict:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "d", **meta},
            "data": data if data is not None else {}}


def entry(obj: dict, manager: str) -> dict:
    return next(e for e in obj["metadata"]["managedFields"] if e["manager"] == manager)


def test_fields_v1_of_an_apply():
    out = CM.apply(None, cm({"k": "v"}, labels={"a": "b"}), "m")
    e = out["metadata"]["managedFields"][0]
    assert e["operation"] == "Apply" and e["manager"] == "m" and e["fieldsType"] == "FieldsV1" and e["time"]
    assert e["fieldsV1"] == {"f:data": {"f:k": {}}, "f:metadata": {"f:labels": {"f:a": {}}}}


def test_map_list_items_are_members():
    svc = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s"},
           "spec": {"ports": [{"port": 80, "protocol": "TCP", "name": "http"}], "selector": {"a": "b"}}}
    fields = SVC.apply(None, svc, "m")["metadata"]["managedFields"][0]["fieldsV1"]
    key = 'k:{"port":80,"protocol":"TCP"}'
    assert fields["f:spec"]["f:ports"][key] == {".": {}, "f:name": {}, "f:port": {}, "f:protocol": {}}
    assert fields["f:spec"]["f:selector"] == {}   # an atomic map is owned whole


def test_conflict_names_field_and_manager_then_force_takes_it():
    live = CM.apply(None, cm({"key": "a"}), "one")
    with pytest.raises(errors.Conflict) as e:
        CM.apply(live, cm({"key": "b"}), "two")
    assert e.value.code == 409
    assert e.value.message == 'Apply failed with 1 conflict: conflict with "one": .data.key'
    assert e.value.details["causes"] == [{"reason": "FieldManagerConflict", "message": 'conflict with "one"',
                                          "field": ".data.key"}]
    out = CM.apply(live, cm({"key": "b"}), "two", force=True)
    assert out["data"] == {"key": "b"}
    assert [e["manager"] for e in out["metadata"]["managedFields"]] == ["two"]


def test_same_value_is_shared_not_a_conflict():
    live = CM.apply(None, cm({"key": "a"}), "one")
    out = CM.apply(live, cm({"key": "a"}), "two")
    assert {e["manager"] for e in out["metadata"]["managedFields"]} == {"one", "two"}


def test_update_manager_conflict_text_and_many_conflicts():
    live = cm({"a": "1", "b": "2"})
    CM.update(None, live, "kubectl-edit")
    with pytest.raises(errors.Conflict) as e:
        CM.apply(live, cm({"a": "x", "b": "y"}), "ssa")
    assert e.value.message == ('Apply failed with 2 conflicts: conflicts with "kubectl-edit" using v1:\n'
                               "- .data.a\n- .data.b")


def test_field_dropped_by_its_sole_applier_is_removed():
    live = CM.apply(None, cm({"a": "1", "b": "2"}), "m")
    out = CM.apply(live, cm({"a": "1"}), "m")
    assert out["data"] == {"a": "1"}
    shared = CM.apply(CM.apply(live, cm({"b": "2"}), "other"), cm({"a": "1"}), "m")
    assert shared["data"] == {"a": "1", "b": "2"}   # another applier still owns b


def test_update_records_changes_and_takes_fields():
    live = CM.apply(None, cm({"a": "1"}), "applier")
    new = copy.deepcopy(live)
    new["data"]["a"] = "2"
    new["data"]["z"] = "3"
    CM.update(live, new, "editor")
    assert entry(new, "editor")["fieldsV1"] == {"f:data": {"f:a": {}, "f:z": {}}}
    assert "applier" not in {e["manager"] for e in new["metadata"]["managedFields"]}


def test_reset_and_noop_update():
    live = CM.apply(None, cm({"a": "1"}), "applier")
    new = copy.deepcopy(live)
    new["metadata"]["managedFields"] = []
    CM.update(live, new, "x")
    assert "managedFields" not in new["metadata"]
    same = copy.deepcopy(live)
    CM.update(live, same, "x")
    assert same["metadata"]["managedFields"] == live["metadata"]["managedFields"]


def test_apply_with_managed_fields_is_refused():
    with pytest.raises(errors.BadRequest):
        CM.apply(None, cm({}, managedFields=[]), "m")


def test_client_side_to_server_side_upgrade():
    config = cm({"a": "1"})
    live = copy.deepcopy(config)
    live["metadata"]["annotations"] = {fm.LAST_APPLIED: orjson.dumps(config).decode()}
    CM.update(None, live, "kubectl-client-side-apply")
    out = CM.apply(live, cm({"a": "2"}), "kubectl")
    assert out["data"] == {"a": "2"}
    assert orjson.loads(out["metadata"]["annotations"][fm.LAST_APPLIED])["data"] == {"a": "2"}
    with pytest.raises(errors.Conflict):   # another manager gets no such pass
        CM.apply(live, cm({"a": "2"}), "someone")


def test_atomic_list_is_replaced_and_owned_whole():
    role = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": "r"},
            "rules": [{"verbs": ["get"], "resources": ["pods"], "apiGroups": [""]}]}
    live = ROLE.apply(None, role, "m")
    assert live["metadata"]["managedFields"][0]["fieldsV1"] == {"f:rules": {}}
    role2 = copy.deepcopy(role)
    role2["rules"] = [{"verbs": ["list"], "resources": ["pods"], "apiGroups": [""]}]
    with pytest.raises(errors.Conflict):
        ROLE.apply(live, role2, "other")


def test_path_strings():
    assert typed.path_string(("f:spec", "f:ports", 'k:{"port":80,"protocol":"TCP"}', "f:name")) == \
        '.spec.ports[port=80,protocol="TCP"].name'
    assert typed.path_string(("f:metadata", "f:finalizers", 'v:"x"')) == '.metadata.finalizers[="x"]'


def test_update_managers_are_capped_into_ancient_changes():
    live = cm({})
    CM.update(None, live, "creator")
    for i in range(12):
        new = copy.deepcopy(live)
        new["data"][f"k{i}"] = "v"
        new["metadata"]["managedFields"] = [dict(e, time=f"2026-01-01T00:00:{i:02d}Z") if e["manager"] != "creator"
                                            else dict(e, time="2025-01-01T00:00:00Z")
                                            for e in live["metadata"].get("managedFields", [])]
        CM.update(live, new, f"m{i:02d}")
        live = new
    managers = [e["manager"] for e in live["metadata"]["managedFields"]]
    assert len(managers) == fm.MAX_UPDATE_MANAGERS and "ancient-changes" in managers
    ancient = entry(live, "ancient-changes")["fieldsV1"]["f:data"]
    assert {"f:k0", "f:k1"} <= set(ancient)
