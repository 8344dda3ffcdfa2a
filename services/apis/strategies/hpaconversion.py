"""autoscaling/v1 <-> autoscaling/v2 HorizontalPodAutoscaler (kube's pkg/apis/autoscaling/v1/conversion.go), v2
being the storage version and the hub.

v1 holds one target, a CPU utilization percentage; everything else v2 says is kept, when an object is read in v1,
in annotations that a write in v1 turns back into v2 fields (kube's round trip):
autoscaling.alpha.kubernetes.io/metrics (the metrics other than CPU utilization, as v1 MetricSpecs),
autoscaling.alpha.kubernetes.io/current-metrics (status.currentMetrics as v1 MetricStatuses),
autoscaling.alpha.kubernetes.io/conditions (status.conditions) and autoscaling.alpha.kubernetes.io/behavior
(spec.behavior, as kube writes it: the internal type's JSON, with Go's field names). A v1 object without a target
is given kube's implicit one, CPU at 80%.
"""
from __future__ import annotations

import copy
from typing import Any

import orjson

Obj = dict[str, Any]

METRICS = "autoscaling.alpha.kubernetes.io/metrics"
CURRENT_METRICS = "autoscaling.alpha.kubernetes.io/current-metrics"
CONDITIONS = "autoscaling.alpha.kubernetes.io/conditions"
BEHAVIOR = "autoscaling.alpha.kubernetes.io/behavior"
ROUND_TRIP = (METRICS, CURRENT_METRICS, CONDITIONS, BEHAVIOR)
DEFAULT_CPU_UTILIZATION = 80


def _set(out: Obj, key: str, value: Any) -> None:
    if value is not None:
        out[key] = value


def _cpu_utilization(metric: Obj) -> int | None:
    """The target of a CPU utilization metric; None for any other metric."""
    res = metric.get("resource") if metric.get("type") == "Resource" else None
    if not isinstance(res, dict) or res.get("name") != "cpu":
        return None
    return (res.get("target") or {}).get("averageUtilization")


# v2 -> v1 ------------------------------------------------------------------------------------------

def _identifier_v1(metric: Obj | None, selector_key: str = "selector") -> Obj:
    out: Obj = {"metricName": (metric or {}).get("name") or ""}
    _set(out, selector_key, (metric or {}).get("selector"))
    return out


def metric_spec_to_v1(m: Obj) -> Obj:
    out: Obj = {"type": m.get("type") or ""}
    if isinstance(m.get("object"), dict):
        src, target = m["object"], m["object"].get("target") or {}
        o: Obj = {"target": src.get("describedObject") or {}, **_identifier_v1(src.get("metric")),
                  "targetValue": target.get("value") or "0"}
        _set(o, "averageValue", target.get("averageValue"))
        out["object"] = o
    if isinstance(m.get("pods"), dict):
        src = m["pods"]
        out["pods"] = {**_identifier_v1(src.get("metric")),
                       "targetAverageValue": (src.get("target") or {}).get("averageValue") or "0"}
    for key in ("resource", "containerResource"):
        if isinstance(m.get(key), dict):
            src, target = m[key], m[key].get("target") or {}
            r: Obj = {"name": src.get("name") or ""}
            if key == "containerResource":
                r["container"] = src.get("container") or ""
            _set(r, "targetAverageUtilization", target.get("averageUtilization"))
            _set(r, "targetAverageValue", target.get("averageValue"))
            out[key] = r
    if isinstance(m.get("external"), dict):
        src, target = m["external"], m["external"].get("target") or {}
        e = _identifier_v1(src.get("metric"), "metricSelector")
        _set(e, "targetValue", target.get("value"))
        _set(e, "targetAverageValue", target.get("averageValue"))
        out["external"] = e
    return out


def metric_status_to_v1(m: Obj) -> Obj:
    out: Obj = {"type": m.get("type") or ""}
    if isinstance(m.get("object"), dict):
        src, current = m["object"], m["object"].get("current") or {}
        o: Obj = {"target": src.get("describedObject") or {}, **_identifier_v1(src.get("metric")),
                  "currentValue": current.get("value") or "0"}
        _set(o, "averageValue", current.get("averageValue"))
        out["object"] = o
    if isinstance(m.get("pods"), dict):
        src = m["pods"]
        out["pods"] = {**_identifier_v1(src.get("metric")),
                       "currentAverageValue": (src.get("current") or {}).get("averageValue") or "0"}
    for key in ("resource", "containerResource"):
        if isinstance(m.get(key), dict):
            src, current = m[key], m[key].get("current") or {}
            r: Obj = {"name": src.get("name") or ""}
            if key == "containerResource":
                r["container"] = src.get("container") or ""
            _set(r, "currentAverageUtilization", current.get("averageUtilization"))
            r["currentAverageValue"] = current.get("averageValue") or "0"
            out[key] = r
    if isinstance(m.get("external"), dict):
        src, current = m["external"], m["external"].get("current") or {}
        e = _identifier_v1(src.get("metric"), "metricSelector")
        e["currentValue"] = current.get("value") or "0"
        _set(e, "currentAverageValue", current.get("averageValue"))
        out["external"] = e
    return out


