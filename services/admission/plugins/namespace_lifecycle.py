"""NamespaceLifecycle: no new content in a missing or terminating namespace; some namespaces are immortal.

Like kube's plugin it runs in the mutating phase (it implements Admit there, so a
create in a missing namespace is refused before the object is validated) and never
changes the object. It reads namespaces from an informer; on a cache miss (or for a
namespace whose deletion it has just admitted) it asks the registry directly, so a
namespace created a moment ago is not refused because the watch is behind.
"""
from __future__ import annotations

import time
from typing import Any

from apiary_pb import registry_pb2_grpc as rgrpc
from services.common.errors import APIError, InternalError, forbidden, not_found

from ..attributes import CREATE, DELETE, UPDATE, Attributes
from ..namespaces import InformerNamespaceLister, NamespaceLister
from ..plugin import Plugin, PluginConfig

IMMORTAL_NAMESPACES = frozenset({"default", "kube-system", "kube-public"})
FORCE_LIVE_LOOKUP_TTL = 30.0   # seconds, as kube
READY_WAIT = 10.0              # kube's admission.Handler waits this long for caches
# authorization.k8s.io localsubjectaccessreviews: answering "namespace not found" would leak names
ACCESS_REVIEWS = frozenset({("authorization.k8s.io", "localsubjectaccessreviews")})


def terminating(ns: dict[str, Any]) -> bool:
    return ((ns.get("status") or {}).get("phase") == "Terminating"
            or bool((ns.get("metadata") or {}).get("deletionTimestamp")))


class NamespaceLifecycle(Plugin):
    name = "NamespaceLifecycle"
    operations = frozenset({CREATE, UPDATE, DELETE})

    def __init__(self, lister: NamespaceLister, clock=time.monotonic) -> None:
        self.lister = lister
        self.clock = clock
        self._force_live: dict[str, float] = {}   # namespace -> until when

    async def start(self) -> None:
        start = getattr(self.lister, "start", None)
        if start:
            await start()

    async def stop(self) -> None:
        stop = getattr(self.lister, "stop", None)
        if stop:
            await stop()

    def ready(self) -> bool:
        return self.lister.synced()

    async def admit(self, a: Attributes) -> None:
        is_namespace = a.group == "" and a.resource == "namespaces"
        if a.operation == DELETE and is_namespace and a.name in IMMORTAL_NAMESPACES:
            raise forbidden("namespaces", "", a.name, "this namespace may not be deleted")
        if not a.namespace and not is_namespace:
            return  # cluster-scoped
        if is_namespace:
            if a.operation == DELETE:
                self._remember_deleted(a.name)
            return
        if a.operation == DELETE or (a.group, a.resource) in ACCESS_REVIEWS:
            return
        if not await self.lister.wait_synced(READY_WAIT):
            raise forbidden(a.resource, a.group, a.name_for_errors(), "not yet ready to handle request")

        ns = self.lister.get(a.namespace)
        if ns is None or (self._force_live_lookup(a.namespace) and not terminating(ns)):
            try:
                ns = await self.lister.live_get(a.namespace)
            except APIError as e:
                raise InternalError(f"Internal error occurred: {e.message}") from None
            if ns is None:
                raise not_found("namespaces", "", a.namespace)

        if a.operation == CREATE and terminating(ns):
            why = f"unable to create new content in namespace {a.namespace} because it is being terminated"
            err = forbidden(a.resource, a.group, a.name_for_errors(), why)
            assert err.details is not None
            err.details["causes"] = [{"reason": "NamespaceTerminating",
                                      "message": f"namespace {a.namespace} is being terminated",
                                      "field": "metadata.namespace"}]
            raise err

    def _remember_deleted(self, name: str) -> None:
        now = self.clock()
        self._force_live = {k: t for k, t in self._force_live.items() if t > now}
        if len(self._force_live) < 100 or name in self._force_live:  # kube's LRU holds 100
            self._force_live[name] = now + FORCE_LIVE_LOOKUP_TTL

    def _force_live_lookup(self, name: str) -> bool:
        until = self._force_live.get(name)
        return until is not None and until > self.clock()


def factory(config: PluginConfig, registry: rgrpc.RegistryStub | None) -> NamespaceLifecycle:
    if registry is None:
        raise ValueError("NamespaceLifecycle needs the registry (--registry-address)")
    return NamespaceLifecycle(InformerNamespaceLister(registry))
