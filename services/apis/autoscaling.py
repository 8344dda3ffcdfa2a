"""autoscaling/v2 and autoscaling/v1: HorizontalPodAutoscaler, one storage in v2 (v1 converts through it).

No controller acts on them: apiary has no metrics API (no metrics-server), so an HPA's status stays what its
writers put there, as in a kube cluster without one.
"""
from __future__ import annotations

from typing import Any

from services.apiserver.printers import AGE, NAME, TableConvertor, age, column
from services.apiserver.resource import GroupVersion, ResourceInfo

from .kinds import status
from .schemas import field_doc
from .strategies.autoscaling import (
    CONVERSION_V1,
    HorizontalPodAutoscalerStrategy,
    HorizontalPodAutoscalerV1Strategy,
)

Obj = dict[str, Any]
GROUP = "autoscaling"
MAX_TARGETS = 2


def _current(statuses: list[Obj], i: int, source: str) -> Obj | None:
    """The current value of spec.metrics[i] in status.currentMetrics[i], when there is one of that source."""
    if i < len(statuses) and isinstance(statuses[i].get(source), dict):
        return statuses[i][source].get("current") or {}
    return None


def _target(spec: Obj, statuses: list[Obj], i: int) -> str:
    """One metric of formatHPAMetrics: current/target, "<unknown>" for a current value not yet reported."""
    typ = spec.get("type")
    source = {"External": "external", "Pods": "pods", "Object": "object", "Resource": "resource",
              "ContainerResource": "containerResource"}.get(typ or "")
    if source is None or not isinstance(spec.get(source), dict):
        return "<unknown type>"
    src = spec[source]
    target = src.get("target") or {}
    current = _current(statuses, i, source)
    if source in ("external", "object"):
        if target.get("averageValue") is not None:
            now = (current or {}).get("averageValue") or "<unknown>"
            return f"{now}/{target['averageValue']} (avg)"
        now = "<unknown>" if current is None else current.get("value") or "0"
        return f"{now}/{target.get('value') or '0'}"
    if source == "pods":
        now = "<unknown>" if current is None else current.get("averageValue") or "0"
        return f"{now}/{target.get('averageValue') or '0'}"
    prefix = (f"{src.get('name') or ''}" if source == "resource" else
              f"{src.get('name') or ''} on {src.get('container') or ''}")
    if target.get("averageValue") is not None:
        now = "<unknown>" if current is None else current.get("averageValue") or "0"
        return f"{prefix}: {now}/{target['averageValue']}"
    now = "<unknown>"
    if current is not None and current.get("averageUtilization") is not None:
        now = f"{current['averageUtilization']}%"
    goal = "<auto>" if target.get("averageUtilization") is None else f"{target['averageUtilization']}%"
    return f"{prefix}: {now}/{goal}"


def format_metrics(specs: list[Obj], statuses: list[Obj]) -> str:
    """formatHPAMetrics: the first two targets, then "+ N more..."."""
    if not specs:
        return "<none>"
    shown = [_target(s, statuses, i) for i, s in enumerate(specs)]
    if len(shown) > MAX_TARGETS:
        return ", ".join(shown[:MAX_TARGETS]) + f" + {len(shown) - MAX_TARGETS} more..."
    return ", ".join(shown)


def hpa_row(o: Obj) -> list[Any]:
    """printHorizontalPodAutoscaler, on the v2 form (kube prints both versions from its internal, v2-shaped,
    object; one convertor serves both, a v1 object converted first)."""
    if o.get("apiVersion") == "autoscaling/v1":
        o = CONVERSION_V1.storage_object(o)
    spec, st = o.get("spec") or {}, o.get("status") or {}
    ref = spec.get("scaleTargetRef") or {}
    low = spec.get("minReplicas")
    return [(o.get("metadata") or {}).get("name", ""), f"{ref.get('kind') or ''}/{ref.get('name') or ''}",
            format_metrics(spec.get("metrics") or [], st.get("currentMetrics") or []),
            "<unset>" if low is None else str(low), spec.get("maxReplicas") or 0, st.get("currentReplicas") or 0,
            age(o)]


_SPEC = "io.k8s.api.autoscaling.v2.HorizontalPodAutoscalerSpec"
HPA_TABLE = TableConvertor((
    NAME,
    column("Reference", "string", field_doc(_SPEC, "scaleTargetRef")),
    column("Targets", "string", field_doc(_SPEC, "metrics")),
    column("MinPods", "string", field_doc(_SPEC, "minReplicas")),
    column("MaxPods", "string", field_doc(_SPEC, "maxReplicas")),
    column("Replicas", "string", field_doc("io.k8s.api.autoscaling.v2.HorizontalPodAutoscalerStatus",
                                           "currentReplicas")),
    AGE,
), hpa_row)


def _hpa(version: str, strategy: type, table: TableConvertor, **kw: Any) -> ResourceInfo:
    return ResourceInfo(
        group=GROUP, version=version, kind="HorizontalPodAutoscaler", plural="horizontalpodautoscalers",
        singular="horizontalpodautoscaler", namespaced=True, key_prefix="/registry/horizontalpodautoscalers/",
        short_names=("hpa",), categories=("all",), subresources=(status("HorizontalPodAutoscaler"),),
        strategy=strategy, table=table, **kw)


V2 = GroupVersion(GROUP, "v2", 17500, 30, (_hpa("v2", HorizontalPodAutoscalerStrategy, HPA_TABLE),))
V1 = GroupVersion(GROUP, "v1", 17500, 15, (
    _hpa("v1", HorizontalPodAutoscalerV1Strategy, HPA_TABLE, conversion=CONVERSION_V1,
         protobuf="k8s.io.api.autoscaling.v1.HorizontalPodAutoscaler"),))

GROUP_VERSIONS = (V2, V1)
