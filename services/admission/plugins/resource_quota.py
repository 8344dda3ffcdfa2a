"""ResourceQuota: object-count quotas (kube's plugin/pkg/admission/resourcequota and the resource quota
controller's replenishment), for `count/<resource>[.<group>]` and the legacy core names (configmaps,
secrets, services, persistentvolumeclaims, replicationcontrollers, resourcequotas).

Admission charges a create to every quota of the namespace that limits the resource: it refuses a create
that would pass `hard` (403 `exceeded quota: ...`) and otherwise writes the quota's status.used + 1 before
the object is written (optimistic concurrency on the quota; creates in one namespace are serialized here).
The controller sets status.hard from spec.hard and recounts status.used when a quota's spec changes and
when an object it counts is deleted."""
from __future__ import annotations

import asyncio
import copy
import functools
import logging
from decimal import Decimal
from typing import Any

import orjson

from apiary_pb import registry_pb2 as rpb
from apiary_pb import registry_pb2_grpc as rgrpc
from services.common import grpcutil, quantity
from services.common.background import cancel_and_wait
from services.common.errors import APIError, InternalError, forbidden
from services.common.identity import APISERVER

from ..attributes import CREATE, Attributes
from ..informers import InformerFactory, shared_informers
from ..plugin import Plugin, PluginConfig

log = logging.getLogger(__name__)
Obj = dict[str, Any]
LEGACY = frozenset({"configmaps", "secrets", "services", "persistentvolumeclaims", "replicationcontrollers",
                    "resourcequotas"})
RETRIES = 5
RESYNC = 60.0  # seconds between full recounts (kube's controller: --resource-quota-sync-period, 5m)


def keys_for(group: str, resource: str) -> tuple[str, ...]:
    """The quota resource names that count objects of (group, resource)."""
    count = f"count/{resource}.{group}" if group else f"count/{resource}"
    return (count, resource) if not group and resource in LEGACY else (count,)


def resource_of(key: str) -> tuple[str, str] | None:
    """(group, resource) an object-count quota key counts, None for other quota resources (cpu, memory)."""
    if key.startswith("count/"):
        resource, _, group = key[len("count/"):].partition(".")
        return group, resource
    return ("", key) if key in LEGACY else None


@functools.cache
def _version(group: str, resource: str) -> str | None:
    from services.registry.resources import all_kinds

    for info in all_kinds():
        if info.group == group and info.plural == resource and info.namespaced and not info.virtual:
            return info.version
    return None


def _rv(obj: Obj) -> int:
    try:
        return int((obj.get("metadata") or {}).get("resourceVersion") or 0)
    except ValueError:
        return 0


def _list(resources: dict[str, Decimal]) -> str:
    return ",".join(f"{k}={quantity.format_count(v)}" for k, v in sorted(resources.items()))


