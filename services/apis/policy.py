"""policy/v1: PodDisruptionBudget."""
from __future__ import annotations

from typing import Any

from services.apiserver.printers import AGE, NAME, TableConvertor, age, column
from services.apiserver.resource import STATUS_VERBS, GroupVersion, ResourceInfo, SubresourceInfo

from .strategies.policy import PodDisruptionBudgetStrategy

Obj = dict[str, Any]


def _int_or_percent(value: Any) -> str:
    return "N/A" if value is None else str(value)


def pdb_row(o: Obj) -> list[Any]:
    spec = o.get("spec") or {}
    return [(o.get("metadata") or {}).get("name", ""), _int_or_percent(spec.get("minAvailable")),
            _int_or_percent(spec.get("maxUnavailable")), (o.get("status") or {}).get("disruptionsAllowed") or 0,
            age(o)]


PDB_TABLE = TableConvertor((
    NAME,
    column("Min Available", "string", "The minimum number of pods that must be available."),
    column("Max Unavailable", "string", "The maximum number of pods that may be unavailable."),
    column("Allowed Disruptions", "integer", "Calculated number of pods that may be disrupted at this time."),
    AGE,
), pdb_row)

V1 = GroupVersion("policy", "v1", 17100, 15, (
    ResourceInfo(
        group="policy", version="v1", kind="PodDisruptionBudget", plural="poddisruptionbudgets",
        singular="poddisruptionbudget", namespaced=True, key_prefix="/registry/poddisruptionbudgets/",
        short_names=("pdb",), subresources=(SubresourceInfo("status", "PodDisruptionBudget", STATUS_VERBS),),
        strategy=PodDisruptionBudgetStrategy, table=PDB_TABLE, protobuf="k8s.io.api.policy.v1.PodDisruptionBudget",
    ),
))

GROUP_VERSIONS = (V1,)
