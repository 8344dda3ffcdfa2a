"""DefaultStorageClass (kube's plugin/pkg/admission/storage/storageclass/setdefault): a PersistentVolumeClaim
created without a storage class gets the cluster's default StorageClass.

As kube 1.33: on CREATE of persistentvolumeclaims (not subresources); a claim that sets spec.storageClassName
(even to "") or the beta annotation volume.beta.kubernetes.io/storage-class keeps it; the default is the class
annotated storageclass.kubernetes.io/is-default-class (or the beta annotation) "true", the newest by
creationTimestamp when several are (then the first by name); no default class, no change. Classes are read
from an informer, as kube's lister.
"""
from __future__ import annotations

from typing import Any

from apiary_pb import registry_pb2_grpc as rgrpc

from ..attributes import CREATE, Attributes
from ..plugin import InformerPlugin, PluginConfig

PVCS = ("", "persistentvolumeclaims")
BETA_STORAGE_CLASS = "volume.beta.kubernetes.io/storage-class"
DEFAULT_CLASS_ANNOTATIONS = ("storageclass.kubernetes.io/is-default-class",
                             "storageclass.beta.kubernetes.io/is-default-class")


def is_default(sc: dict[str, Any]) -> bool:
    annotations = (sc.get("metadata") or {}).get("annotations") or {}
    return any(annotations.get(a) == "true" for a in DEFAULT_CLASS_ANNOTATIONS)


def default_class(classes: list[dict[str, Any]]) -> dict[str, Any] | None:
    """GetDefaultClass: the newest default class, then the first by name."""
    defaults = [sc for sc in classes if is_default(sc)]
    if not defaults:
        return None
    defaults.sort(key=lambda sc: sc["metadata"].get("name", ""))
    return max(defaults, key=lambda sc: sc["metadata"].get("creationTimestamp") or "")


class DefaultStorageClass(InformerPlugin):
    name = "DefaultStorageClass"
    operations = frozenset({CREATE})
    resources = frozenset({PVCS})
    subresources = False

    def __init__(self, registry: rgrpc.RegistryStub) -> None:
        super().__init__(registry, "storage.k8s.io", "v1", "storageclasses")

    async def admit(self, a: Attributes) -> None:
        pvc = a.object
        if pvc is None or not isinstance(pvc.get("spec"), dict):
            return
        annotations = (pvc.get("metadata") or {}).get("annotations") or {}
        if pvc["spec"].get("storageClassName") is not None or BETA_STORAGE_CLASS in annotations:
            return
        sc = default_class(list(self.informer.store.values()))
        if sc is None:
            return
        pvc["spec"]["storageClassName"] = sc["metadata"]["name"]  # in place, as kube's plug-ins
        a.set_object(pvc)


def factory(config: PluginConfig, registry: rgrpc.RegistryStub | None) -> DefaultStorageClass:
    if registry is None:
        raise ValueError("DefaultStorageClass needs the registry (--registry-address)")
    return DefaultStorageClass(registry)
