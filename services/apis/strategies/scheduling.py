"""Strategies of scheduling.k8s.io/v1: PriorityClass (kube's pkg/registry/scheduling/priorityclass).

Covered: defaulting (preemptionPolicy PreemptLowerPriority), ValidatePriorityClass (the system- prefix
reserved for kube's two system classes with their exact values, the highest user-definable value,
preemptionPolicy's values) and ValidatePriorityClassUpdate (value and preemptionPolicy immutable). The
"only one globalDefault" rule is kube's Priority admission plugin's (services/admission/plugins/priority.py).
"""
from __future__ import annotations

from services.apiserver import validation as v
from services.apiserver.registry.rest import Obj, Strategy

HIGHEST_USER_DEFINABLE_PRIORITY = 1_000_000_000
SYSTEM_CRITICAL_PRIORITY = 2 * HIGHEST_USER_DEFINABLE_PRIORITY
SYSTEM_PREFIX = "system-"
PREEMPTION_POLICIES = ["PreemptLowerPriority", "Never"]

# scheduling.SystemPriorityClasses(): what kube-apiserver creates at start (bootstrap.py creates them here).
SYSTEM_PRIORITY_CLASSES: list[Obj] = [
    {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
     "metadata": {"name": "system-node-critical"}, "value": SYSTEM_CRITICAL_PRIORITY + 1000,
     "description": "Used for system critical pods that must not be moved from their current node."},
    {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
     "metadata": {"name": "system-cluster-critical"}, "value": SYSTEM_CRITICAL_PRIORITY,
     "description": "Used for system critical pods that must run in the cluster, but can be moved to another "
                    "node if necessary."},
]


def _known_system_class(name: str, value: object, global_default: bool) -> str:
    """IsKnownSystemPriorityClass: "" when it is one, else kube's error text."""
    for pc in SYSTEM_PRIORITY_CLASSES:
        if pc["metadata"]["name"] == name:
            if value != pc["value"]:
                return f"value of {name} PriorityClass must be {pc['value']}"
            if global_default:
                return f"globalDefault of {name} PriorityClass must be false"
            return ""
    return f"{name} is not a known system priority class"


class PriorityClassStrategy(Strategy):
    def canonicalize(self, obj: Obj) -> None:
        if not obj.get("preemptionPolicy"):
            obj["preemptionPolicy"] = "PreemptLowerPriority"

    def validate(self, obj: Obj) -> list[v.Cause]:
        causes = super().validate(obj)
        name = (obj.get("metadata") or {}).get("name") or ""
        value = obj.get("value", 0)
        if name.startswith(SYSTEM_PREFIX):
            err = _known_system_class(name, value, bool(obj.get("globalDefault")))
            if err:
                causes.append(v.forbidden("metadata.name", f"priority class names with '{SYSTEM_PREFIX}' prefix "
                                                           f"are reserved for system use only. error: {err}"))
        elif isinstance(value, int) and value > HIGHEST_USER_DEFINABLE_PRIORITY:
            causes.append(v.forbidden("value", "maximum allowed value of a user defined priority is "
                                               f"{HIGHEST_USER_DEFINABLE_PRIORITY}"))
        policy = obj.get("preemptionPolicy")
        if policy not in PREEMPTION_POLICIES:
            causes.append(v.not_supported("preemptionPolicy", policy, PREEMPTION_POLICIES))
        return causes

    def validate_update(self, obj: Obj, old: Obj) -> list[v.Cause]:
        causes = super().validate_update(obj, old)
        if obj.get("value", 0) != old.get("value", 0):
            causes.append(v.forbidden("value", "may not be changed in an update."))
        if obj.get("preemptionPolicy") != old.get("preemptionPolicy"):
            causes.append(v.immutable("preemptionPolicy", obj.get("preemptionPolicy")))
        return causes
