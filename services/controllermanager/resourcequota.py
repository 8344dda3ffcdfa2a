"""The resource quota controller (kube's pkg/controller/resourcequota): keeps every ResourceQuota's status
in step with its spec and with its namespace's content, for the object-count quotas apiary counts
(services.common.quota). The ResourceQuota admission plug-in charges creates; usage goes down only here.

A quota is synced (status.hard copied from spec.hard, status.used recounted for every hard resource this
controller counts, other used values kept) when it is added, when its spec.hard changes, when an object it
counts is deleted (replenishment), and for every quota each --resource-quota-sync-period, which gives back
what admission charged for a create that then failed. A quota whose status lacks its spec's limits or their
usage goes to the priority queue, the rest to the primary one (kube's resourcequota_priority and
resourcequota_primary work queues, each with --concurrent-resource-quota-syncs workers).

Objects are counted from a metadata informer per resource (kube's quota monitors), started the first time a
quota counts that resource and found by discovery among the namespaced resources with create, list, watch
and delete (custom resources too: a CRD or APIService event has discovery read again for a resource not found
yet); their deletions go through kube's resource_quota_controller_resource_changes queue."""
from __future__ import annotations

import asyncio
import functools
import logging
import math
import time
from typing import Any

from services.common import quantity
from services.common.background import cancel_and_wait
from services.common.informer import Informer, object_key
from services.common.quota import equals, hard, keys_for, resource_of

from .client import Client, Resource
from .discoverychanges import DiscoveryChanges
from .workqueue import WorkQueue

log = logging.getLogger(__name__)

Obj = dict[str, Any]
GroupResource = tuple[str, str]
RESOURCEQUOTAS = Resource("", "v1", "resourcequotas", "ResourceQuota", True, frozenset())
QUOTABLE_VERBS = frozenset({"create", "list", "watch", "delete"})
# kube re-reads discovery every 30 s for resources to monitor; here, when a quota names one not found yet
DISCOVERY_PERIOD = 30.0
# how long a sync waits for a new monitor's first list before it fails (and is retried with backoff)
MONITOR_SYNC_TIMEOUT = 30.0


