"""Strategies of node.k8s.io/v1: RuntimeClass (kube's pkg/registry/node/runtimeclass).

Covered: ValidateRuntimeClass (the name a DNS subdomain, handler a DNS label, overhead.podFixed quantities
validated as a container's limits, scheduling.nodeSelector as labels and scheduling.tolerations' operators and
effects) and ValidateRuntimeClassUpdate (only metadata and the immutable handler are checked).
"""
from __future__ import annotations

from services.apiserver import validation as v
from services.apiserver.registry.rest import Obj, Strategy

from .podspec import resource_quantities

TOLERATION_OPERATORS = ["Equal", "Exists"]
TAINT_EFFECTS = ["NoSchedule", "PreferNoSchedule", "NoExecute"]


def _overhead(pod_fixed: dict[str, object]) -> list[v.Cause]:
    """ValidateResourceRequirements of Limits: podFixed (kube reports them under overhead.limits)."""
    return resource_quantities(pod_fixed, "overhead.limits")[1]


def _tolerations(tolerations: list[Obj]) -> list[v.Cause]:
    """ValidateTolerations' operator and effect rules, then RuntimeClass' own: no toleration twice."""
    causes: list[v.Cause] = []
    path = "scheduling.tolerations"
    seen: list[Obj] = []
    for i, t in enumerate(tolerations):
        p = f"{path}[{i}]"
        key, op = t.get("key") or "", t.get("operator") or "Equal"
        if key:
            causes += [v.invalid(f"{p}.key", key, m) for m in v.is_qualified_name(key)]
        elif op != "Exists":
            causes.append(v.invalid(f"{p}.operator", op, "operator must be Exists when `key` is empty, which "
                                                         "means \"match all values and all keys\""))
        if op not in TOLERATION_OPERATORS:
            causes.append(v.not_supported(f"{p}.operator", op, TOLERATION_OPERATORS))
        elif op == "Exists" and t.get("value"):
            causes.append(v.invalid(f"{p}.operator", t.get("value"), "value must be empty when `operator` is "
                                                                      "'Exists'"))
        effect = t.get("effect")
        if effect and effect not in TAINT_EFFECTS:
            causes.append(v.not_supported(f"{p}.effect", effect, TAINT_EFFECTS))
        if t in seen:
            causes.append(v.duplicate(p, t))
        seen.append(t)
    return causes


class RuntimeClassStrategy(Strategy):
    def validate(self, obj: Obj) -> list[v.Cause]:
        causes = super().validate(obj)
        handler = obj.get("handler") or ""
        causes += [v.invalid("handler", handler, m) for m in v.is_dns1123_label(handler)]
        overhead = obj.get("overhead")
        if isinstance(overhead, dict):
            causes += _overhead(overhead.get("podFixed") or {})
        scheduling = obj.get("scheduling")
        if isinstance(scheduling, dict):
            causes += v.validate_labels(scheduling.get("nodeSelector") or {}, "scheduling.nodeSelector")
            causes += _tolerations(scheduling.get("tolerations") or [])
        return causes

    def validate_update(self, obj: Obj, old: Obj) -> list[v.Cause]:
        causes = v.validate_object_meta_update(obj.get("metadata") or {}, old.get("metadata") or {})
        if obj.get("handler") != old.get("handler"):
            causes.append(v.immutable("handler", obj.get("handler") or ""))
        return causes
