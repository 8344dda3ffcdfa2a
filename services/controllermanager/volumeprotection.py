"""kube's pvc-protection and pv-protection controllers (pkg/controller/volume/pvcprotection, pvprotection):
a claim or volume being deleted keeps its kubernetes.io/pvc-protection / pv-protection finalizer (added at
create by the StorageObjectInUseProtection admission plug-in) while it is in use, and loses it once it is
not, so that the API server deletes it. A claim is in use while a scheduled pod that is not finished names
it in a volume (persistentVolumeClaim.claimName, or the <pod>-<volume> claim of an ephemeral volume); a
volume while it is Bound (as the informer last saw it: kube does not ask again either)."""
from __future__ import annotations

import abc
import logging
from typing import Any

from services.common.errors import Conflict, NotFound

from .client import Client, Resource
from .persistentvolume import PERSISTENT_VOLUME_CLAIMS, PERSISTENT_VOLUMES
from .workqueue import WorkQueue

log = logging.getLogger(__name__)

Obj = dict[str, Any]
PODS = Resource("", "v1", "pods", "Pod", True, frozenset())
PVC_PROTECTION = "kubernetes.io/pvc-protection"
PV_PROTECTION = "kubernetes.io/pv-protection"


def _key(obj: Obj) -> str:
    meta = obj.get("metadata") or {}
    return f"{meta['namespace']}/{meta['name']}" if meta.get("namespace") else meta.get("name", "")


def pod_uses_claim(pod: Obj, claim_name: str) -> bool:
    """podUsesPVC: only a scheduled pod counts (the kubelet starts no pod on a claim being deleted)."""
    spec = pod.get("spec") or {}
    if not spec.get("nodeName") or (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
        return False
    pod_name = (pod.get("metadata") or {}).get("name", "")
    for volume in spec.get("volumes") or []:
        if (volume.get("persistentVolumeClaim") or {}).get("claimName") == claim_name:
            return True
        if volume.get("ephemeral") is not None and f"{pod_name}-{volume.get('name')}" == claim_name:
            return True
    return False


class ProtectionController(abc.ABC):
    """Removes `finalizer` from the objects of `resource` being deleted once in_use says no."""

    def __init__(self, client: Client, name: str, resource: Resource, finalizer: str) -> None:
        self.client, self.resource, self.finalizer = client, resource, finalizer
        self.objects = client.informer(resource)
        self.objects.add_handler(self._on_object)
        self.queue = WorkQueue(name, self._sync)

    def informers(self) -> list[Any]:
        return [self.objects]

    async def start(self) -> None:
        for inf in self.informers():
            inf.start()
        for inf in self.informers():
            await inf.synced.wait()
        self.queue.start()

    async def stop(self) -> None:
        await self.queue.stop()
        for inf in reversed(self.informers()):
            await inf.stop()

    def _on_object(self, typ: str, obj: Obj, _old: Obj | None) -> None:
        meta = obj.get("metadata") or {}
        if typ != "DELETED" and meta.get("deletionTimestamp") and self.finalizer in (meta.get("finalizers") or ()):
            self.queue.add(_key(obj))

    @abc.abstractmethod
    async def in_use(self, obj: Obj) -> bool:
        """Whether the object is still in use (its finalizer stays)."""

    async def _sync(self, key: str) -> None:
        obj = self.objects.store.get(key)
        meta = (obj or {}).get("metadata") or {}
        if obj is None or not meta.get("deletionTimestamp") or self.finalizer not in (meta.get("finalizers") or ()):
            return
        if await self.in_use(obj):
            return
        patch = {"metadata": {"finalizers": [f for f in meta["finalizers"] if f != self.finalizer],
                              "resourceVersion": meta.get("resourceVersion")}}
        try:
            await self.client.patch(self.resource, meta.get("namespace", ""), meta["name"], patch)
        except NotFound:
            return
        except Conflict:
            self.queue.add_after(key, 0.5)
            return
        log.info("removed %s from %s %s", self.finalizer, self.resource.resource, key)


class PVCProtectionController(ProtectionController):
    def __init__(self, client: Client) -> None:
        super().__init__(client, "pvcprotection", PERSISTENT_VOLUME_CLAIMS, PVC_PROTECTION)
        self.pods = client.informer(PODS)
        self.pods.add_handler(self._on_pod)

    def informers(self) -> list[Any]:
        return [self.objects, self.pods]

    def _on_pod(self, typ: str, pod: Obj, old: Obj | None) -> None:
        """A pod that goes (or finishes) may free the claims it named."""
        namespace = (pod.get("metadata") or {}).get("namespace", "")
        for volume in (pod.get("spec") or {}).get("volumes") or []:
            name = (volume.get("persistentVolumeClaim") or {}).get("claimName")
            if volume.get("ephemeral") is not None:
                name = f"{pod['metadata']['name']}-{volume.get('name')}"
            if name:
                self.queue.add(f"{namespace}/{name}")

    async def in_use(self, obj: Obj) -> bool:
        """The informer's pods, then (when none uses it) the API's, as kube asks: a pod created a moment ago
        may not have reached the informer."""
        namespace, name = obj["metadata"].get("namespace", ""), obj["metadata"]["name"]
        if any(pod_uses_claim(pod, name) for pod in self.pods.store.values()
               if (pod.get("metadata") or {}).get("namespace") == namespace):
            return True
        pods = await self.client.request("GET", PODS.path(namespace))
        return any(pod_uses_claim(pod, name) for pod in pods.get("items") or [])


class PVProtectionController(ProtectionController):
    def __init__(self, client: Client) -> None:
        super().__init__(client, "pvprotection", PERSISTENT_VOLUMES, PV_PROTECTION)

    async def in_use(self, obj: Obj) -> bool:
        return (obj.get("status") or {}).get("phase") == "Bound"
