"""The controller-manager's decisions without a server: the garbage collector's graph and choices,
the namespace controller's conditions, --controllers, the work queue and the leader election checks."""
from __future__ import annotations

import asyncio
import copy

import pytest

from services.common.errors import Conflict, NotFound
from services.controllermanager.__main__ import enabled_controllers, parse_args
from services.controllermanager.client import Client, Resource, RESTMapper, aggregated_resources
from services.controllermanager.discoverychanges import DiscoveryChanges
from services.controllermanager.garbagecollector import Classified, Graph, changes, decide, node_of
from services.controllermanager.leaderelection import Config, LeaderElector
from services.controllermanager.namespace import CONDITION_TYPES, conditions, remaining_messages
from services.controllermanager.workqueue import WorkQueue
from tests.waiting import until

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
    assert "garbage-collector-controller" in every and "resourcequota-controller" in every and len(every) == 9
    assert enabled_controllers(["*", "-resourcequota"]) == [c for c in every if c != "resourcequota-controller"]
    assert "namespace-controller" not in enabled_controllers(["*", "-namespace"])
    assert enabled_controllers(["serviceaccount"]) == ["serviceaccount-controller"]
    with pytest.raises(ValueError, match="not in the list of known controllers"):
        enabled_controllers(["bogus"])


def test_resource_quota_flags():
    """kube's names and defaults: a full recount every 5m, 5 concurrent syncs."""
    base = ["--kubeconfig", "kubeconfig", "--root-ca-file", "ca.crt"]
    args = parse_args(base)
    assert (args.resource_quota_sync_period, args.concurrent_resource_quota_syncs) == (300.0, 5)
    args = parse_args([*base, "--resource-quota-sync-period", "1m30s", "--concurrent-resource-quota-syncs", "2"])
    assert (args.resource_quota_sync_period, args.concurrent_resource_quota_syncs) == (90.0, 2)


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
        await until(lambda: "slow" in seen, what="slow being handled")
        q.add("slow")  # while being handled: handled once more afterwards, not at the same time
        gate.set()
        await until(lambda: seen.count("slow") == 2 and seen.count("bad") == 2, what="slow and bad handled twice")
    finally:
        await q.stop()
    assert seen.count("a") == 1 and seen.count("bad") == 2 and seen.count("slow") == 2


class LeaseServer:
    """One Lease with resourceVersion semantics: an update naming an old resourceVersion is a Conflict."""

    def __init__(self) -> None:
        self.lease: dict | None = None
        self.rv = 0
        self.calls: list[str] = []

    def _stored(self, obj: dict) -> dict:
        self.rv += 1
        self.lease = {**obj, "metadata": {**obj["metadata"], "resourceVersion": str(self.rv)}}
        return copy.deepcopy(self.lease)

    async def get(self, res, namespace: str, name: str) -> dict:
        self.calls.append("get")
        if self.lease is None:
            raise NotFound("leases.coordination.k8s.io \"kube-controller-manager\" not found")
        return copy.deepcopy(self.lease)

    async def create(self, res, namespace: str, obj: dict) -> dict:
        self.calls.append("create")
        return self._stored(obj)

    async def update(self, res, obj: dict) -> dict:
        self.calls.append("update")
        assert self.lease is not None
        if obj["metadata"].get("resourceVersion") != self.lease["metadata"]["resourceVersion"]:
            raise Conflict("the object has been modified")
        return self._stored(obj)


async def test_a_valid_leader_renews_with_one_update():
    """client-go's fast path: a leader renews by updating the Lease it last wrote, without reading it; when
    someone else wrote it meanwhile, the conflict sends it to the slow path (read, then decide)."""
    server = LeaseServer()
    elector = LeaderElector(server, Config(), "me", None, None)  # type: ignore[arg-type]
    assert await elector._try_acquire_or_renew()
    assert server.calls == ["get", "create"]
    elector.leading = True
    for _ in range(3):
        assert await elector._try_acquire_or_renew()
    assert server.calls[2:] == ["update"] * 3
    assert server.lease["spec"]["holderIdentity"] == "me" and server.lease["spec"]["leaseTransitions"] == 0
    # another writer: the optimistic update conflicts, the slow path reads the Lease and renews over it
    server._stored({**server.lease, "spec": {**server.lease["spec"], "renewTime": "elsewhere"}})
    server.calls.clear()
    assert await elector._try_acquire_or_renew()
    assert server.calls == ["update", "get", "update"]
    # not leading (a candidate): always the slow path
    elector.leading = False
    server.calls.clear()
    assert await elector._try_acquire_or_renew()
    assert server.calls == ["get", "update"]


def test_aggregated_discovery_resources():
    """The preferred (first) version of each group; a Stale group and a resource without responseKind are left
    out, as client-go leaves them."""
    def version(v: str, *resources: dict, freshness: str = "Current") -> dict:
        return {"version": v, "freshness": freshness, "resources": list(resources)}

    def resource(name: str, kind: str | None, scope: str = "Namespaced") -> dict:
        r = {"resource": name, "scope": scope, "verbs": ["delete", "list", "watch"]}
        if kind:
            r["responseKind"] = {"group": "", "version": "", "kind": kind}
        return r

    doc = {"kind": "APIGroupDiscoveryList", "items": [
        {"metadata": {"name": ""}, "versions": [version("v1", resource("configmaps", "ConfigMap"),
                                                        resource("nodes", "Node", "Cluster"),
                                                        resource("odd", None))]},
        {"metadata": {"name": "apps"}, "versions": [version("v1", resource("deployments", "Deployment")),
                                                    version("v1beta1", resource("deployments", "Deployment"))]},
        {"metadata": {"name": "restaurant.example"}, "versions": [
            version("v1beta1", resource("pizzas", "Pizza"), freshness="Stale")]},
    ]}
    verbs = frozenset({"delete", "list", "watch"})
    assert aggregated_resources(doc) == [Resource("", "v1", "configmaps", "ConfigMap", True, verbs),
                                         Resource("", "v1", "nodes", "Node", False, verbs),
                                         Resource("apps", "v1", "deployments", "Deployment", True, verbs)]
    failed: set[str] = set()
    aggregated_resources(doc, failed)
    assert failed == {"restaurant.example"}  # its resources are not known to be gone


def test_discovery_changes_name_established_crds_discovery_lacks():
    """The garbage collector reads discovery again while an established CRD's resource is not in it."""
    calls: list[str] = []
    changes_ = DiscoveryChanges(Client(None), lambda: calls.append("changed"))  # type: ignore[arg-type]

    def crd(name: str, group: str, plural: str, established: bool, deleting: bool = False) -> dict:
        meta = {"name": name, **({"deletionTimestamp": "2026-01-01T00:00:00Z"} if deleting else {})}
        return {"metadata": meta, "spec": {"group": group}, "status": {
            "acceptedNames": {"plural": plural},
            "conditions": [{"type": "Established", "status": "True" if established else "False"}]}}

    changes_.crds.store = {"a": crd("a", "x.example", "widgets", True), "b": crd("b", "x.example", "gadgets", False),
                           "c": crd("c", "y.example", "things", True, deleting=True)}
    widgets = Resource("x.example", "v1", "widgets", "Widget", True, frozenset())
    assert changes_.missing([CM]) == {("x.example", "widgets")}
    assert changes_.missing([CM, widgets]) == set()
    changes_.crds._notify("ADDED", changes_.crds.store["a"], None)
    assert calls == ["changed"]
