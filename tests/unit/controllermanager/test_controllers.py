"""The controller-manager's decisions without a server: the garbage collector's graph and choices,
the namespace controller's conditions, --controllers, the work queue and the leader election checks."""
from __future__ import annotations

import asyncio

import pytest

from services.controllermanager.__main__ import enabled_controllers
from services.controllermanager.client import Resource, RESTMapper
from services.controllermanager.garbagecollector import Classified, Graph, changes, decide, node_of
from services.controllermanager.leaderelection import Config
from services.controllermanager.namespace import CONDITION_TYPES, conditions, remaining_messages
from services.controllermanager.workqueue import WorkQueue

CM = Resource("", "v1", "configmaps", "ConfigMap", True, frozenset({"list", "watch", "delete"}))
CR = Resource("rbac.authorization.k8s.io", "v1", "clusterroles", "ClusterRole", False, frozenset())


def obj(name: str, uid: str, owners=(), finalizers=(), deleting=False):
    meta = {"name": name, "namespace": "ns", "uid": uid, "ownerReferences": list(owners),
            "finalizers": list(finalizers)}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {"metadata": meta}


def ref(uid: str, block: bool = False):
    return {"apiVersion": "v1", "kind": "ConfigMap", "name": uid, "uid": uid, "blockOwnerDeletion": block}


def test_graph_links_owners_and_dependents():
    g = Graph()
    g.upsert(node_of(CM, obj("a", "A")))
    g.upsert(node_of(CM, obj("b", "B", [ref("A", block=True)])))
    g.upsert(node_of(CM, obj("c", "C", [ref("A"), ref("X")])))
    assert sorted(n.uid for n in g.dependents_of("A")) == ["B", "C"]
    assert [n.uid for n in g.dependents_of("X")] == ["C"]  # an owner never seen still has its dependents
    assert g.nodes["B"].blocks("A") and not g.nodes["C"].blocks("A")
    g.upsert(node_of(CM, obj("c", "C", [ref("X")])))  # C drops A
    assert [n.uid for n in g.dependents_of("A")] == ["B"]
    g.remove("B")
    assert g.dependents_of("A") == [] and "A" not in g.dependents


def test_changes_that_queue_work():
    plain = node_of(CM, obj("a", "A"))
    assert changes(None, plain) == (False, set())
    owned = node_of(CM, obj("a", "A", [ref("O", block=True)]))
    assert changes(None, owned) == (True, set())
    assert changes(owned, owned) == (False, set())
    # a dependent dropping a blocking reference: the owner (maybe waiting on it) is looked at
    assert changes(owned, plain) == (False, {"O"})
    unblocked = node_of(CM, obj("a", "A", [ref("O")]))
    assert changes(owned, unblocked) == (False, {"O"})
    deleting = node_of(CM, obj("a", "A", finalizers=["orphan"], deleting=True))
    assert changes(plain, deleting) == (True, set())
    assert changes(None, deleting) == (True, set())


@pytest.mark.parametrize("classified,has_deps,finalizers,expected", [
    (Classified(solid=[ref("A")]), False, [], ("keep", "")),
    (Classified(solid=[ref("A")], dangling=[ref("B")]), False, [], ("unown", "")),
    (Classified(solid=[ref("A")], waiting=[ref("B")]), True, [], ("unown", "")),
    (Classified(dangling=[ref("B")]), False, [], ("delete", "Background")),
    (Classified(dangling=[ref("B")]), True, [], ("delete", "Background")),
    (Classified(waiting=[ref("B")]), True, [], ("delete", "Foreground")),
    (Classified(waiting=[ref("B")]), False, [], ("delete", "Background")),
    (Classified(dangling=[ref("B")]), False, ["orphan"], ("delete", "Orphan")),
    (Classified(dangling=[ref("B")]), False, ["foregroundDeletion"], ("delete", "Foreground")),
])
def test_decide(classified, has_deps, finalizers, expected):
    assert decide(classified, has_deps, finalizers) == expected


def test_restmapper_by_kind():
    m = RESTMapper([CM, CR])
    assert m.for_kind("v1", "ConfigMap") is CM
    assert m.for_kind("rbac.authorization.k8s.io/v1", "ClusterRole") is CR
    assert m.for_kind("rbac.authorization.k8s.io/v1beta1", "ClusterRole") is CR  # another version, same group
    assert m.for_kind("v1", "Pod") is None
    assert CR.path("ns", "x") == "/apis/rbac.authorization.k8s.io/v1/clusterroles/x"
    assert CM.path("ns", "x") == "/api/v1/namespaces/ns/configmaps/x"


def test_namespace_conditions():
    failed = remaining_messages({"configmaps.": 2}, {"example.com/f": 1})
    conds = conditions(failed, [])
    assert [c["type"] for c in conds] == list(CONDITION_TYPES)
    by = {c["type"]: c for c in conds}
    assert by["NamespaceContentRemaining"]["status"] == "True"
    assert by["NamespaceContentRemaining"]["message"] == \
        "Some resources are remaining: configmaps. has 2 resource instances"
    assert by["NamespaceFinalizersRemaining"]["message"] == \
        "Some content in the namespace has finalizers remaining: example.com/f in 1 resource instances"
    assert by["NamespaceDeletionDiscoveryFailure"] == {**by["NamespaceDeletionDiscoveryFailure"], "status": "False",
                                                       "reason": "ResourcesDiscovered"}
    # unchanged conditions keep their transition time
    for c in conds:
        c["lastTransitionTime"] = "2000-01-01T00:00:00Z"
    again = {c["type"]: c for c in conditions(failed, conds)}
    assert again["NamespaceContentRemaining"]["lastTransitionTime"] == "2000-01-01T00:00:00Z"
    cleared = {c["type"]: c for c in conditions({}, conds)}
    assert cleared["NamespaceContentRemaining"]["status"] == "False"
    assert cleared["NamespaceContentRemaining"]["lastTransitionTime"] != "2000-01-01T00:00:00Z"


def test_controllers_flag():
    every = enabled_controllers(["*"])
    assert "garbage-collector-controller" in every and len(every) == 4
    assert "namespace-controller" not in enabled_controllers(["*", "-namespace"])
    assert enabled_controllers(["serviceaccount"]) == ["serviceaccount-controller"]
    with pytest.raises(ValueError, match="not in the list of known controllers"):
        enabled_controllers(["bogus"])


def test_leader_election_config_checks():
    Config().validate()
    with pytest.raises(ValueError, match="leaseDuration must be greater than renewDeadline"):
        Config(lease_duration=10, renew_deadline=10).validate()
    with pytest.raises(ValueError, match="renewDeadline must be greater than retryPeriod"):
        Config(renew_deadline=2, retry_period=2).validate()


async def test_workqueue_dedups_and_retries():
    seen: list[str] = []
    gate = asyncio.Event()
    failed = set()

    async def handle(key: str) -> None:
        seen.append(key)
        if key == "bad" and key not in failed:
            failed.add(key)
            raise RuntimeError("once")
        if key == "slow":
            await gate.wait()

    q = WorkQueue("test", handle)
    q.add("a")
    q.add("a")
    q.add("bad")
    q.start()
    try:
        q.add("slow")
        for _ in range(200):
            if "slow" in seen:
                break
            await asyncio.sleep(0.01)
        q.add("slow")  # while being handled: handled once more afterwards, not at the same time
        gate.set()
        for _ in range(200):
            if seen.count("slow") == 2 and seen.count("bad") == 2:
                break
            await asyncio.sleep(0.01)
    finally:
        await q.stop()
    assert seen.count("a") == 1 and seen.count("bad") == 2 and seen.count("slow") == 2
