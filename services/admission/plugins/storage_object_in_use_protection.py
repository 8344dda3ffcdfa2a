"""StorageObjectInUseProtection (kube's plugin/pkg/admission/storage/storageobjectinuseprotection): every
PersistentVolume gets the kubernetes.io/pv-protection finalizer and every PersistentVolumeClaim the
kubernetes.io/pvc-protection one when created, so that deleting one still in use only marks it; the
controller-manager's pv-protection and pvc-protection controllers remove them once nothing uses it."""
from __future__ import annotations

from apiary_pb import registry_pb2_grpc as rgrpc

from ..attributes import CREATE, Attributes
from ..plugin import Plugin, PluginConfig

PV_PROTECTION = "kubernetes.io/pv-protection"
PVC_PROTECTION = "kubernetes.io/pvc-protection"
FINALIZERS = {("", "persistentvolumes"): PV_PROTECTION, ("", "persistentvolumeclaims"): PVC_PROTECTION}


class StorageObjectInUseProtection(Plugin):
    name = "StorageObjectInUseProtection"
    operations = frozenset({CREATE})
    resources = frozenset(FINALIZERS)
    subresources = False

    async def admit(self, a: Attributes) -> None:
        obj = a.object
        finalizer = FINALIZERS.get((a.group, a.resource))
        if obj is None or finalizer is None:
            return
        meta = obj.setdefault("metadata", {})
        finalizers = meta.get("finalizers") or []
        if finalizer in finalizers:
            return
        meta["finalizers"] = [*finalizers, finalizer]
        a.set_object(obj)


def factory(config: PluginConfig, registry: rgrpc.RegistryStub | None) -> StorageObjectInUseProtection:
    return StorageObjectInUseProtection()
