"""What object-count quotas count (kube's pkg/quota/v1 and its generic object-count evaluator), shared by
the ResourceQuota admission plug-in, which charges creates, and the resource quota controller, which
recounts usage: `count/<resource>[.<group>]` for any namespaced resource, and the legacy core names."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from . import quantity

LEGACY = frozenset({"configmaps", "secrets", "services", "persistentvolumeclaims", "replicationcontrollers",
                    "resourcequotas"})


def keys_for(group: str, resource: str) -> tuple[str, ...]:
    """The quota resource names that count objects of (group, resource)."""
    count = f"count/{resource}.{group}" if group else f"count/{resource}"
    return (count, resource) if not group and resource in LEGACY else (count,)


def resource_of(key: str) -> tuple[str, str] | None:
    """(group, resource) an object-count quota key counts, None for other quota resources (cpu, memory)."""
    if key.startswith("count/"):
        resource, _, group = key[len("count/"):].partition(".")
        return group, resource
    return ("", key) if key in LEGACY else None


def hard(quota: Mapping[str, Any], part: str = "status") -> Mapping[str, Any]:
    """A ResourceQuota's limits: what its status says the admission plug-in enforces, or (part="spec") what
    its spec asks for."""
    return (quota.get(part) or {}).get("hard") or {}


def equals(a: Mapping[str, Any] | None, b: Mapping[str, Any] | None) -> bool:
    """Two resource lists with the same names and quantities ("1k" equals "1000"), as quota.Equals."""
    a, b = a or {}, b or {}
    if a.keys() != b.keys():
        return False
    try:
        return all(quantity.parse(a[k]) == quantity.parse(b[k]) for k in a)
    except ValueError:
        return dict(a) == dict(b)
