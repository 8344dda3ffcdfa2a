"""Strategies of storage.k8s.io/v1: StorageClass (kube's pkg/registry/storage/storageclass).

Covered: defaulting (reclaimPolicy Delete, volumeBindingMode Immediate), ValidateStorageClass (provisioner
required and a qualified name, at most 512 parameters, reclaimPolicy Delete|Retain, volumeBindingMode,
allowedTopologies' match label expressions) and ValidateStorageClassUpdate (parameters, provisioner,
reclaimPolicy and volumeBindingMode cannot change).
"""
from __future__ import annotations

from services.apiserver import validation as v
from services.apiserver.registry.rest import Obj, Strategy

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
