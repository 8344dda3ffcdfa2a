"""ResourceQuota (kube's plugin/pkg/admission/resourcequota): object-count quotas charged at admission,
for `count/<resource>[.<group>]` and the legacy core names (services.common.quota).

A create is charged to every quota of its namespace whose status.hard limits the resource: it is refused
(403 `exceeded quota: ...`) when used + 1 would pass hard, and otherwise the quota's status.used + 1 is
written before the object is (optimistic concurrency on the quota; creates in one namespace are
serialized here). As in kube, the plug-in reads status, which the resource quota controller of the
controller-manager (services/controllermanager/resourcequota.py) keeps: a quota it has not synced yet
limits nothing, one whose status.used lacks a limited resource refuses (`status unknown for quota`), and
usage goes down only through the controller (after a delete, and at its full resync)."""
from __future__ import annotations

import asyncio
import logging
from decimal import Decimal
from typing import Any

import orjson

from apiary_pb import registry_pb2 as rpb
from apiary_pb import registry_pb2_grpc as rgrpc
from services.common import grpcutil, quantity
from services.common.errors import APIError, InternalError, forbidden
from services.common.identity import APISERVER
from services.common.informer import object_key
from services.common.quota import hard, keys_for

from ..attributes import CREATE, Attributes
from ..informers import InformerFactory, shared_informers
from ..plugin import Plugin, PluginConfig

log = logging.getLogger(__name__)
Obj = dict[str, Any]
RETRIES = 5


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
        # quota key -> our own newest write of it (kube's updatedQuotas): back-to-back creates charge the
        # version they wrote, not the informer's older one
        self._latest: dict[str, Obj] = {}
        self._locks: dict[str, asyncio.Lock] = {}

    def ready(self) -> bool:
        return self.quotas.synced.is_set()

    def handles(self, operation: str) -> bool:
        return operation == CREATE and bool(self.quotas.store)

    def _on_quota(self, event: str, obj: Obj, old: Obj | None) -> None:
        if event == "DELETED":
            self._latest.pop(object_key(obj), None)

    def _quota(self, key: str) -> Obj | None:
        seen, ours = self.quotas.store.get(key), self._latest.get(key)
        if ours is not None and (seen is None or _rv(ours) > _rv(seen)):
            return ours
        return seen

    async def validate(self, a: Attributes) -> None:
        if not a.namespace:
            return
        keys = keys_for(a.group, a.resource)
        names = sorted(k for k in self.quotas.store if k.startswith(f"{a.namespace}/")
                       and any(x in hard(self._quota(k) or {}) for x in keys))
        if not names:
            return
        async with self._locks.setdefault(a.namespace, asyncio.Lock()):
            # every quota is checked before any is charged: a create one quota refuses charges none
            for name in names:
                self._charged(a, self._quota(name), keys)
            if a.dry_run:
                return
            for name in names:
                await self._charge(a, name, keys)

    def _charged(self, a: Attributes, q: Obj | None, keys: tuple[str, ...]) -> Obj | None:
        """The quota with this create's usage added (checkRequest); None when it no longer limits it."""
        if q is None:
            return None
        limits = hard(q)
        limited = [k for k in keys if k in limits]
        if not limited:
            return None
        used = (q.get("status") or {}).get("used") or {}
        if any(k not in used for k in limited):
            raise forbidden(a.resource, a.group, a.name_for_errors(),
                            f"status unknown for quota: {q['metadata']['name']}, resources: {','.join(sorted(limited))}")
        counts = {k: quantity.parse(used[k]) for k in limited}
        over = [k for k in limited if counts[k] + 1 > quantity.parse(limits[k])]
        if over:
            raise forbidden(a.resource, a.group, a.name_for_errors(),
                            f"exceeded quota: {q['metadata']['name']}, "
                            f"requested: {_list({k: Decimal(1) for k in over})}, "
                            f"used: {_list({k: counts[k] for k in over})}, "
                            f"limited: {_list({k: quantity.parse(limits[k]) for k in over})}")
        # a new quota around the charged usage: the informer's object (or our last write) stays as it was
        return {**q, "status": {**q["status"],
                                "used": {**used, **{k: quantity.format_count(counts[k] + 1) for k in limited}}}}

    async def _charge(self, a: Attributes, key: str, keys: tuple[str, ...]) -> None:
        """Write the charged quota; on a conflict, check again against the newest version and retry."""
        for _ in range(RETRIES):
            new = self._charged(a, self._quota(key), keys)
            if new is None or await self._write_status(new, key):
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

    async def start(self) -> None:
        self.informers.start()

    async def stop(self) -> None:
        await self.informers.stop()


def factory(config: PluginConfig, registry: rgrpc.RegistryStub | None) -> ResourceQuota:
    return ResourceQuota(shared_informers(registry))