class ResourceQuotaController:
    def __init__(self, client: Client, workers: int = 5, resync_period: float = 300.0) -> None:
        self.client, self.resync_period = client, resync_period
        self.quotas = client.informer(RESOURCEQUOTAS)
        self.quotas.add_handler(self._on_quota)
        self.queue = WorkQueue("resourcequota_primary", self._sync, workers)
        self.missing_usage = WorkQueue("resourcequota_priority", self._sync, workers)
        self.resource_changes = WorkQueue("resource_quota_controller_resource_changes", self._replenish)
        self.monitors: dict[GroupResource, Informer] = {}
        self._resources: dict[GroupResource, Resource] = {}
        self._discovered = -math.inf
        self._discovery = asyncio.Lock()
        self._resync: asyncio.Task[None] | None = None
        self.changes = DiscoveryChanges(client, self._discovery_changed)

    def _discovery_changed(self) -> None:
        """A CRD or APIService changed: a resource not found yet is looked up in discovery again at once."""
        self._discovered = -math.inf

    async def start(self) -> None:
        self.changes.start()
        self.quotas.start()
        await self.quotas.synced.wait()
        self.resource_changes.start()
        self.queue.start()
        self.missing_usage.start()
        if self.resync_period > 0:
            self._resync = asyncio.create_task(self._resync_all(), name="resourcequota-resync")

    async def stop(self) -> None:
        await cancel_and_wait(self._resync)
        self._resync = None
        for q in (self.missing_usage, self.queue, self.resource_changes):
            await q.stop()
        for inf in self.monitors.values():
            await inf.stop()
        self.monitors.clear()
        await self.quotas.stop()
        await self.changes.stop()

    # events ------------------------------------------------------------------------------------

    def _on_quota(self, typ: str, obj: Obj, old: Obj | None) -> None:
        if typ == "DELETED":
            return
        # status updates are this controller's and admission's own: only a spec.hard change needs a sync
        if typ == "MODIFIED" and old is not None and equals(hard(old, "spec"), hard(obj, "spec")):
            return
        self._add(obj)

    def _add(self, q: Obj) -> None:
        """kube's addQuota: limits or usage missing from status go first."""
        key = object_key(q)
        spec, status = hard(q, "spec"), hard(q)
        used = (q.get("status") or {}).get("used") or {}
        if not equals(spec, status) or any(k not in used and resource_of(k) is not None for k in status):
            self.missing_usage.add(key)
        else:
            self.queue.add(key)

    def _on_object(self, gr: GroupResource, typ: str, obj: Obj, _old: Obj | None) -> None:
        if typ == "DELETED":
            self.resource_changes.add((gr, (obj.get("metadata") or {}).get("namespace") or ""))

    async def _replenish(self, item: tuple[GroupResource, str]) -> None:
        """A deleted object frees its quota: every quota of its namespace counting its resource is synced."""
        gr, namespace = item
        keys = keys_for(*gr)
        for key, q in list(self.quotas.store.items()):
            if key.startswith(f"{namespace}/") and any(k in hard(q) for k in keys):
                self.queue.add(key)

    async def _resync_all(self) -> None:
        """kube's enqueueAll, every resync period: a full recount of every quota."""
        while True:
            await asyncio.sleep(self.resync_period)
            for key in list(self.quotas.store):
                self.queue.add(key)

    # the sync ----------------------------------------------------------------------------------

    async def _sync(self, key: str) -> None:
        q = self.quotas.store.get(key)
        if q is None:
            return  # deleted
        namespace = q["metadata"].get("namespace", "")
        limits = dict(hard(q, "spec"))
        status = q.get("status") or {}
        old_used = status.get("used") or {}
        used = {k: v for k, v in old_used.items() if k in limits}
        for k in limits:
            gr = resource_of(k)
            if gr is not None:
                used[k] = quantity.format_count(await self._count(namespace, gr))
        if ("hard" in status and "used" in status and equals(limits, status.get("hard"))
                and equals(used, old_used)):
            return
        # a Conflict (admission charged meanwhile) is retried by the queue, from the informer's newer version
        await self.client.update(RESOURCEQUOTAS, {**q, "status": {"hard": limits, "used": used}}, "status")

    async def _count(self, namespace: str, gr: GroupResource) -> int:
        monitor = await self._monitor(gr)
        if monitor is None:
            return 0  # not served (yet): nothing of it exists
        prefix = f"{namespace}/"
        return sum(1 for k in monitor.store if k.startswith(prefix))

    async def _monitor(self, gr: GroupResource) -> Informer | None:
        monitor = self.monitors.get(gr)
        if monitor is None:
            res = await self._resource(gr)
            if res is None:
                return None
            monitor = self.monitors.get(gr)  # another worker may have started it meanwhile
            if monitor is None:
                monitor = self.monitors[gr] = self.client.informer(res, metadata_only=True)
                monitor.add_handler(functools.partial(self._on_object, gr))
                monitor.start()
                log.info("resource quota: monitoring %s", f"{gr[1]}.{gr[0]}" if gr[0] else gr[1])
        await asyncio.wait_for(monitor.synced.wait(), MONITOR_SYNC_TIMEOUT)
        return monitor

    async def _resource(self, gr: GroupResource) -> Resource | None:
        """The quotable resource, from discovery (read again, at most every DISCOVERY_PERIOD, for one unknown)."""
        async with self._discovery:
            if gr not in self._resources and time.monotonic() - self._discovered >= DISCOVERY_PERIOD:
                self._resources = {(r.group, r.resource): r for r in await self.client.discover()
                                   if r.namespaced and QUOTABLE_VERBS <= r.verbs}
                self._discovered = time.monotonic()
            return self._resources.get(gr)
