"""Strategies of storage.k8s.io/v1: StorageClass (kube's pkg/registry/storage/storageclass), CSIDriver, CSINode,
CSIStorageCapacity and VolumeAttachment (their classes say what each covers).

StorageClass: defaulting (reclaimPolicy Delete, volumeBindingMode Immediate), ValidateStorageClass (provisioner
required and a qualified name, at most 512 parameters, reclaimPolicy Delete|Retain, volumeBindingMode,
allowedTopologies' match label expressions) and ValidateStorageClassUpdate (parameters, provisioner,
reclaimPolicy and volumeBindingMode cannot change).
"""
from __future__ import annotations

import orjson

from services.apiserver import validation as v
from services.apiserver.registry.rest import Obj, Strategy
from services.common import quantity

from .workload import validate_label_selector

RECLAIM_POLICIES = ["Delete", "Retain"]
BINDING_MODES = ["Immediate", "WaitForFirstConsumer"]
MAX_PARAMETERS = 512
MAX_PARAMETERS_SIZE = 256 * 1024
PROVISIONER_MAX = 63


class StorageClassStrategy(Strategy):
    def canonicalize(self, obj: Obj) -> None:
        if not obj.get("reclaimPolicy"):
            obj["reclaimPolicy"] = "Delete"
        if not obj.get("volumeBindingMode"):
            obj["volumeBindingMode"] = "Immediate"

    def validate(self, obj: Obj) -> list[v.Cause]:
        causes = super().validate(obj)
        prov = obj.get("provisioner") or ""
        if not prov:
            causes.append(v.required("provisioner"))
        else:
            causes += [v.invalid("provisioner", prov, m) for m in v.is_qualified_name(prov.lower())]
        params = obj.get("parameters") or {}
        if len(params) > MAX_PARAMETERS:
            causes.append(v.invalid("parameters", params, f"must have at most {MAX_PARAMETERS} parameters"))
        size = 0
        for k, val in params.items():
            if not k:
                causes.append(v.invalid("parameters", params, "field can not be empty."))
            size += len(k) + len(val or "")
        if size > MAX_PARAMETERS_SIZE:
            causes.append(v.too_long("parameters", MAX_PARAMETERS_SIZE))
        policy = obj.get("reclaimPolicy")
        if policy not in RECLAIM_POLICIES:
            causes.append(v.not_supported("reclaimPolicy", policy, RECLAIM_POLICIES))
        mode = obj.get("volumeBindingMode")
        if mode not in BINDING_MODES:
            causes.append(v.not_supported("volumeBindingMode", mode, BINDING_MODES))
        for i, term in enumerate(obj.get("allowedTopologies") or []):
            exprs = term.get("matchLabelExpressions") or []
            if not exprs:
                causes.append(v.required(f"allowedTopologies[{i}].matchLabelExpressions",
                                         "must have at least one topology term"))
            for j, e in enumerate(exprs):
                p = f"allowedTopologies[{i}].matchLabelExpressions[{j}]"
                causes += [v.invalid(f"{p}.key", e.get("key") or "", m) for m in v.is_qualified_name(e.get("key") or "")]
                if not e.get("values"):
                    causes.append(v.required(f"{p}.values", "must specify as least one value"))
        return causes

    def validate_update(self, obj: Obj, old: Obj) -> list[v.Cause]:
        causes = super().validate_update(obj, old)
        if (obj.get("parameters") or {}) != (old.get("parameters") or {}):
            causes.append(v.forbidden("parameters", "updates to parameters are forbidden."))
        if obj.get("provisioner") != old.get("provisioner"):
            causes.append(v.forbidden("provisioner", "updates to provisioner are forbidden."))
        if obj.get("reclaimPolicy") != old.get("reclaimPolicy"):
            causes.append(v.forbidden("reclaimPolicy", "updates to reclaimPolicy are forbidden."))
        if obj.get("volumeBindingMode") != old.get("volumeBindingMode"):
            causes.append(v.immutable("volumeBindingMode", obj.get("volumeBindingMode")))
        return causes