_GO_RULES = (("stabilizationWindowSeconds", "StabilizationWindowSeconds"), ("selectPolicy", "SelectPolicy"),
             ("policies", "Policies"), ("tolerance", "Tolerance"))
_GO_POLICY = (("type", "Type"), ("value", "Value"), ("periodSeconds", "PeriodSeconds"))


def _behavior_go(behavior: Obj) -> Obj:
    """spec.behavior as kube's annotation holds it: the internal struct's JSON (Go names, nil pointers as null)."""
    def rules(r: Any) -> Obj | None:
        if not isinstance(r, dict):
            return None
        out: Obj = {go: r.get(name) for name, go in _GO_RULES}
        if isinstance(r.get("policies"), list):
            out["Policies"] = [{go: p.get(name) for name, go in _GO_POLICY} for p in r["policies"]]
        return out
    return {"ScaleUp": rules(behavior.get("scaleUp")), "ScaleDown": rules(behavior.get("scaleDown"))}


def to_v1(body: Obj) -> Obj:
    """A stored (v2) HPA, with its metadata's annotations, as autoscaling/v1 serves it."""
    annotations = {k: v for k, v in ((body.get("metadata") or {}).get("annotations") or {}).items()
                   if k not in ROUND_TRIP}
    spec, status = body.get("spec") or {}, body.get("status") or {}
    out_spec: Obj = {}
    _set(out_spec, "scaleTargetRef", spec.get("scaleTargetRef"))
    _set(out_spec, "minReplicas", spec.get("minReplicas"))
    out_spec["maxReplicas"] = spec.get("maxReplicas") or 0
    metrics = spec.get("metrics") or []
    for m in metrics:
        if _cpu_utilization(m) is not None:
            out_spec["targetCPUUtilizationPercentage"] = _cpu_utilization(m)
            break
    others = [metric_spec_to_v1(m) for m in metrics if _cpu_utilization(m) is None]
    out_status: Obj = {}
    _set(out_status, "observedGeneration", status.get("observedGeneration"))
    _set(out_status, "lastScaleTime", status.get("lastScaleTime"))
    out_status["currentReplicas"] = status.get("currentReplicas") or 0
    out_status["desiredReplicas"] = status.get("desiredReplicas") or 0
    for m in status.get("currentMetrics") or []:
        res = m.get("resource") if m.get("type") == "Resource" else None
        if isinstance(res, dict) and res.get("name") == "cpu" and \
                (res.get("current") or {}).get("averageUtilization") is not None:
            out_status["currentCPUUtilizationPercentage"] = res["current"]["averageUtilization"]
    if others:
        annotations[METRICS] = orjson.dumps(others).decode()
    if status.get("currentMetrics"):
        annotations[CURRENT_METRICS] = orjson.dumps([metric_status_to_v1(m) for m in status["currentMetrics"]]).decode()
    if isinstance(spec.get("behavior"), dict):
        annotations[BEHAVIOR] = orjson.dumps(_behavior_go(spec["behavior"])).decode()
    if status.get("conditions"):
        annotations[CONDITIONS] = orjson.dumps(status["conditions"]).decode()
    out: Obj = {"metadata": {"annotations": annotations}, "spec": out_spec, "status": out_status}
    return out


# v1 -> v2 ------------------------------------------------------------------------------------------

def _identifier_v2(src: Obj, selector_key: str = "selector") -> Obj:
    out: Obj = {"name": src.get("metricName") or ""}
    _set(out, "selector", src.get(selector_key))
    return out


def metric_spec_to_v2(m: Obj) -> Obj:
    out: Obj = {"type": m.get("type") or ""}
    if isinstance(m.get("object"), dict):
        src = m["object"]
        target: Obj = {"type": "Value" if src.get("averageValue") is None else "AverageValue",
                       "value": src.get("targetValue") or "0"}
        _set(target, "averageValue", src.get("averageValue"))
        out["object"] = {"describedObject": src.get("target") or {}, "metric": _identifier_v2(src), "target": target}
    if isinstance(m.get("pods"), dict):
        src = m["pods"]
        out["pods"] = {"metric": _identifier_v2(src), "target": {
            "type": "AverageValue", "averageValue": src.get("targetAverageValue") or "0"}}
    for key in ("resource", "containerResource"):
        if isinstance(m.get(key), dict):
            src = m[key]
            target = {"type": "AverageValue" if src.get("targetAverageUtilization") is None else "Utilization"}
            _set(target, "averageValue", src.get("targetAverageValue"))
            _set(target, "averageUtilization", src.get("targetAverageUtilization"))
            r: Obj = {"name": src.get("name") or ""}
            if key == "containerResource":
                r["container"] = src.get("container") or ""
            out[key] = {**r, "target": target}
    if isinstance(m.get("external"), dict):
        src = m["external"]
        target = {"type": "AverageValue" if src.get("targetValue") is None else "Value"}
        _set(target, "value", src.get("targetValue"))
        _set(target, "averageValue", src.get("targetAverageValue"))
        out["external"] = {"metric": _identifier_v2(src, "metricSelector"), "target": target}
    return out


