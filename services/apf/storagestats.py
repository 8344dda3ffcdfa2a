"""The storage service's object and watcher counts, polled over gRPC (apiary.Storage/Stats) for the work
estimates: kube's apiserver reads its own storage's object counts (apiserver_storage_objects, polled
every minute) and counts the watches passing its filter; here the storage service counts both, its
watchers being every client watch through a proxy and every service's informer.

Counts are keyed by the storage's label for a resource: `<resource>.<group>` where its keys carry the
group (/registry/<group>/<resource>/..., as custom resources), the bare resource where they do not (the
built-in groups). A lookup tries the first, then, for a built-in group (none, or a dotless one, or one
under k8s.io), the second. A count not refreshed for STALE_AFTER is stale, as kube's goes stale.
"""
from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

import grpc

from apiary_pb import storage_pb2 as spb
from apiary_pb import storage_pb2_grpc as sgrpc
from services.common.background import cancel_and_wait

from .workestimator import StaleCount

log = logging.getLogger(__name__)

POLL_INTERVAL = 1.0
STALE_AFTER = 180.0     # kube's staleTolerance: three missed one-minute polls
STATS_TIMEOUT = 5.0


def _builtin(group: str) -> bool:
    return not group or "." not in group or group.endswith(".k8s.io")


class StorageStats:
    def __init__(self, storage: sgrpc.StorageStub, interval: float = POLL_INTERVAL,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.storage = storage
        self.interval = interval
        self.clock = clock
        self.resources: dict[str, spb.ResourceStats] = {}
        self.updated: float | None = None
        self._task: asyncio.Task[None] | None = None
        self._failing = False

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="apf-storage-stats")

    async def stop(self) -> None:
        await cancel_and_wait(self._task)

    async def poll(self) -> None:
        resp = await self.storage.Stats(spb.StatsRequest(), timeout=STATS_TIMEOUT)
        self.take(resp)

    def take(self, resp: spb.StatsResponse) -> None:
        self.resources = {r.resource: r for r in resp.resources}
        self.updated = self.clock()

    async def _run(self) -> None:
        while True:
            try:
                await self.poll()
                if self._failing:
                    log.info("storage stats are back")
                    self._failing = False
            except asyncio.CancelledError:
                raise
            except Exception as e:  # noqa: BLE001 - the counts are polled again whatever happened
                if not self._failing:
                    why = e.code().name if isinstance(e, grpc.aio.AioRpcError) else type(e).__name__
                    log.warning("storage stats unavailable (%s); work estimates use the last counts", why)
                    self._failing = True
            await asyncio.sleep(self.interval)

    def _lookup(self, group: str, resource: str) -> spb.ResourceStats | None:
        r = self.resources.get(f"{resource}.{group}" if group else resource)
        if r is None and group and _builtin(group):
            r = self.resources.get(resource)
        return r

    def object_count(self, group: str, resource: str) -> int | None:
        """The resource's stored objects; None when the storage has no count of it (no watch cache yet)."""
        r = self._lookup(group, resource)
        if r is None:
            return None
        if self.updated is None or self.clock() - self.updated > STALE_AFTER:
            raise StaleCount(resource)
        return r.objects

    def watch_count(self, group: str, resource: str, namespace: str, name: str) -> int:
        """The watchers an event of this object goes to: of every object, of its namespace, of it (kube's
        GetInterestedWatchCount)."""
        r = self._lookup(group, resource)
        if r is None:
            return 0
        n = r.watchers
        if namespace:
            n += r.namespace_watchers.get(namespace, 0)
        if name:
            n += r.object_watchers.get(f"{namespace}/{name}" if namespace else name, 0)
        return n