LIFECYCLE_MODES = ["Ephemeral", "Persistent"]
FS_GROUP_POLICIES = ["File", "None", "ReadWriteOnceWithFSType"]
CSI_DRIVER_NAME_MAX = 63


class CSIDriverStrategy(Strategy):
    """storage.k8s.io/v1 CSIDriver (kube's pkg/registry/storage/csidriver). Covered: SetDefaults_CSIDriver
    (attachRequired true, podInfoOnMount, storageCapacity, requiresRepublish and seLinuxMount false,
    fsGroupPolicy ReadWriteOnceWithFSType, volumeLifecycleModes [Persistent]), the name (a DNS subdomain of at
    most 63 characters), fsGroupPolicy and volumeLifecycleModes values, tokenRequests (one per audience) and
    ValidateCSIDriverUpdate's immutable attachRequired and volumeLifecycleModes."""

    def canonicalize(self, obj: Obj) -> None:
        spec = obj.get("spec")
        if not isinstance(spec, dict):
            return
        spec.setdefault("attachRequired", True)
        for f in ("podInfoOnMount", "storageCapacity", "requiresRepublish", "seLinuxMount"):
            spec.setdefault(f, False)
        spec.setdefault("fsGroupPolicy", "ReadWriteOnceWithFSType")
        if not spec.get("volumeLifecycleModes"):
            spec["volumeLifecycleModes"] = ["Persistent"]

    def validate_name(self, obj: Obj, name: str) -> list[str]:
        errs = v.is_dns1123_subdomain(name)
        if len(name) > CSI_DRIVER_NAME_MAX:
            errs.insert(0, v.max_len_error(CSI_DRIVER_NAME_MAX))
        return errs

    def validate(self, obj: Obj) -> list[v.Cause]:
        causes = super().validate(obj)
        spec = obj.get("spec") or {}
        policy = spec.get("fsGroupPolicy")
        if policy is not None and policy not in FS_GROUP_POLICIES:
            causes.append(v.not_supported("spec.fsGroupPolicy", policy, FS_GROUP_POLICIES))
        for i, mode in enumerate(spec.get("volumeLifecycleModes") or []):
            if mode not in LIFECYCLE_MODES:
                causes.append(v.not_supported(f"spec.volumeLifecycleModes[{i}]", mode, LIFECYCLE_MODES))
        seen: set[str] = set()
        for i, tr in enumerate(spec.get("tokenRequests") or []):
            audience = tr.get("audience") or ""
            if audience in seen:
                causes.append(v.duplicate(f"spec.tokenRequests[{i}].audience", audience))
            seen.add(audience)
            seconds = tr.get("expirationSeconds")
            if seconds is not None and seconds < 600:
                causes.append(v.invalid(f"spec.tokenRequests[{i}].expirationSeconds", seconds,
                                        "may not specify a duration less than 10 minutes"))
        return causes

    def validate_update(self, obj: Obj, old: Obj) -> list[v.Cause]:
        causes = super().validate_update(obj, old)
        spec, old_spec = obj.get("spec") or {}, old.get("spec") or {}
        for f in ("attachRequired", "volumeLifecycleModes"):
            if spec.get(f) != old_spec.get(f):
                value = spec.get(f)
                causes.append(v.invalid_go(f"spec.{f}", _go(value), "field is immutable"))
        return causes