class ResourceQuota(Plugin):
    name = "ResourceQuota"
    operations = frozenset({CREATE})
    subresources = False

    def __init__(self, informers: InformerFactory) -> None:
        self.informers = informers
        self.registry = informers.registry
        self.quotas = informers.informer("", "v1", "resourcequotas")
        self.quotas.add_handler(self._on_quota)
        self._latest: dict[str, Obj] = {}      # quota key -> our own newest write of it
        self._locks: dict[str, asyncio.Lock] = {}
        self._dirty: set[str] = set()
        self._wake = asyncio.Event()
        self._watched: set[tuple[str, str]] = set()
        self._task: asyncio.Task[None] | None = None

    # admission ---------------------------------------------------------------------------------

    def ready(self) -> bool:
        return self.quotas.synced.is_set()

    def handles(self, operation: str) -> bool:
        return operation == CREATE and bool(self.quotas.store)

    def _quota(self, key: str) -> Obj | None:
        seen, ours = self.quotas.store.get(key), self._latest.get(key)
        if ours is not None and (seen is None or _rv(ours) > _rv(seen)):
            return ours
        return seen

    async def validate(self, a: Attributes) -> None:
        if not a.namespace:
            return
        keys = keys_for(a.group, a.resource)
        names = [k for k, q in self.quotas.store.items() if k.startswith(f"{a.namespace}/")
                 and any(x in ((q.get("spec") or {}).get("hard") or {}) for x in keys)]
        if not names:
            return
        lock = self._locks.setdefault(a.namespace, asyncio.Lock())
        async with lock:
            for name in sorted(names):
                await self._charge(a, name, keys)

    async def _charge(self, a: Attributes, key: str, keys: tuple[str, ...]) -> None:
        for _ in range(RETRIES):
            q = self._quota(key)
            if q is None:
                return
            hard = (q.get("spec") or {}).get("hard") or {}
            used = dict(((q.get("status") or {}).get("used")) or {})
            limited = [k for k in keys if k in hard]
            counts = {k: quantity.parse(used[k]) if k in used else await self._count(a.namespace, k)
                      for k in limited}
            over = [k for k in limited if counts[k] + 1 > quantity.parse(hard[k])]
            if over:
                raise forbidden(a.resource, a.group, a.name_for_errors(),
                                f"exceeded quota: {q['metadata']['name']}, "
                                f"requested: {_list({k: Decimal(1) for k in over})}, "
                                f"used: {_list({k: counts[k] for k in over})}, "
                                f"limited: {_list({k: quantity.parse(hard[k]) for k in over})}")
            if a.dry_run:
                return
            new = copy.deepcopy(q)
            status = new.setdefault("status", {})
            status["hard"] = hard
            status["used"] = {**used, **{k: quantity.format_count(counts[k] + 1) for k in limited}}
            if await self._write_status(new, key):
                return
        raise InternalError(f"Internal error occurred: resource quota {key}: too many conflicts charging it")

    async def _write_status(self, quota: Obj, key: str) -> bool:
        """Update the quota's status; False on a conflict (the caller retries with the newest version)."""
        assert self.registry is not None
        meta = quota["metadata"]
        req = rpb.APIRequest(verb="update", version="v1", resource="resourcequotas", subresource="status",
                             namespace=meta["namespace"], name=meta["name"], body=orjson.dumps(quota),
                             content_type="application/json", user=APISERVER)
        resp = await grpcutil.call(self.registry.Handle(req, timeout=10), "registry")
        if resp.code == 409:
            fresh = await self._live(meta["namespace"], meta["name"])
            if fresh is not None:
                self._latest[key] = fresh
            return False
        if resp.code >= 400:
            raise APIError.from_status_dict(orjson.loads(resp.body))
        self._latest[key] = orjson.loads(resp.body)
        return True

    async def _live(self, namespace: str, name: str) -> Obj | None:
        assert self.registry is not None
        req = rpb.APIRequest(verb="get", version="v1", resource="resourcequotas", namespace=namespace, name=name,
                             user=APISERVER)
        resp = await grpcutil.call(self.registry.Handle(req, timeout=10), "registry")
        return orjson.loads(resp.body) if resp.code == 200 else None

    # the controller ------------------------------------------------------------------------------

    async def _count(self, namespace: str, key: str) -> Decimal:
        """The objects of the namespace a quota key counts, from the informer of their resource."""
        gr = resource_of(key)
        version = _version(*gr) if gr else None
        if gr is None or version is None:
            return Decimal(0)
        inf = self.informers.informer(gr[0], version, gr[1])
        if gr not in self._watched:
            self._watched.add(gr)
            inf.add_handler(self._on_object)
        await inf.synced.wait()
        prefix = f"{namespace}/"
        return Decimal(sum(1 for k in inf.store if k.startswith(prefix)))

    def _on_quota(self, event: str, obj: Obj, old: Obj | None) -> None:
        meta = obj.get("metadata") or {}
        key = f"{meta.get('namespace')}/{meta.get('name')}"
        if event == "DELETED":
            self._latest.pop(key, None)
            return
        hard = (obj.get("spec") or {}).get("hard") or {}
        if hard != ((obj.get("status") or {}).get("hard") or {}) or event == "ADDED":
            self._mark(meta.get("namespace", ""))

    def _on_object(self, event: str, obj: Obj, old: Obj | None) -> None:
        if event == "DELETED":  # replenishment: a deleted object frees its quota
            self._mark((obj.get("metadata") or {}).get("namespace", ""))

    def _mark(self, namespace: str) -> None:
        if any(k.startswith(f"{namespace}/") for k in self.quotas.store):
            self._dirty.add(namespace)
            self._wake.set()

    async def _run(self) -> None:
        while True:
            try:
                await asyncio.wait_for(self._wake.wait(), RESYNC)
            except TimeoutError:  # the full resync: a charge whose create failed is given back
                self._dirty.update(k.partition("/")[0] for k in self.quotas.store)
            self._wake.clear()
            while self._dirty:
                ns = self._dirty.pop()
                try:
                    await self._recalculate(ns)
                except asyncio.CancelledError:
                    raise
                except Exception:
                    log.exception("resource quota: recalculating namespace %s failed", ns)

    async def _recalculate(self, namespace: str) -> None:
        lock = self._locks.setdefault(namespace, asyncio.Lock())
        async with lock:
            for key in [k for k in self.quotas.store if k.startswith(f"{namespace}/")]:
                for _ in range(RETRIES):
                    q = self._quota(key)
                    if q is None:
                        break
                    hard = (q.get("spec") or {}).get("hard") or {}
                    used = {k: quantity.format_count(await self._count(namespace, k))
                            for k in hard if resource_of(k) is not None}
                    status = {"hard": hard, "used": used}
                    if q.get("status") == status:
                        break
                    new = copy.deepcopy(q)
                    new["status"] = status
                    if await self._write_status(new, key):
                        break

    async def start(self) -> None:
        self.informers.start()
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="resource-quota-controller")

    async def stop(self) -> None:
        await cancel_and_wait(self._task)
        self._task = None
        await self.informers.stop()


def factory(config: PluginConfig, registry: rgrpc.RegistryStub | None) -> ResourceQuota:
    return ResourceQuota(shared_informers(registry))
