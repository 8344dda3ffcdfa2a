"""Property tests: server-side apply is idempotent and follows the list semantics kube's schemas declare
(map-lists merge by key, atomic lists are replaced whole, a sole applier's dropped fields go)."""
from __future__ import annotations

import copy

from hypothesis import given, settings
from hypothesis import strategies as st

from services.apis import schemas
from services.apis.schemas import definition_for
from services.apiserver import fieldmanager as fm
from services.apiserver.typed import Parser

RBAC = "rbac.authorization.k8s.io"
MANAGERS = {kind: fm.FieldManager(Parser(schemas.ALL), definition_for(group, "v1", kind),
                                  f"{group}/v1" if group else "v1")
            for group, kind in (("", "ConfigMap"), ("", "Secret"), ("", "ServiceAccount"), ("", "Service"),
                                (RBAC, "Role"), (RBAC, "RoleBinding"))}

keys = st.text("abcdefgh", min_size=1, max_size=4)
values = st.text("xyz01", max_size=3)
data = st.dictionaries(keys, values, max_size=5)
labels = st.dictionaries(keys, values, max_size=3)
ports = st.lists(st.integers(1, 20), unique=True, max_size=4).map(
    lambda ps: [{"port": p, "protocol": "TCP", "targetPort": p + 1} for p in ps])
names = st.lists(keys, unique=True, max_size=4)
rules = st.lists(st.fixed_dictionaries({"verbs": st.lists(st.sampled_from(["get", "list", "watch"]), min_size=1,
                                                                          unique=True),
                                         "apiGroups": st.just([""]),
                                         "resources": st.lists(keys, min_size=1, max_size=2, unique=True)}),
                 max_size=3)


def meta(name: str = "o", **extra) -> dict:
    return {"name": name, "namespace": "ns", **extra}


@st.composite
def objects(draw) -> tuple[str, dict]:
    kind = draw(st.sampled_from(sorted(MANAGERS)))
    m = meta(labels=draw(labels)) if draw(st.booleans()) else meta()
    if kind == "ConfigMap":
        obj = {"data": draw(data)}
    elif kind == "Secret":
        obj = {"stringData": draw(data), "type": "Opaque"}
    elif kind == "ServiceAccount":
        obj = {"secrets": [{"name": n} for n in draw(names)]}
    elif kind == "Service":
        obj = {"spec": {"ports": draw(ports), "selector": draw(labels)}}
    elif kind == "Role":
        obj = {"rules": draw(rules)}
    else:
        obj = {"roleRef": {"apiGroup": RBAC, "kind": "Role", "name": "r"},
               "subjects": [{"kind": "User", "name": n, "apiGroup": RBAC} for n in draw(names)]}
    return kind, {"metadata": m, **obj}


@settings(max_examples=150, deadline=None)
@given(objects(), st.sampled_from(["a", "b"]))
def test_apply_is_idempotent(case, manager):
    kind, config = case
    m = MANAGERS[kind]
    once = m.apply(None, copy.deepcopy(config), manager)
    twice = m.apply(copy.deepcopy(once), copy.deepcopy(config), manager)
    assert twice == once


@settings(max_examples=150, deadline=None)
@given(data, data)
def test_sole_applier_owns_exactly_what_it_applies(first, second):
    m = MANAGERS["ConfigMap"]
    live = m.apply(None, {"metadata": meta(), "data": first}, "a")
    out = m.apply(live, {"metadata": meta(), "data": second}, "a")
    assert out.get("data", {}) == second


@settings(max_examples=150, deadline=None)
@given(ports, ports)
def test_service_ports_merge_by_key_across_managers(mine, theirs):
    m = MANAGERS["Service"]
    live = m.apply(None, {"metadata": meta(), "spec": {"ports": mine}}, "a")
    out = m.apply(live, {"metadata": meta(), "spec": {"ports": theirs}}, "b", force=True)
    got = {p["port"]: p for p in out["spec"].get("ports", [])}
    assert set(got) == {p["port"] for p in mine} | {p["port"] for p in theirs}
    for p in theirs:
        assert got[p["port"]] == p
    # each item is owned by whoever applied it
    fields = {e["manager"]: e["fieldsV1"] for e in out["metadata"].get("managedFields", [])}
    for p in theirs:
        assert f'k:{{"port":{p["port"]},"protocol":"TCP"}}' in fields["b"]["f:spec"]["f:ports"]


@settings(max_examples=150, deadline=None)
@given(names, names)
def test_service_account_secrets_is_a_map_list_and_subjects_atomic(mine, theirs):
    sa = MANAGERS["ServiceAccount"]
    live = sa.apply(None, {"metadata": meta(), "secrets": [{"name": n} for n in mine]}, "a")
    out = sa.apply(live, {"metadata": meta(), "secrets": [{"name": n} for n in theirs]}, "b", force=True)
    assert {s["name"] for s in out.get("secrets", [])} == set(mine) | set(theirs)

    rb = MANAGERS["RoleBinding"]
    ref = {"apiGroup": RBAC, "kind": "Role", "name": "r"}
    subjects = [{"kind": "User", "name": n, "apiGroup": RBAC} for n in mine]
    live = rb.apply(None, {"metadata": meta(), "roleRef": ref, "subjects": subjects}, "a")
    replaced = [{"kind": "User", "name": n, "apiGroup": RBAC} for n in theirs]
    out = rb.apply(live, {"metadata": meta(), "roleRef": ref, "subjects": replaced}, "b", force=True)
    assert out["subjects"] == replaced


@settings(max_examples=100, deadline=None)
@given(rules, rules)
def test_role_rules_are_atomic(mine, theirs):
    m = MANAGERS["Role"]
    live = m.apply(None, {"metadata": meta(), "rules": mine}, "a")
    out = m.apply(live, {"metadata": meta(), "rules": theirs}, "b", force=True)
    assert out["rules"] == theirs


@settings(max_examples=150, deadline=None)
@given(ports, ports, st.lists(st.integers(1, 20), unique=True, max_size=3), names, names)
def test_strategic_merge_patch_list_semantics(live_ports, patch_ports, deleted, finalizers, more):
    from services.apis.schemas import merge_keys
    from services.apiserver import patch as p
    keys = merge_keys(definition_for("", "v1", "Service"))
    doc = {"metadata": {"finalizers": finalizers}, "spec": {"ports": live_ports}}
    ops = patch_ports + [{"port": d, "$patch": "delete"} for d in deleted if d not in {x["port"] for x in patch_ports}]
    out = p.apply_strategic_merge_patch(doc, {"metadata": {"finalizers": more}, "spec": {"ports": ops}}, keys)
    got = [x["port"] for x in out["spec"]["ports"]]
    want = {x["port"] for x in live_ports} - set(deleted) | {x["port"] for x in patch_ports}
    assert sorted(got) == sorted(want) and len(got) == len(set(got))
    assert out["metadata"]["finalizers"] == finalizers + [f for f in more if f not in finalizers]
