"""storage.k8s.io/v1: StorageClass."""
from __future__ import annotations

from typing import Any

from ..printers import AGE, NAME, TableConvertor, age, column
from ..strategies.storage import StorageClassStrategy
from . import GroupVersion, ResourceInfo

Obj = dict[str, Any]
DEFAULT_CLASS_ANNOTATIONS = ("storageclass.kubernetes.io/is-default-class",
                             "storageclass.beta.kubernetes.io/is-default-class")


def storage_class_row(o: Obj) -> list[Any]:
    """printStorageClass: "(default)" after the name of the default class (IsDefaultAnnotation)."""
    meta = o.get("metadata") or {}
    annotations = meta.get("annotations") or {}
    name = meta.get("name", "")
    if any(annotations.get(a) == "true" for a in DEFAULT_CLASS_ANNOTATIONS):
        name += " (default)"
    return [name, o.get("provisioner") or "", o.get("reclaimPolicy") or "Delete",
            o.get("volumeBindingMode") or "Immediate", bool(o.get("allowVolumeExpansion")), age(o)]


STORAGE_CLASS_TABLE = TableConvertor((
    NAME,
    column("Provisioner", "string", "provisioner indicates the type of the provisioner."),
    column("ReclaimPolicy", "string", "reclaimPolicy controls the reclaimPolicy for dynamically provisioned "
           "PersistentVolumes of this storage class. Defaults to Delete."),
    column("VolumeBindingMode", "string", "volumeBindingMode indicates how PersistentVolumeClaims should be "
           "provisioned and bound.  When unset, VolumeBindingImmediate is used. This field is only honored by "
           "servers that enable the VolumeScheduling feature."),
    column("AllowVolumeExpansion", "string", "allowVolumeExpansion shows whether the storage class allow volume "
           "expand."),
    AGE,
), storage_class_row)

V1 = GroupVersion("storage.k8s.io", "v1", 16800, 15, (
    ResourceInfo(
        group="storage.k8s.io", version="v1", kind="StorageClass", plural="storageclasses", singular="storageclass",
        namespaced=False, key_prefix="/registry/storageclasses/", short_names=("sc",),
        strategy=StorageClassStrategy, table=STORAGE_CLASS_TABLE,
    ),
))

GROUP_VERSIONS = (V1,)
