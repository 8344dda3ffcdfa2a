"""The garbage collector (kube's pkg/controller/garbagecollector): a graph of owners and dependents built
from an informer on every deletable resource discovery finds, and one work queue deciding, for an object,
what its ownerReferences and the garbage collector's finalizers ask for:

- an owner deleted with propagationPolicy=Orphan carries the `orphan` finalizer: its dependents lose their
  ownerReferences to it, then the finalizer goes (and with it the owner);
- an owner deleted with Foreground carries `foregroundDeletion`: its dependents are deleted, and the
  finalizer goes once no dependent with blockOwnerDeletion=true is left;
- a dependent whose owners are all gone (Background deletion, or an ownerReference to a uid that never
  existed: a dangling owner) is deleted; one that still has a live owner keeps living, its references to
  gone owners removed.

Owners are looked up live (GET, uid compared), never only from the graph, so an owner the informers have
not seen yet is not taken for absent. Owners may be cluster-scoped for namespaced dependents; a
namespaced owner of a cluster-scoped dependent does not exist, as in kube.
"""
from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import Gauge

from services.common.errors import APIError, Conflict, NotFound
from services.common.informer import Informer

from .client import Client, Resource, RESTMapper
from .discoverychanges import DiscoveryChanges
from .workqueue import WorkQueue

log = logging.getLogger(__name__)

Obj = dict[str, Any]
ORPHAN = "orphan"
FOREGROUND = "foregroundDeletion"
# How often discovery is read again for resources that appeared or went since (kube's GC Sync period: 30s);
# a CRD or APIService event reads it sooner (discoverychanges.py), once the proxy had SETTLE_SECONDS to refresh
# its discovery, and again every SETTLE_SECONDS (at most RETRIES times) while an established CRD is not in it.
RESYNC_SECONDS = 30.0
SETTLE_SECONDS = 0.3
RETRIES = 20
# Resources the collector never watches (kube's ignoredResources: what has no owner to collect).
IGNORED = {("", "events"), ("events.k8s.io", "events"), ("coordination.k8s.io", "leases")}

# kube's collector exports no size of its graph; these are apiary's, for the controller-manager's dashboard.
GRAPH_NODES = Gauge("apiary_garbagecollector_graph_nodes", "Objects in the garbage collector's dependency graph.")
MONITORS = Gauge("apiary_garbagecollector_monitors", "Resources the garbage collector watches.")


@dataclass
class Node:
    resource: Resource
    namespace: str
    name: str
    uid: str
    owners: list[Obj] = field(default_factory=list)
    finalizers: list[str] = field(default_factory=list)
    being_deleted: bool = False

    @property
    def deleting_dependents(self) -> bool:
        return self.being_deleted and FOREGROUND in self.finalizers

    def blocks(self, owner_uid: str) -> bool:
        """Whether this dependent blocks its owner's foreground deletion."""
        return any(o.get("uid") == owner_uid and o.get("blockOwnerDeletion") for o in self.owners)


class Graph:
    """uid -> Node, and owner uid -> dependents' uids (owners that were never seen included)."""

    def __init__(self) -> None:
        self.nodes: dict[str, Node] = {}
        self.dependents: dict[str, set[str]] = {}

    def upsert(self, node: Node) -> Node | None:
        old = self.nodes.get(node.uid)
        if old is not None:
            for ref in old.owners:
                self._unlink(ref.get("uid", ""), node.uid)
        self.nodes[node.uid] = node
        for ref in node.owners:
            self.dependents.setdefault(ref.get("uid", ""), set()).add(node.uid)
        return old

    def remove(self, uid: str) -> Node | None:
        node = self.nodes.pop(uid, None)
        if node is not None:
            for ref in node.owners:
                self._unlink(ref.get("uid", ""), uid)
        return node

    def _unlink(self, owner: str, dependent: str) -> None:
        deps = self.dependents.get(owner)
        if deps is not None:
            deps.discard(dependent)
            if not deps:
                del self.dependents[owner]

    def dependents_of(self, uid: str) -> list[Node]:
        return [self.nodes[d] for d in self.dependents.get(uid, ()) if d in self.nodes]


def node_of(resource: Resource, obj: Obj) -> Node:
    meta = obj.get("metadata") or {}
    return Node(resource, meta.get("namespace") or "", meta.get("name") or "", meta.get("uid") or "",
                list(meta.get("ownerReferences") or []), list(meta.get("finalizers") or []),
                bool(meta.get("deletionTimestamp")))


def changes(old: Node | None, new: Node) -> tuple[bool, set[str]]:
    """What an update of `new` means for the queue: whether it must be looked at itself (it started being
    deleted with a collector's finalizer, or gained owners), and which owners must (those it stopped
    referring to, which may be waiting on it)."""
    if old is None:
        return (new.being_deleted and bool({ORPHAN, FOREGROUND} & set(new.finalizers))) or bool(new.owners), set()
    started = new.being_deleted and not (old.being_deleted and old.finalizers == new.finalizers)
    old_refs = {o.get("uid", ""): o for o in old.owners}
    new_refs = {o.get("uid", ""): o for o in new.owners}
    removed = {u for u, o in old_refs.items() if u not in new_refs or
               (o.get("blockOwnerDeletion") and not new_refs[u].get("blockOwnerDeletion"))}
    return started or set(new_refs) - set(old_refs) != set(), removed


