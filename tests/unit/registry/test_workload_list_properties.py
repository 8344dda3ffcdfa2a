"""Property tests on a Deployment: strategic merge patch and server-side apply follow the list semantics
kube's schemas declare for containers, env, ports, volumes, tolerations and finalizers, and apply is
idempotent.

Strategic merge (x-kubernetes-patch-strategy / patch-merge-key): containers, env and volumes merge by name,
container ports by containerPort, finalizers by value; tolerations have no strategy and are replaced whole.
Apply (x-kubernetes-list-type / list-map-keys): containers, env and volumes are maps keyed by name, ports
keyed by containerPort and protocol, finalizers a set, tolerations atomic."""
from __future__ import annotations

import copy
from typing import Any

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from services.apis import schemas
from services.apis.schemas import definition_for, merge_keys, replaced_fields
from services.apiserver import patch as p
from services.apiserver import fieldmanager as fm
from services.apiserver.typed import Parser

DEPLOYMENT = definition_for("apps", "v1", "Deployment")
KEYS = merge_keys(DEPLOYMENT)
REPLACED = replaced_fields(DEPLOYMENT)
MANAGER = fm.FieldManager(Parser(schemas.ALL), DEPLOYMENT, "apps/v1")

name = st.text("abcde", min_size=1, max_size=3)
value = st.text("xyz01", max_size=2)
env = st.lists(st.tuples(name, value), unique_by=lambda t: t[0], max_size=4).map(
    lambda items: [{"name": n, "value": v} for n, v in items])
ports = st.lists(st.integers(1, 12), unique=True, max_size=3).map(
    lambda ps: [{"containerPort": c, "protocol": "TCP"} for c in ps])
container = st.fixed_dictionaries({"name": name, "image": st.sampled_from(["nginx", "busybox", "redis"])},
                                  optional={"env": env, "ports": ports})
containers = st.lists(container, unique_by=lambda c: c["name"], min_size=1, max_size=3)
volumes = st.lists(st.tuples(name, name), unique_by=lambda t: t[0], max_size=3).map(
    lambda items: [{"name": n, "configMap": {"name": cm}} for n, cm in items])
tolerations = st.lists(st.fixed_dictionaries({"key": name, "operator": st.sampled_from(["Exists", "Equal"])},
                                             optional={"effect": st.sampled_from(["NoSchedule", "NoExecute"])}),
                       max_size=3)
finalizers = st.lists(st.sampled_from(["example.com/a", "example.com/b", "example.com/c", "kubernetes"]),
                      unique=True, max_size=3)


def deployment(cs: list[dict], vs: list[dict] | None = None, ts: list[dict] | None = None,
               fs: list[str] | None = None) -> dict[str, Any]:
    pod: dict[str, Any] = {"containers": cs}
    if vs is not None:
        pod["volumes"] = vs
    if ts is not None:
        pod["tolerations"] = ts
    meta: dict[str, Any] = {"name": "d", "namespace": "ns"}
    if fs is not None:
        meta["finalizers"] = fs
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta,
            "spec": {"selector": {"matchLabels": {"app": "d"}},
                     "template": {"metadata": {"labels": {"app": "d"}}, "spec": pod}}}


def pod_spec(obj: dict) -> dict:
    return obj["spec"]["template"]["spec"]


def by(items: list[dict] | None, *key: str) -> dict:
    out = {tuple(i[k] for k in key): i for i in items or []}
    assert len(out) == len(items or []), f"duplicate {key} in {items}"
    return out


def merged_by_key(live: list[dict] | None, patch: list[dict] | None, key: str) -> dict:
    """What strategic merge gives a list of flat items merged by key: patch fields over the live item's."""
    out = {k: dict(v) for k, v in by(live, key).items()}
    for k, item in by(patch, key).items():
        out[k] = {**out.get(k, {}), **item}
    return out


