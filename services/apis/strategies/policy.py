"""Strategies of policy/v1: PodDisruptionBudget (kube's pkg/registry/policy/poddisruptionbudget).

Covered: status reset on create and kept on update (the disruption controller owns it through /status),
generation bumped on spec changes, ValidatePodDisruptionBudgetSpec (minAvailable and maxUnavailable not
both set, each a non-negative integer or a percentage up to 100%, the label selector,
unhealthyPodEvictionPolicy's values) and the status counters' non-negativity.
"""
from __future__ import annotations

import re
from typing import Any

import orjson

from services.apiserver import validation as v
from services.apiserver.registry.rest import Obj, Strategy

from .rbac import validate_label_selector

_PERCENT = re.compile(r"^[0-9]+%$")
PERCENT_MSG = ("a valid percent string must be a numeric string followed by an ending '%' (e.g. '1%',  or "
               "'93%', regex used for validation is '[0-9]+%')")
EVICTION_POLICIES = ["AlwaysAllow", "IfHealthyBudget"]
NON_NEGATIVE = "must be greater than or equal to 0"


def validate_positive_int_or_percent(value: Any, field: str) -> list[v.Cause]:
    """ValidatePositiveIntOrPercent and IsNotMoreThan100Percent."""
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        return [v.invalid_go(field, v.int_or_string_go(value), "must be an integer or percentage (e.g '5%')")]
    if isinstance(value, int):
        return [v.invalid(field, value, NON_NEGATIVE)] if value < 0 else []
    rendered = v.int_or_string_go(value)
    if not _PERCENT.match(value):
        return [v.invalid_go(field, rendered, PERCENT_MSG)]
    if int(value[:-1]) > 100:
        return [v.invalid_go(field, rendered, "must not be greater than 100%")]
    return []


class PodDisruptionBudgetStrategy(Strategy):
    status_fields = ("status",)
    spec_fields = ("spec",)

    def prepare_for_create(self, obj: Obj) -> None:
        obj["status"] = {"currentHealthy": 0, "desiredHealthy": 0, "disruptionsAllowed": 0, "expectedPods": 0}

    def validate(self, obj: Obj) -> list[v.Cause]:
        causes = super().validate(obj)
        spec = obj.get("spec") or {}
        if spec.get("minAvailable") is not None and spec.get("maxUnavailable") is not None:
            # kube prints the spec with Go's %#v (pointers included); the value shown here is its JSON
            causes.append(v.invalid_go("spec", orjson.dumps(spec).decode(),
                                       "minAvailable and maxUnavailable cannot be both set"))
        for f in ("minAvailable", "maxUnavailable"):
            if spec.get(f) is not None:
                causes += validate_positive_int_or_percent(spec[f], f"spec.{f}")
        if spec.get("selector") is not None:
            causes += validate_label_selector(spec["selector"], "spec.selector")
        policy = spec.get("unhealthyPodEvictionPolicy")
        if policy is not None and policy not in EVICTION_POLICIES:
            causes.append(v.not_supported("spec.unhealthyPodEvictionPolicy", policy, EVICTION_POLICIES))
        status = obj.get("status") or {}
        for f in ("disruptionsAllowed", "currentHealthy", "desiredHealthy", "expectedPods"):
            n = status.get(f, 0)
            if isinstance(n, int) and n < 0:
                causes.append(v.invalid(f"status.{f}", n, NON_NEGATIVE))
        return causes

    status_subresource = True
