"""core/v1 PersistentVolume, PersistentVolumeClaim and ComponentStatus: their definitions and Table columns as
kube's printers print them (printPersistentVolume, printPersistentVolumeClaim, printComponentStatus)."""
from __future__ import annotations

from typing import Any

from services.apiserver.printers import AGE, NAME, TableConvertor, age, column
from services.apiserver.resource import ResourceInfo

from .kinds import status
from .strategies.volumes import (
    BETA_STORAGE_CLASS,
    ComponentStatusStrategy,
    PersistentVolumeClaimStrategy,
    PersistentVolumeStrategy,
)

Obj = dict[str, Any]
_PB = "k8s.io.api.core.v1."
# GetAccessModesAsString's order and abbreviations
_MODES = (("ReadWriteOnce", "RWO"), ("ReadOnlyMany", "ROX"), ("ReadWriteMany", "RWX"), ("ReadWriteOncePod", "RWOP"))


def access_modes(modes: list[str] | None) -> str:
    present = set(modes or ())
    return ",".join(short for mode, short in _MODES if mode in present)


def _phase(o: Obj) -> str:
    if (o.get("metadata") or {}).get("deletionTimestamp"):
        return "Terminating"
    return (o.get("status") or {}).get("phase") or ""


def _storage(resources: Obj | None) -> str:
    return str((resources or {}).get("storage") or "0")


def pv_row(o: Obj) -> list[Any]:
    meta, spec = o.get("metadata") or {}, o.get("spec") or {}
    ref = spec.get("claimRef")
    claim = f"{ref.get('namespace') or ''}/{ref.get('name') or ''}" if isinstance(ref, dict) else ""
    storage_class = (meta.get("annotations") or {}).get(BETA_STORAGE_CLASS, spec.get("storageClassName") or "")
    return [meta.get("name", ""), _storage(spec.get("capacity")), access_modes(spec.get("accessModes")),
            spec.get("persistentVolumeReclaimPolicy") or "", _phase(o), claim, storage_class,
            spec.get("volumeAttributesClassName", "<unset>"), (o.get("status") or {}).get("reason") or "", age(o),
            spec.get("volumeMode") or "<unset>"]


def pvc_row(o: Obj) -> list[Any]:
    meta, spec, st = o.get("metadata") or {}, o.get("spec") or {}, o.get("status") or {}
    capacity = modes = ""
    if spec.get("volumeName"):
        modes, capacity = access_modes(st.get("accessModes")), _storage(st.get("capacity"))
    storage_class = (meta.get("annotations") or {}).get(BETA_STORAGE_CLASS, spec.get("storageClassName") or "")
    return [meta.get("name", ""), _phase(o), spec.get("volumeName") or "", capacity, modes, storage_class,
            spec.get("volumeAttributesClassName", "<unset>"), age(o), spec.get("volumeMode") or "<unset>"]


def component_status_row(o: Obj) -> list[Any]:
    state, message, error = "Unknown", "", ""
    for c in o.get("conditions") or []:
        if c.get("type") == "Healthy":
            state = "Healthy" if c.get("status") == "True" else "Unhealthy"
            message, error = c.get("message") or "", c.get("error") or ""
    return [(o.get("metadata") or {}).get("name", ""), state, message, error]


_MORE = "More info: https://kubernetes.io/docs/concepts/storage/persistent-volumes"
PV_TABLE = TableConvertor((
    NAME,
    column("Capacity", "string", f"capacity is the description of the persistent volume's resources and capacity. "
           f"{_MORE}#capacity"),
    column("Access Modes", "string", f"accessModes contains all ways the volume can be mounted. {_MORE}#access-modes"),
    column("Reclaim Policy", "string", "persistentVolumeReclaimPolicy defines what happens to a persistent volume "
           "when released from its claim. Valid options are Retain (default for manually created "
           "PersistentVolumes), Delete (default for dynamically provisioned PersistentVolumes), and Recycle "
           "(deprecated). Recycle must be supported by the volume plugin underlying this PersistentVolume. "
           f"{_MORE}#reclaiming"),
    column("Status", "string", "phase indicates if a volume is available, bound to a claim, or released by a "
           f"claim. {_MORE}#phase"),
    column("Claim", "string", "claimRef is part of a bi-directional binding between PersistentVolume and "
           "PersistentVolumeClaim. Expected to be non-nil when bound. claim.VolumeName is the authoritative bind "
           f"between PV and PVC. {_MORE}#binding"),
    column("StorageClass", "string", "StorageClass of the pv"),
    column("VolumeAttributesClass", "string", "VolumeAttributesClass of the pv"),
    column("Reason", "string", "reason is a brief CamelCase string that describes any failure and is meant for "
           "machine parsing and tidy display in the CLI."),
    AGE,
    column("VolumeMode", "string", "volumeMode defines if a volume is intended to be used with a formatted "
           "filesystem or to remain in raw block state. Value of Filesystem is implied when not included in spec.",
           priority=1),
), pv_row)

PVC_TABLE = TableConvertor((
    NAME,
    column("Status", "string", "phase represents the current phase of PersistentVolumeClaim."),
    column("Volume", "string", "volumeName is the binding reference to the PersistentVolume backing this claim."),
    column("Capacity", "string", "capacity represents the actual resources of the underlying volume."),
    column("Access Modes", "string", "accessModes contains the actual access modes the volume backing the PVC "
           f"has. {_MORE}#access-modes-1"),
    column("StorageClass", "string", "StorageClass of the pvc"),
    column("VolumeAttributesClass", "string", "VolumeAttributesClass of the pvc"),
    AGE,
    column("VolumeMode", "string", "volumeMode defines what type of volume is required by the claim. Value of "
           "Filesystem is implied when not included in claim spec.", priority=1),
), pvc_row)

COMPONENT_STATUS_TABLE = TableConvertor((
    NAME,
    column("Status", "string", "Status of the component conditions"),
    column("Message", "string", "Message of the component conditions"),
    column("Error", "string", "Error of the component conditions"),
), component_status_row)

RESOURCES = (
    ResourceInfo(
        # read-only and never stored: the registry answers with its storage's etcd health
        group="", version="v1", kind="ComponentStatus", plural="componentstatuses", singular="componentstatus",
        namespaced=False, key_prefix="", short_names=("cs",), verbs=("get", "list"), virtual=True,
        strategy=ComponentStatusStrategy, table=COMPONENT_STATUS_TABLE,
    ),
    ResourceInfo(
        group="", version="v1", kind="PersistentVolume", plural="persistentvolumes", singular="persistentvolume",
        namespaced=False, key_prefix="/registry/persistentvolumes/", short_names=("pv",),
        subresources=(status("PersistentVolume"),), strategy=PersistentVolumeStrategy, table=PV_TABLE,
        return_deleted_object=True,  # no protobuf yet: proto/k8s has no PersistentVolumeSource
    ),
    ResourceInfo(
        group="", version="v1", kind="PersistentVolumeClaim", plural="persistentvolumeclaims",
        singular="persistentvolumeclaim", namespaced=True, key_prefix="/registry/persistentvolumeclaims/",
        short_names=("pvc",), subresources=(status("PersistentVolumeClaim"),),
        strategy=PersistentVolumeClaimStrategy, table=PVC_TABLE, protobuf=_PB + "PersistentVolumeClaim",
        return_deleted_object=True,
    ),
)
