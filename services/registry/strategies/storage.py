"""Strategies of storage.k8s.io/v1: StorageClass (kube's pkg/registry/storage/storageclass).

Covered: defaulting (reclaimPolicy Delete, volumeBindingMode Immediate), ValidateStorageClass (provisioner
required and a qualified name, at most 512 parameters, reclaimPolicy Delete|Retain, volumeBindingMode,
allowedTopologies' match label expressions) and ValidateStorageClassUpdate (parameters, provisioner,
reclaimPolicy and volumeBindingMode cannot change).
"""
from __future__ import annotations

from .. import validation as v
from . import Obj, Strategy

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