@dataclass
class Classified:
    solid: list[Obj] = field(default_factory=list)
    dangling: list[Obj] = field(default_factory=list)
    waiting: list[Obj] = field(default_factory=list)  # owners in foreground deletion


def decide(classified: Classified, has_dependents: bool, finalizers: list[str]) -> tuple[str, str]:
    """kube's attemptToDeleteItem once the owners are classified: ("keep", ""), ("unown", "") (drop the
    references to gone and waiting owners), or ("delete", propagationPolicy)."""
    if classified.solid:
        return ("unown", "") if classified.dangling or classified.waiting else ("keep", "")
    if classified.waiting and has_dependents:
        return "delete", "Foreground"  # its own dependents go first, as its owner waits on it
    if ORPHAN in finalizers:
        return "delete", "Orphan"
    if FOREGROUND in finalizers:
        return "delete", "Foreground"
    return "delete", "Background"


class GarbageCollector:
    def __init__(self, client: Client, workers: int = 4) -> None:
        self.client = client
        self.graph = Graph()
        self.mapper = RESTMapper([])
        self.informers: dict[Resource, Informer] = {}
        self.queue = WorkQueue("garbage_collector_attempt_to_delete", self._attempt, workers)
        self._resync: asyncio.Task[None] | None = None
        self._discovery_changed = asyncio.Event()
        self.changes = DiscoveryChanges(client, self._discovery_changed.set)

    # lifecycle -----------------------------------------------------------------------------

    async def start(self) -> None:
        self.changes.start()
        await self._sync_monitors()
        await asyncio.gather(*(inf.synced.wait() for inf in self.informers.values()))
        self.queue.start()
        self._resync = asyncio.create_task(self._resync_loop(), name="garbage-collector-resync")
        log.info("garbage collector: watching %d resources", len(self.informers))

    async def stop(self) -> None:
        if self._resync is not None:
            self._resync.cancel()
            await asyncio.gather(self._resync, return_exceptions=True)
        await self.queue.stop()
        await self.changes.stop()
        for inf in self.informers.values():
            await inf.stop()
        self.informers.clear()
        self.graph = Graph()
        GRAPH_NODES.set(0)
        MONITORS.set(0)

    async def _resync_loop(self) -> None:
        retries = 0
        while True:
            try:
                await asyncio.wait_for(self._discovery_changed.wait(), RESYNC_SECONDS)
                await asyncio.sleep(SETTLE_SECONDS)
            except TimeoutError:
                pass
            self._discovery_changed.clear()
            try:
                missing = await self._sync_monitors()
            except Exception as e:  # noqa: BLE001 - next time
                log.info("garbage collector: discovery: %s", e)
                continue
            retries = retries + 1 if missing else 0
            if missing and retries <= RETRIES:
                self._discovery_changed.set()

    async def _sync_monitors(self) -> set[tuple[str, str]]:
        """kube's resyncMonitors: an informer for each deletable resource discovery lists, the informers of
        those it no longer lists stopped (but not of a group whose discovery failed). Returns the established
        CRDs' resources discovery did not list yet."""
        failed: set[str] = set()
        resources = await self.client.discover(failed)
        self.mapper = RESTMapper(resources)
        listed = set(resources)
        for res in [r for r in self.informers if r not in listed and r.group not in failed]:
            log.info("garbage collector: no longer watching %s", f"{res.resource}.{res.group}".rstrip("."))
            await self.informers.pop(res).stop()
        for res in resources:
            if res in self.informers or (res.group, res.resource) in IGNORED:
                continue
            if not {"list", "watch", "delete"} <= res.verbs:
                continue
            inf = self.client.informer(res, metadata_only=True)  # kube's GC: metadata informers only
            inf.add_handler(lambda typ, obj, _old, res=res: self._on_event(res, typ, obj))
            inf.start()
            self.informers[res] = inf
        MONITORS.set(len(self.informers))
        return self.changes.missing(resources)

    # graph changes ---------------------------------------------------------------------------

    def _on_event(self, res: Resource, typ: str, obj: Obj) -> None:
        node = node_of(res, obj)
        if not node.uid:
            return
        if typ == "DELETED":
            self.graph.remove(node.uid)
            GRAPH_NODES.set(len(self.graph.nodes))
            for dep in self.graph.dependents_of(node.uid):
                self.queue.add(dep.uid)
            for ref in node.owners:
                owner = self.graph.nodes.get(ref.get("uid", ""))
                if owner is not None and owner.deleting_dependents:
                    self.queue.add(owner.uid)
            return
        old = self.graph.upsert(node)
        if old is None:
            GRAPH_NODES.set(len(self.graph.nodes))
        itself, owners = changes(old, node)
        if itself:
            self.queue.add(node.uid)
        for uid in owners:
            owner = self.graph.nodes.get(uid)
            if owner is not None and owner.deleting_dependents:
                self.queue.add(uid)
        if node.deleting_dependents and not (old is not None and old.deleting_dependents):
            for dep in self.graph.dependents_of(node.uid):
                self.queue.add(dep.uid)

    # decisions -------------------------------------------------------------------------------

    async def _attempt(self, uid: str) -> None:
        node = self.graph.nodes.get(uid)
        if node is None:
            return
        try:
            latest = await self.client.get(node.resource, node.namespace, node.name)
        except NotFound:
            return
        meta = latest.get("metadata") or {}
        if meta.get("uid") != uid:
            return
        finalizers = list(meta.get("finalizers") or [])
        if meta.get("deletionTimestamp"):
            if ORPHAN in finalizers:
                await self._orphan_dependents(node)
                await self._remove_finalizer(node, ORPHAN)
            elif FOREGROUND in finalizers:
                await self._process_deleting_dependents(node)
            return
        owners = list(meta.get("ownerReferences") or [])
        if not owners:
            return
        classified = await self._classify(node, owners)
        action, policy = decide(classified, bool(self.graph.dependents_of(uid)), finalizers)
        if action == "unown":
            gone = {o["uid"] for o in classified.dangling + classified.waiting}
            await self._patch_owners(node, lambda refs: [r for r in refs if r.get("uid") not in gone])
        elif action == "delete":
            log.info("garbage collector: deleting %s %s/%s (%s)", node.resource.resource, node.namespace,
                     node.name, policy)
            try:
                await self.client.delete(node.resource, node.namespace, node.name, uid=uid, propagation=policy)
            except NotFound:
                pass
            except Conflict:
                pass  # another object by that name now: not ours to delete

    async def _classify(self, node: Node, owners: list[Obj]) -> Classified:
        out = Classified()
        for ref in owners:
            res = self.mapper.for_kind(ref.get("apiVersion", ""), ref.get("kind", ""))
            if res is None:  # a kind discovery did not list yet: read it again; the item is retried
                self._discovery_changed.set()
                raise APIError(f"no resource for {ref.get('apiVersion')} {ref.get('kind')}", code=500)
            if res.namespaced and not node.namespace:
                out.dangling.append(ref)  # a cluster-scoped object cannot have a namespaced owner
                continue
            try:
                owner = await self.client.get(res, node.namespace if res.namespaced else "", ref.get("name", ""))
            except NotFound:
                out.dangling.append(ref)
                continue
            ometa = owner.get("metadata") or {}
            if ometa.get("uid") != ref.get("uid"):
                out.dangling.append(ref)
            elif ometa.get("deletionTimestamp") and FOREGROUND in (ometa.get("finalizers") or []):
                out.waiting.append(ref)
            else:
                out.solid.append(ref)
        return out

    async def _process_deleting_dependents(self, owner: Node) -> None:
        blocking = [d for d in self.graph.dependents_of(owner.uid) if d.blocks(owner.uid)]
        if not blocking:
            await self._remove_finalizer(owner, FOREGROUND)
            return
        for dep in blocking:
            if not dep.being_deleted:
                self.queue.add(dep.uid)

    async def _orphan_dependents(self, owner: Node) -> None:
        for dep in self.graph.dependents_of(owner.uid):
            try:
                await self._patch_owners(dep, lambda refs: [r for r in refs if r.get("uid") != owner.uid])
            except NotFound:
                continue

    async def _patch_owners(self, node: Node, change: Any) -> None:
        """Rewrite an object's ownerReferences, guarded by its resourceVersion (retried on a conflict)."""
        for _ in range(5):
            obj = await self.client.get(node.resource, node.namespace, node.name)
            meta = obj.get("metadata") or {}
            if meta.get("uid") != node.uid:
                return
            refs = meta.get("ownerReferences") or []
            new = change(refs)
            if new == refs:
                return
            try:
                await self.client.patch(node.resource, node.namespace, node.name, {"metadata": {
                    "resourceVersion": meta.get("resourceVersion"), "ownerReferences": new or None}})
                return
            except Conflict:
                continue
        raise APIError(f"ownerReferences of {node.resource.resource} {node.name}: conflicts", code=409)

    async def _remove_finalizer(self, node: Node, finalizer: str) -> None:
        for _ in range(5):
            try:
                obj = await self.client.get(node.resource, node.namespace, node.name)
            except NotFound:
                return
            meta = obj.get("metadata") or {}
            fins = list(meta.get("finalizers") or [])
            if meta.get("uid") != node.uid or finalizer not in fins:
                return
            fins.remove(finalizer)
            try:
                await self.client.patch(node.resource, node.namespace, node.name, {"metadata": {
                    "resourceVersion": meta.get("resourceVersion"), "finalizers": fins or None}})
                log.info("garbage collector: %s %s/%s: finalizer %s removed", node.resource.resource,
                         node.namespace, node.name, finalizer)
                return
            except NotFound:
                return
            except Conflict:
                continue
        raise APIError(f"finalizers of {node.resource.resource} {node.name}: conflicts", code=409)
