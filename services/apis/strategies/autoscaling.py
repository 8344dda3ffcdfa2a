"""Strategies of autoscaling/v2 and autoscaling/v1 HorizontalPodAutoscaler (kube's
pkg/registry/autoscaling/horizontalpodautoscaler): one storage, in v2; v1 converts through it
(hpaconversion.py).

Covered: SetDefaults_HorizontalPodAutoscaler of v2 (minReplicas 1, a CPU utilization target of 80% when no
metric is given, a given behavior's missing rules filled with kube's: scale up by max(4 pods, 100%) per 15s with
no stabilization, scale down by 100% per 15s) and of v1 (minReplicas 1); status is written through /status only
(reset on create, kept on update); ValidateHorizontalPodAutoscaler (scaleTargetRef's kind and name, replica
bounds, each metric's source and target, behavior's policies, select policies and windows), run on the v2 form
whichever version the request used (kube validates its internal version, whose field paths are v2's), and the
status' replica counts on /status writes.
"""
from __future__ import annotations

import copy

from services.apiserver import validation as v
from services.apiserver.conversion import Conversion
from services.apiserver.registry.rest import Obj, Strategy
from services.common import quantity

from . import hpaconversion

MIN_REPLICAS_LOWER_BOUND = 1
MAX_PERIOD_SECONDS = 1800
MAX_STABILIZATION_WINDOW_SECONDS = 3600
METRIC_SOURCE_TYPES = ["ContainerResource", "External", "Object", "Pods", "Resource"]
SELECT_POLICIES = ["Disabled", "Max", "Min"]
POLICY_TYPES = ["Percent", "Pods"]
_SOURCE_FIELD = {"Object": "object", "Pods": "pods", "Resource": "resource", "External": "external",
                 "ContainerResource": "containerResource"}

SCALE_UP = {"stabilizationWindowSeconds": 0, "selectPolicy": "Max",
            "policies": [{"type": "Pods", "value": 4, "periodSeconds": 15},
                         {"type": "Percent", "value": 100, "periodSeconds": 15}]}
SCALE_DOWN = {"selectPolicy": "Max", "policies": [{"type": "Percent", "value": 100, "periodSeconds": 15}]}


def default_v2(obj: Obj) -> None:
    """SetDefaults_HorizontalPodAutoscaler (v2) and SetDefaults_HorizontalPodAutoscalerBehavior."""
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return
    if spec.get("minReplicas") is None:
        spec["minReplicas"] = 1
    if not spec.get("metrics"):
        spec["metrics"] = [{"type": "Resource", "resource": {"name": "cpu", "target": {
            "type": "Utilization", "averageUtilization": hpaconversion.DEFAULT_CPU_UTILIZATION}}}]
    behavior = spec.get("behavior")
    if isinstance(behavior, dict):
        for key, defaults in (("scaleUp", SCALE_UP), ("scaleDown", SCALE_DOWN)):
            rules = behavior.get(key)
            if not isinstance(rules, dict):
                rules = behavior[key] = {}
            for f, val in defaults.items():
                if rules.get(f) is None:
                    rules[f] = copy.deepcopy(val)


def _to_v2(body: Obj) -> Obj:
    """v1 -> v2, with v2's defaults applied to what the round trip brought back (kube defaults on decoding)."""
    out = hpaconversion.to_v2(body)
    default_v2(out)
    return out


CONVERSION_V1 = Conversion("autoscaling/v2", "HorizontalPodAutoscaler", _to_v2, hpaconversion.to_v1,
                           with_annotations=True)


def _positive(path: str, value: object) -> list[v.Cause]:
    try:
        ok = quantity.parse(value) > 0
    except ValueError as e:
        return [v.invalid(path, value, str(e))]
    return [] if ok else [v.invalid(path, value, "must be positive")]


def _cross_version_ref(ref: object, path: str) -> list[v.Cause]:
    """ValidateCrossVersionObjectReference: kind and name required, both path segments."""
    ref = ref if isinstance(ref, dict) else {}
    causes: list[v.Cause] = []
    for f in ("kind", "name"):
        value = ref.get(f) or ""
        if not value:
            causes.append(v.required(f"{path}.{f}"))
        else:
            causes += [v.invalid(f"{path}.{f}", value, m) for m in v.is_valid_path_segment_name(value)]
    return causes