def _go(value: object) -> str:
    """A *bool or []VolumeLifecycleMode as kube's field.Invalid prints it."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return "[]storage.VolumeLifecycleMode{" + ", ".join(f'"{m}"' for m in value) + "}"
    return "<nil>"


CSI_NODE_ID_MAX = 192
MAX_ATTACHED_VOLUME_METADATA_SIZE = 256 * 1024
MAX_VOLUME_ERROR_MESSAGE_SIZE = 1024
INT32_MAX = 2**31 - 1


def validate_csi_driver_name(name: str, path: str) -> list[v.Cause]:
    """ValidateCSIDriverName: required, at most 63 characters, a DNS subdomain once lowercased."""
    causes: list[v.Cause] = []
    if not name:
        causes.append(v.required(path))
    if len(name) > CSI_DRIVER_NAME_MAX:
        causes.append(v.too_long(path, CSI_DRIVER_NAME_MAX))
    causes += [v.invalid(path, name, m) for m in v.is_dns1123_subdomain(name.lower())]
    return causes


def go_struct(type_name: str, value: object) -> str:
    """A struct value in an "Invalid value" the way a reader recognises it (kube prints Go's %#v, whose pointers
    cannot be reproduced): the type, then the set fields."""
    if not isinstance(value, dict):
        return f"{type_name}{{}}"
    return type_name + "{" + ", ".join(f"{k[:1].upper()}{k[1:]}:{orjson.dumps(val).decode()}"
                                       for k, val in value.items()) + "}"


class CSINodeStrategy(Strategy):
    """storage.k8s.io/v1 CSINode (kube's pkg/registry/storage/csinode): named as its Node; ValidateCSINode (each
    driver's name a CSI driver name and unique, nodeID required and at most 192 characters, allocatable.count
    not negative, topologyKeys qualified names without repeats) and ValidateCSINodeUpdate (a driver already
    listed cannot change)."""

    def validate(self, obj: Obj) -> list[v.Cause]:
        causes = super().validate(obj)
        seen: set[str] = set()
        for i, d in enumerate((obj.get("spec") or {}).get("drivers") or []):
            p = f"spec.drivers[{i}]"
            name, node_id = d.get("name") or "", d.get("nodeID") or ""
            causes += validate_csi_driver_name(name, f"{p}.name")
            if not node_id:
                causes.append(v.required(f"{p}.nodeID"))
            if len(node_id) > CSI_NODE_ID_MAX:
                causes.append(v.invalid(f"{p}.nodeID", node_id, f"must be {CSI_NODE_ID_MAX} characters or less"))
            count = (d.get("allocatable") or {}).get("count")
            if count is not None and count < 0:
                causes.append(v.invalid(f"{p}.allocatable.count", count, "must be greater than or equal to 0"))
            if name in seen:
                causes.append(v.duplicate(f"{p}.name", name))
            seen.add(name)
            keys: set[str] = set()
            for key in d.get("topologyKeys") or []:
                if not key:
                    causes.append(v.required(p))
                if key in keys:
                    causes.append(v.duplicate(p, key))
                keys.add(key)
                causes += [v.invalid(p, key, m) for m in v.is_qualified_name(key)]
        return causes

    def validate_update(self, obj: Obj, old: Obj) -> list[v.Cause]:
        causes = super().validate_update(obj, old)
        new_drivers = {d.get("name"): d for d in (obj.get("spec") or {}).get("drivers") or []}
        for d in (old.get("spec") or {}).get("drivers") or []:
            now = new_drivers.get(d.get("name"))
            if now is not None and now != d:
                causes.append(v.invalid_go("spec.drivers", go_struct("storage.CSINodeDriver", now),
                                           "field is immutable"))
        return causes


class CSIStorageCapacityStrategy(Strategy):
    """storage.k8s.io/v1 CSIStorageCapacity (kube's pkg/registry/storage/csistoragecapacity):
    ValidateCSIStorageCapacity (nodeTopology a label selector, storageClassName a DNS subdomain, capacity not
    negative) and ValidateCSIStorageCapacityUpdate (only metadata is checked; nodeTopology and storageClassName
    cannot change)."""

    def validate(self, obj: Obj) -> list[v.Cause]:
        causes = super().validate(obj)
        causes += validate_label_selector(obj.get("nodeTopology"), "nodeTopology")
        cls = obj.get("storageClassName") or ""
        causes += [v.invalid("storageClassName", cls, m) for m in v.is_dns1123_subdomain(cls)]
        for f in ("capacity", "maximumVolumeSize"):
            if obj.get(f) is not None:
                causes += _nonnegative_quantity(f, obj[f])
        return causes

    def validate_update(self, obj: Obj, old: Obj) -> list[v.Cause]:
        causes = v.validate_object_meta_update(obj.get("metadata") or {}, old.get("metadata") or {})
        if obj.get("nodeTopology") != old.get("nodeTopology"):
            causes.append(v.invalid_go("nodeTopology", go_struct("&v1.LabelSelector", obj.get("nodeTopology")),
                                       "field is immutable"))
        if obj.get("storageClassName") != old.get("storageClassName"):
            causes.append(v.immutable("storageClassName", obj.get("storageClassName") or ""))
        return causes


def _nonnegative_quantity(path: str, value: object) -> list[v.Cause]:
    try:
        q = quantity.parse(value)
    except ValueError as e:
        return [v.invalid(path, value, str(e))]
    return [v.invalid(path, value, "must be greater than or equal to 0")] if q < 0 else []


class VolumeAttachmentStrategy(Strategy):
    """storage.k8s.io/v1 VolumeAttachment (kube's pkg/registry/storage/volumeattachment): status is written
    through /status only (reset on create, kept on update); ValidateVolumeAttachment and its V1 additions
    (attacher a CSI driver name, exactly one of source.persistentVolumeName and source.inlineVolumeSpec, nodeName
    a DNS subdomain, status' attachmentMetadata at most 256 KiB and error messages at most 1024 bytes) and
    ValidateVolumeAttachmentUpdate (spec immutable)."""
    status_fields = ("status",)
    status_subresource = True

    def prepare_for_create(self, obj: Obj) -> None:
        obj.pop("status", None)

    def validate(self, obj: Obj) -> list[v.Cause]:
        causes = super().validate(obj)
        spec = obj.get("spec") or {}
        attacher = spec.get("attacher") or ""
        if not attacher:
            causes.append(v.required("spec.attacher"))
        source = spec.get("source") or {}
        pv, inline = source.get("persistentVolumeName"), source.get("inlineVolumeSpec")
        if pv is None and inline is None:
            causes.append(v.required("spec.source", "must specify exactly one of inlineVolumeSpec and "
                                                    "persistentVolumeName"))
        elif pv is not None and inline is not None:
            causes.append(v.forbidden("spec.source", "must specify exactly one of inlineVolumeSpec and "
                                                     "persistentVolumeName"))
        elif pv is not None and not pv:
            causes.append(v.required("spec.source.persistentVolumeName", "must specify non empty "
                                                                         "persistentVolumeName"))
        node = spec.get("nodeName") or ""
        causes += [v.invalid("spec.nodeName", node, m) for m in v.is_dns1123_subdomain(node)]
        status = obj.get("status") or {}
        size = sum(len(k) + len(val or "") for k, val in (status.get("attachmentMetadata") or {}).items())
        if size > MAX_ATTACHED_VOLUME_METADATA_SIZE:
            causes.append(v.too_long("status.attachmentMetadata", MAX_ATTACHED_VOLUME_METADATA_SIZE))
        for f in ("attachError", "detachError"):
            err = status.get(f) or {}
            if len(err.get("message") or "") > MAX_VOLUME_ERROR_MESSAGE_SIZE:
                causes.append(v.too_long(f"status.{f}.message", MAX_ATTACHED_VOLUME_METADATA_SIZE))
            code = err.get("errorCode")
            if code is not None and code < 0:
                causes.append(v.invalid(f"status.{f}.errorCode", code, f"must be between 0 and {INT32_MAX}, "
                                                                        "inclusive"))
        causes += validate_csi_driver_name(attacher, "spec.attacher")
        if pv:
            causes += [v.invalid("spec.source.persistentVolumeName", pv, m) for m in v.is_dns1123_subdomain(pv)]
        return causes

    def validate_update(self, obj: Obj, old: Obj) -> list[v.Cause]:
        causes = super().validate_update(obj, old)
        if obj.get("spec") != old.get("spec"):
            causes.append(v.invalid_go("spec", go_struct("storage.VolumeAttachmentSpec", obj.get("spec")),
                                       "field is immutable"))
        return causes