def metric_status_to_v2(m: Obj) -> Obj:
    out: Obj = {"type": m.get("type") or ""}
    if isinstance(m.get("object"), dict):
        src = m["object"]
        current: Obj = {"value": src.get("currentValue") or "0"}
        _set(current, "averageValue", src.get("averageValue"))
        out["object"] = {"describedObject": src.get("target") or {}, "metric": _identifier_v2(src),
                         "current": current}
    if isinstance(m.get("pods"), dict):
        src = m["pods"]
        out["pods"] = {"metric": _identifier_v2(src), "current": {"averageValue": src.get("currentAverageValue") or "0"}}
    for key in ("resource", "containerResource"):
        if isinstance(m.get(key), dict):
            src = m[key]
            current = {"averageValue": src.get("currentAverageValue") or "0"}
            _set(current, "averageUtilization", src.get("currentAverageUtilization"))
            r: Obj = {"name": src.get("name") or ""}
            if key == "containerResource":
                r["container"] = src.get("container") or ""
            out[key] = {**r, "current": current}
    if isinstance(m.get("external"), dict):
        src = m["external"]
        current = {"value": src.get("currentValue") or "0"}
        _set(current, "averageValue", src.get("currentAverageValue"))
        out["external"] = {"metric": _identifier_v2(src, "metricSelector"), "current": current}
    return out


def _behavior_v2(go: Any) -> Obj | None:
    """The behavior annotation back in v2's names; None when it holds none (kube ignores an empty one)."""
    if not isinstance(go, dict):
        return None

    def rules(r: Any) -> Obj | None:
        if not isinstance(r, dict):
            return None
        out: Obj = {name: r[g] for name, g in _GO_RULES if r.get(g) is not None and g != "Policies"}
        if isinstance(r.get("Policies"), list):
            out["policies"] = [{name: p.get(g) for name, g in _GO_POLICY if p.get(g) is not None}
                               for p in r["Policies"] if isinstance(p, dict)]
        return out
    behavior = {k: rules(go.get(g)) for k, g in (("scaleUp", "ScaleUp"), ("scaleDown", "ScaleDown"))}
    behavior = {k: val for k, val in behavior.items() if val is not None}
    return behavior or None


def _annotation(annotations: dict[str, str], key: str) -> Any:
    """A round-trip annotation's JSON; None when absent or not JSON (kube ignores one it cannot read)."""
    raw = annotations.get(key)
    if raw is None:
        return None
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None


def to_v2(body: Obj) -> Obj:
    """An autoscaling/v1 HPA (with its metadata's annotations) in the storage version, v2."""
    annotations = dict((body.get("metadata") or {}).get("annotations") or {})
    spec, status = body.get("spec") or {}, body.get("status") or {}
    out_spec: Obj = {}
    _set(out_spec, "scaleTargetRef", copy.deepcopy(spec.get("scaleTargetRef")))
    _set(out_spec, "minReplicas", spec.get("minReplicas"))
    out_spec["maxReplicas"] = spec.get("maxReplicas") or 0
    metrics: list[Obj] = []
    others = _annotation(annotations, METRICS)
    if isinstance(others, list):
        metrics = [metric_spec_to_v2(m) for m in others if isinstance(m, dict)]
    cpu = spec.get("targetCPUUtilizationPercentage")
    if cpu is None and not metrics:
        cpu = DEFAULT_CPU_UTILIZATION
    if cpu is not None:
        metrics.append({"type": "Resource", "resource": {"name": "cpu", "target": {
            "type": "Utilization", "averageUtilization": cpu}}})
    out_spec["metrics"] = metrics
    behavior = _behavior_v2(_annotation(annotations, BEHAVIOR))
    if behavior is not None:
        out_spec["behavior"] = behavior
    out_status: Obj = {}
    _set(out_status, "observedGeneration", status.get("observedGeneration"))
    _set(out_status, "lastScaleTime", status.get("lastScaleTime"))
    _set(out_status, "currentReplicas", status.get("currentReplicas") or None)
    out_status["desiredReplicas"] = status.get("desiredReplicas") or 0
    current = _annotation(annotations, CURRENT_METRICS)
    if isinstance(current, list):
        out_status["currentMetrics"] = [metric_status_to_v2(m) for m in current if isinstance(m, dict)]
    elif status.get("currentCPUUtilizationPercentage") is not None:
        out_status["currentMetrics"] = [{"type": "Resource", "resource": {"name": "cpu", "current": {
            "averageUtilization": status["currentCPUUtilizationPercentage"]}}}]
    conditions = _annotation(annotations, CONDITIONS)
    if isinstance(conditions, list):
        out_status["conditions"] = conditions
    kept = {k: v for k, v in annotations.items() if k not in ROUND_TRIP}
    return {"metadata": {"annotations": kept}, "spec": out_spec, "status": out_status}