def _metric_target(t: Obj, path: str) -> list[v.Cause]:
    causes: list[v.Cause] = []
    typ = t.get("type") or ""
    if not typ:
        causes.append(v.required(f"{path}.type", "must specify a metric target type"))
    if typ not in ("Utilization", "Value", "AverageValue"):
        causes.append(v.invalid(f"{path}.type", typ, "must be either Utilization, Value, or AverageValue"))
    for f in ("value", "averageValue"):
        if t.get(f) is not None:
            causes += _positive(f"{path}.{f}", t[f])
    util = t.get("averageUtilization")
    if util is not None and util < 1:
        causes.append(v.invalid(f"{path}.averageUtilization", util, "must be greater than 0"))
    return causes


def _metric_identifier(m: object, path: str) -> list[v.Cause]:
    name = (m if isinstance(m, dict) else {}).get("name") or ""
    if not name:
        return [v.required(f"{path}.name", "must specify a metric name")]
    return [v.invalid(f"{path}.name", name, msg) for msg in v.is_valid_path_segment_name(name)]


def _source(kind: str, src: Obj, path: str) -> list[v.Cause]:
    """validateObjectSource and its kin: the source's identity and the target its kind needs."""
    causes: list[v.Cause] = []
    target = src.get("target") if isinstance(src.get("target"), dict) else {}
    t = f"{path}.target"
    if kind in ("resource", "containerResource"):
        if not src.get("name"):
            causes.append(v.required(f"{path}.name", "must specify a resource name"))
        if kind == "containerResource" and not src.get("container"):
            causes.append(v.required(f"{path}.container", "must specify a container"))
        causes += _metric_target(target, t)
        if target.get("averageUtilization") is None and target.get("averageValue") is None:
            causes.append(v.required(f"{t}.averageUtilization",
                                     "must set either a target raw value or a target utilization"))
        if target.get("averageUtilization") is not None and target.get("averageValue") is not None:
            causes.append(v.forbidden(f"{t}.averageValue",
                                      "may not set both a target raw value and a target utilization"))
        return causes
    if kind == "object":
        causes += _cross_version_ref(src.get("describedObject"), f"{path}.describedObject")
    causes += _metric_identifier(src.get("metric"), f"{path}.metric")
    causes += _metric_target(target, t)
    if kind == "pods" and target.get("averageValue") is None:
        causes.append(v.required(f"{t}.averageValue", "must specify a positive target averageValue"))
    if kind == "object" and target.get("value") is None and target.get("averageValue") is None:
        causes.append(v.required(f"{t}.averageValue", "must set either a target value or averageValue"))
    if kind == "external":
        if target.get("value") is None and target.get("averageValue") is None:
            causes.append(v.required(f"{t}.averageValue",
                                     "must set either a target value for metric or a per-pod target"))
        if target.get("value") is not None and target.get("averageValue") is not None:
            causes.append(v.forbidden(f"{t}.value",
                                      "may not set both a target value for metric and a per-pod target"))
    return causes


def _metric(m: Obj, path: str) -> list[v.Cause]:
    """validateMetricSpec: a known type, its source given, and no other source."""
    causes: list[v.Cause] = []
    typ = m.get("type") or ""
    if not typ:
        causes.append(v.required(f"{path}.type", "must specify a metric source type"))
    if typ not in METRIC_SOURCE_TYPES:
        causes.append(v.not_supported(f"{path}.type", typ, METRIC_SOURCE_TYPES))
    present = [f for f in ("object", "pods", "resource", "external", "containerResource")
               if isinstance(m.get(f), dict)]
    if len(present) == 1:
        causes += _source(present[0], m[present[0]], f"{path}.{present[0]}")
    expected = _SOURCE_FIELD.get(typ)
    if expected is not None and expected not in present:
        causes.append(v.required(f"{path}.{expected}", "must populate information for the given metric source"))
    if len(present) != 1:
        causes += [v.forbidden(f"{path}.{f}", "must populate the given metric source only")
                   for f in sorted(present) if f != expected]
    return causes


