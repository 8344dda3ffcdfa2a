"""scheduling.k8s.io/v1: PriorityClass."""
from __future__ import annotations

from typing import Any

from services.apiserver.printers import AGE, NAME, TableConvertor, age, column
from services.apiserver.resource import GroupVersion, ResourceInfo

from .strategies.scheduling import PriorityClassStrategy

Obj = dict[str, Any]

PRIORITY_CLASS_TABLE = TableConvertor((
    NAME,
    column("Value", "integer", "value represents the integer value of this priority class. This is the actual "
           "priority that pods receive when they have the name of this class in their pod spec."),
    column("Global-Default", "boolean", "globalDefault specifies whether this PriorityClass should be considered "
           "as the default priority for pods that do not have any priority class. Only one PriorityClass can be "
           "marked as `globalDefault`. However, if more than one PriorityClasses exists with their `globalDefault` "
           "field set to true, the smallest value of such global default PriorityClasses will be used as the "
           "default priority."),
    AGE,
    column("PreemptionPolicy", "string", "preemptionPolicy is the Policy for preempting pods with lower priority. "
           "One of Never, PreemptLowerPriority. Defaults to PreemptLowerPriority if unset."),
), lambda o: [(o.get("metadata") or {}).get("name", ""), o.get("value", 0), bool(o.get("globalDefault")), age(o),
              o.get("preemptionPolicy") or ""])

V1 = GroupVersion("scheduling.k8s.io", "v1", 16600, 15, (
    ResourceInfo(
        group="scheduling.k8s.io", version="v1", kind="PriorityClass", plural="priorityclasses",
        singular="priorityclass", namespaced=False, key_prefix="/registry/priorityclasses/", short_names=("pc",),
        strategy=PriorityClassStrategy, table=PRIORITY_CLASS_TABLE,
        protobuf="k8s.io.api.scheduling.v1.PriorityClass",
    ),
))

GROUP_VERSIONS = (V1,)