# Strategic merge patch -----------------------------------------------------------------------------------


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(containers, containers, st.data())
def test_smp_containers_env_and_ports_merge_by_key(live, patch, data):
    deleted = data.draw(st.lists(st.sampled_from([c["name"] for c in live]), unique=True, max_size=1))
    ops = [c for c in patch if c["name"] not in deleted] + [{"name": n, "$patch": "delete"} for n in deleted]
    out = p.apply_strategic_merge_patch(deployment(copy.deepcopy(live)), deployment(copy.deepcopy(ops)),
                                        KEYS, REPLACED)
    got = by(pod_spec(out)["containers"], "name")
    want_names = {c["name"] for c in live} - set(deleted) | {c["name"] for c in patch if c["name"] not in deleted}
    assert set(got) == {(n,) for n in want_names}
    olds, news = by(live, "name"), by(patch, "name")
    for (n,), c in got.items():
        old, new = olds.get((n,), {}), news.get((n,), {})
        assert c["image"] == new.get("image", old.get("image"))
        assert by(c.get("env"), "name") == merged_by_key(old.get("env"), new.get("env"), "name")
        assert by(c.get("ports"), "containerPort") == merged_by_key(old.get("ports"), new.get("ports"),
                                                                    "containerPort")


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(containers, env, st.lists(name, unique=True, max_size=2))
def test_smp_env_delete_directive(cs, extra, gone):
    first = cs[0]["name"]
    ops = extra + [{"name": n, "$patch": "delete"} for n in gone if n not in {e["name"] for e in extra}]
    out = p.apply_strategic_merge_patch(deployment(copy.deepcopy(cs)),
                                        deployment([{"name": first, "env": ops}]), KEYS, REPLACED)
    [c] = [c for c in pod_spec(out)["containers"] if c["name"] == first]
    want = merged_by_key(cs[0].get("env"), extra, "name")
    for n in gone:
        if n not in {e["name"] for e in extra}:
            want.pop((n,), None)
    assert by(c.get("env"), "name") == want


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(volumes, volumes, tolerations, tolerations, finalizers, finalizers)
def test_smp_volumes_merge_tolerations_replace_finalizers_union(lv, pv, lt, pt, lf, pf):
    live = deployment([{"name": "c", "image": "nginx"}], lv, lt, lf)
    patch = {"metadata": {"finalizers": pf}, "spec": {"template": {"spec": {"volumes": pv, "tolerations": pt}}}}
    out = p.apply_strategic_merge_patch(live, copy.deepcopy(patch), KEYS, REPLACED)
    spec = pod_spec(out)
    assert by(spec.get("volumes"), "name") == {k: v for k, v in merged_by_key(lv, pv, "name").items()}
    assert spec["tolerations"] == pt                 # no patch strategy: the list is replaced whole
    assert out["metadata"]["finalizers"] == lf + [f for f in pf if f not in lf]
    removed = p.apply_strategic_merge_patch(out, {"metadata": {"$deleteFromPrimitiveList/finalizers": pf}},
                                            KEYS, REPLACED)
    assert removed["metadata"].get("finalizers", []) == [f for f in lf if f not in pf]


# Server-side apply ---------------------------------------------------------------------------------------


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(containers, volumes, tolerations, finalizers, st.sampled_from(["a", "b"]))
def test_apply_is_idempotent(cs, vs, ts, fs, manager):
    config = deployment(cs, vs, ts, fs)
    once = MANAGER.apply(None, copy.deepcopy(config), manager)
    twice = MANAGER.apply(copy.deepcopy(once), copy.deepcopy(config), manager)
    assert twice == once


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(containers, containers, volumes, volumes, tolerations, tolerations, finalizers, finalizers)
def test_apply_two_managers_follow_list_types(ca, cb, va, vb, ta, tb, fa, fb):
    live = MANAGER.apply(None, deployment(copy.deepcopy(ca), va, ta, fa), "a")
    out = MANAGER.apply(live, deployment(copy.deepcopy(cb), vb, tb, fb), "b", force=True)
    spec = pod_spec(out)
    got = by(spec["containers"], "name")
    # containers: a map keyed by name; b's fields win where both set them, a's others stay
    assert set(got) == {(c["name"],) for c in ca} | {(c["name"],) for c in cb}
    olds, news = by(ca, "name"), by(cb, "name")
    for key, c in got.items():
        old, new = olds.get(key, {}), news.get(key, {})
        assert c["image"] == new.get("image", old.get("image"))
        assert by(c.get("env"), "name") == merged_by_key(old.get("env"), new.get("env"), "name")
        assert by(c.get("ports"), "containerPort", "protocol") == {
            (k[0], "TCP"): v for k, v in merged_by_key(old.get("ports"), new.get("ports"), "containerPort").items()}
    assert by(spec.get("volumes"), "name") == merged_by_key(va, vb, "name")
    assert spec.get("tolerations", []) == tb        # atomic: the forcing applier's list, whole
    assert set(out["metadata"].get("finalizers", [])) == set(fa) | set(fb)
    # each manager owns the containers it applied
    owned = {e["manager"]: e["fieldsV1"] for e in out["metadata"]["managedFields"]}
    for c in cb:
        assert f'k:{{"name":"{c["name"]}"}}' in owned["b"]["f:spec"]["f:template"]["f:spec"]["f:containers"]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(containers, containers, finalizers, finalizers, tolerations)
# an empty list the sole applier stops applying goes too (it was kept: an empty list owned no field)
@example([{"name": "a", "image": "nginx", "env": []}], [{"name": "a", "image": "nginx"}], [], [], [])
def test_sole_applier_dropping_items_removes_them(first, second, f1, f2, ts):
    live = MANAGER.apply(None, deployment(copy.deepcopy(first), None, ts, f1), "a")
    out = MANAGER.apply(live, deployment(copy.deepcopy(second), None, None, f2), "a")
    spec = pod_spec(out)
    assert by(spec["containers"], "name") == by(second, "name")
    assert "tolerations" not in spec
    assert sorted(out["metadata"].get("finalizers", [])) == sorted(f2)