def _rules(rules: object, path: str) -> list[v.Cause]:
    if not isinstance(rules, dict):
        return []
    causes: list[v.Cause] = []
    window = rules.get("stabilizationWindowSeconds")
    if window is not None and window < 0:
        causes.append(v.invalid(f"{path}.stabilizationWindowSeconds", window, "must be greater than or equal to "
                                                                              "zero"))
    if window is not None and window > MAX_STABILIZATION_WINDOW_SECONDS:
        causes.append(v.invalid(f"{path}.stabilizationWindowSeconds", window,
                                f"must be less than or equal to {MAX_STABILIZATION_WINDOW_SECONDS}"))
    select = rules.get("selectPolicy")
    if select is not None and select not in SELECT_POLICIES:
        causes.append(v.not_supported(f"{path}.selectPolicy", select, SELECT_POLICIES))
    policies = rules.get("policies") or []
    if not policies:
        causes.append(v.required(f"{path}.policies", "must specify at least one Policy"))
    for i, p in enumerate(policies):
        pp = f"{path}.policies[{i}]"
        if p.get("type") not in POLICY_TYPES:
            causes.append(v.not_supported(f"{pp}.type", p.get("type") or "", POLICY_TYPES))
        if (p.get("value") or 0) <= 0:
            causes.append(v.invalid(f"{pp}.value", p.get("value") or 0, "must be greater than zero"))
        period = p.get("periodSeconds") or 0
        if period <= 0:
            causes.append(v.invalid(f"{pp}.periodSeconds", period, "must be greater than zero"))
        if period > MAX_PERIOD_SECONDS:
            causes.append(v.invalid(f"{pp}.periodSeconds", period,
                                    f"must be less than or equal to {MAX_PERIOD_SECONDS}"))
    return causes


def validate_spec(spec: Obj) -> list[v.Cause]:
    """ValidateHorizontalPodAutoscalerSpec on the v2 form."""
    causes = _cross_version_ref(spec.get("scaleTargetRef"), "spec.scaleTargetRef")
    low, high = spec.get("minReplicas"), spec.get("maxReplicas") or 0
    if low is not None and low < MIN_REPLICAS_LOWER_BOUND:
        causes.append(v.invalid("spec.minReplicas", low,
                                f"must be greater than or equal to {MIN_REPLICAS_LOWER_BOUND}"))
    if high < 1:
        causes.append(v.invalid("spec.maxReplicas", high, "must be greater than 0"))
    if low is not None and high < low:
        causes.append(v.invalid("spec.maxReplicas", high, "must be greater than or equal to `minReplicas`"))
    for i, m in enumerate(spec.get("metrics") or []):
        causes += _metric(m if isinstance(m, dict) else {}, f"spec.metrics[{i}]")
    behavior = spec.get("behavior")
    if isinstance(behavior, dict):
        causes += _rules(behavior.get("scaleUp"), "spec.behavior.scaleUp")
        causes += _rules(behavior.get("scaleDown"), "spec.behavior.scaleDown")
    return causes


def validate_status(status: Obj) -> list[v.Cause]:
    return [v.invalid(f"status.{f}", status[f], "must be greater than or equal to 0")
            for f in ("currentReplicas", "desiredReplicas") if (status.get(f) or 0) < 0]


class HorizontalPodAutoscalerStrategy(Strategy):
    """autoscaling/v2, the storage version."""
    status_fields = ("status",)
    status_subresource = True

    def canonicalize(self, obj: Obj) -> None:
        default_v2(obj)

    def v2(self, obj: Obj) -> Obj:
        """The object as v2 has it (the storage version: as it is)."""
        return obj

    def prepare_for_create(self, obj: Obj) -> None:
        obj["status"] = {"desiredReplicas": 0}

    def validate(self, obj: Obj) -> list[v.Cause]:
        hpa = self.v2(obj)
        return super().validate(obj) + validate_spec(hpa.get("spec") or {}) + \
            validate_status(hpa.get("status") or {})


class HorizontalPodAutoscalerV1Strategy(HorizontalPodAutoscalerStrategy):
    """autoscaling/v1: its own defaults, then everything on the v2 form."""

    def canonicalize(self, obj: Obj) -> None:
        spec = obj.get("spec")
        if isinstance(spec, dict) and spec.get("minReplicas") is None:
            spec["minReplicas"] = 1

    def v2(self, obj: Obj) -> Obj:
        return CONVERSION_V1.storage_object(obj)

    def prepare_for_create(self, obj: Obj) -> None:
        obj["status"] = {"currentReplicas": 0, "desiredReplicas": 0}
        annotations = (obj.get("metadata") or {}).get("annotations") or {}
        for key in (hpaconversion.CURRENT_METRICS, hpaconversion.CONDITIONS):
            annotations.pop(key, None)

    def prepare_for_update(self, obj: Obj, old: Obj) -> None:
        """The status is the old one's: in v1 that is status and the annotations that hold the rest of it."""
        super().prepare_for_update(obj, old)
        meta = obj.setdefault("metadata", {})
        annotations = dict(meta.get("annotations") or {})
        was = (old.get("metadata") or {}).get("annotations") or {}
        for key in (hpaconversion.CURRENT_METRICS, hpaconversion.CONDITIONS):
            annotations.pop(key, None)
            if key in was:
                annotations[key] = was[key]
        meta["annotations"] = annotations
