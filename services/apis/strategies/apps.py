"""apps/v1 Deployment, ReplicaSet, StatefulSet, DaemonSet (kube's registry/apps): apps/v1 defaulting
(SetDefaults_Deployment and kin) and validation (ValidateDeployment and kin, a subset: selector, template,
replicas, strategies and their enums, immutable selectors); ControllerRevision (ValidateControllerRevision:
data required, revision not negative; on update data is immutable)."""
from __future__ import annotations

import re
from typing import ClassVar

import orjson

from services.apiserver import validation as v
from services.apiserver.registry.rest import Obj, Strategy

from .workload import WorkloadStrategy, non_negative

_PERCENT = re.compile(r"^[0-9]+%$")
INT_OR_PERCENT = "a valid percent string must be a numeric string followed by an ending '%' (e.g. '1%',  or '93%', " \
                 "regex used for validation is '[0-9]+%')"


def _int_or_percent(value: object, path: str) -> list[v.Cause]:
    """ValidatePositiveIntOrPercent and IsValidPercent; percents above 100% refused."""
    if isinstance(value, str):
        if not _PERCENT.match(value):
            return [v.invalid(path, value, INT_OR_PERCENT)]
        if int(value[:-1]) > 100:
            return [v.invalid(path, value, "must not be greater than 100%")]
    elif isinstance(value, int) and value < 0:
        return [v.invalid(path, value, "must be greater than or equal to 0")]
    return []


def _default_rolling_update(spec: Obj, key: str, **rolling: object) -> None:
    """SetDefaults of an update strategy: type RollingUpdate, and its rollingUpdate's fields when it is one."""
    strategy = spec.get(key)
    if not isinstance(strategy, dict):
        strategy = spec[key] = {}
    strategy.setdefault("type", "RollingUpdate")
    if strategy["type"] == "RollingUpdate":
        ru = strategy.get("rollingUpdate")
        if not isinstance(ru, dict):
            ru = strategy["rollingUpdate"] = {}
        for field, value in rolling.items():
            ru.setdefault(field, value)


def _is_zero(value: object) -> bool:
    return value in (0, "0%", "0")


def _validate_rolling_update(ru: Obj, path: str) -> list[v.Cause]:
    """A Deployment's or DaemonSet's rollingUpdate: maxUnavailable and maxSurge, never both 0."""
    causes = _int_or_percent(ru.get("maxUnavailable"), f"{path}.maxUnavailable")
    causes += _int_or_percent(ru.get("maxSurge"), f"{path}.maxSurge")
    if _is_zero(ru.get("maxUnavailable")) and _is_zero(ru.get("maxSurge")):
        causes.append(v.invalid(f"{path}.maxUnavailable", ru.get("maxUnavailable"),
                                "may not be 0 when `maxSurge` is 0"))
    return causes


class DeploymentStrategy(WorkloadStrategy):
    selector_kind = "deployment"

    def canonicalize(self, obj: Obj) -> None:
        spec = obj.get("spec")
        if isinstance(spec, dict):
            spec.setdefault("replicas", 1)
            _default_rolling_update(spec, "strategy", maxUnavailable="25%", maxSurge="25%")
            spec.setdefault("revisionHistoryLimit", 10)
            spec.setdefault("progressDeadlineSeconds", 600)
        super().canonicalize(obj)

    def spec_changed(self, obj: Obj, old: Obj) -> bool:
        """A Deployment's generation also moves with its annotations (rollback's)."""
        return super().spec_changed(obj, old) or \
            (obj.get("metadata") or {}).get("annotations") != (old.get("metadata") or {}).get("annotations")

    def validate_spec(self, obj: Obj) -> list[v.Cause]:
        causes = super().validate_spec(obj)
        spec = obj.get("spec") or {}
        strategy = spec.get("strategy") or {}
        typ = strategy.get("type") or ""
        ru = strategy.get("rollingUpdate")
        if typ not in ("Recreate", "RollingUpdate"):
            causes.append(v.not_supported("spec.strategy.type", typ, ["Recreate", "RollingUpdate"]))
        elif typ == "Recreate" and ru is not None:
            causes.append(v.forbidden("spec.strategy.rollingUpdate",
                                      "may not be specified when strategy `type` is 'Recreate'"))
        elif typ == "RollingUpdate" and isinstance(ru, dict):
            causes += _validate_rolling_update(ru, "spec.strategy.rollingUpdate")
        causes += non_negative(obj, "progressDeadlineSeconds")
        pds, mrs = spec.get("progressDeadlineSeconds"), spec.get("minReadySeconds") or 0
        if isinstance(pds, int) and pds <= mrs:
            causes.append(v.invalid("spec.progressDeadlineSeconds", pds, "must be greater than minReadySeconds"))
        return causes


class ReplicaSetStrategy(WorkloadStrategy):
    selectable_status: ClassVar[dict[str, str]] = {"status.replicas": "replicas"}
    selector_kind = "deployment"  # ValidateReplicaSetSpec reuses the deployment's wording
    initial_status: ClassVar[Obj] = {"replicas": 0}

    def canonicalize(self, obj: Obj) -> None:
        spec = obj.get("spec")
        if isinstance(spec, dict):
            spec.setdefault("replicas", 1)
        super().canonicalize(obj)


STATEFULSET_FORBIDDEN = ("updates to statefulset spec for fields other than 'replicas', 'ordinals', 'template', "
                         "'updateStrategy', 'revisionHistoryLimit', 'persistentVolumeClaimRetentionPolicy' and "
                         "'minReadySeconds' are forbidden")
_STS_MUTABLE = ("replicas", "ordinals", "template", "updateStrategy", "revisionHistoryLimit",
                "persistentVolumeClaimRetentionPolicy", "minReadySeconds")


class StatefulSetStrategy(WorkloadStrategy):
    selector_kind = "statefulset"
    initial_status: ClassVar[Obj] = {"replicas": 0, "availableReplicas": 0}

    def canonicalize(self, obj: Obj) -> None:
        spec = obj.get("spec")
        if isinstance(spec, dict):
            spec.setdefault("replicas", 1)
            spec.setdefault("podManagementPolicy", "OrderedReady")
            _default_rolling_update(spec, "updateStrategy", partition=0)
            spec.setdefault("revisionHistoryLimit", 10)
            policy = spec.get("persistentVolumeClaimRetentionPolicy")
            if not isinstance(policy, dict):
                policy = spec["persistentVolumeClaimRetentionPolicy"] = {}
            policy.setdefault("whenDeleted", "Retain")
            policy.setdefault("whenScaled", "Retain")
            for pvc in spec.get("volumeClaimTemplates") or []:
                if isinstance(pvc, dict):
                    pvc_spec = pvc.setdefault("spec", {})
                    if isinstance(pvc_spec, dict):
                        pvc_spec.setdefault("volumeMode", "Filesystem")
                    pvc.setdefault("status", {"phase": "Pending"})
        super().canonicalize(obj)

    def validate_spec(self, obj: Obj) -> list[v.Cause]:
        causes = super().validate_spec(obj)
        spec = obj.get("spec") or {}
        policy = spec.get("podManagementPolicy") or ""
        if policy not in ("OrderedReady", "Parallel"):
            causes.append(v.not_supported("spec.podManagementPolicy", policy, ["OrderedReady", "Parallel"]))
        typ = (spec.get("updateStrategy") or {}).get("type") or ""
        if typ not in ("OnDelete", "RollingUpdate"):
            causes.append(v.not_supported("spec.updateStrategy.type", typ, ["OnDelete", "RollingUpdate"]))
        elif typ == "OnDelete" and (spec.get("updateStrategy") or {}).get("rollingUpdate") is not None:
            causes.append(v.invalid("spec.updateStrategy.rollingUpdate", "",
                                    "only allowed for updateStrategy 'RollingUpdate'"))
        return causes

    def validate_update(self, obj: Obj, old: Obj) -> list[v.Cause]:
        causes = super().validate_update(obj, old)
        spec, old_spec = dict(obj.get("spec") or {}), dict(old.get("spec") or {})
        for k in _STS_MUTABLE + ("selector",):
            spec.pop(k, None)
            old_spec.pop(k, None)
        if spec != old_spec:
            causes.append(v.forbidden("spec", STATEFULSET_FORBIDDEN))
        return causes


class DaemonSetStrategy(WorkloadStrategy):
    selector_kind = "daemonset"
    initial_status: ClassVar[Obj] = {"currentNumberScheduled": 0, "desiredNumberScheduled": 0, "numberMisscheduled": 0,
                      "numberReady": 0}

    def canonicalize(self, obj: Obj) -> None:
        spec = obj.get("spec")
        if isinstance(spec, dict):
            _default_rolling_update(spec, "updateStrategy", maxUnavailable=1, maxSurge=0)
            spec.setdefault("revisionHistoryLimit", 10)
        super().canonicalize(obj)

    def validate_spec(self, obj: Obj) -> list[v.Cause]:
        causes = super().validate_spec(obj)
        us = (obj.get("spec") or {}).get("updateStrategy") or {}
        typ = us.get("type") or ""
        if typ not in ("OnDelete", "RollingUpdate"):
            causes.append(v.not_supported("spec.updateStrategy.type", typ, ["OnDelete", "RollingUpdate"]))
        elif typ == "RollingUpdate" and isinstance(us.get("rollingUpdate"), dict):
            causes += _validate_rolling_update(us["rollingUpdate"], "spec.updateStrategy.rollingUpdate")
        return causes


class ControllerRevisionStrategy(Strategy):
    def validate(self, obj: Obj) -> list[v.Cause]:
        causes = super().validate(obj)
        if obj.get("data") is None:
            causes.append(v.required("data", "data is mandatory"))
        revision = obj.get("revision") or 0
        if revision < 0:
            causes.append(v.invalid("revision", revision, "must be greater than or equal to 0"))
        return causes

    def validate_update(self, obj: Obj, old: Obj) -> list[v.Cause]:
        causes = super().validate_update(obj, old)
        if obj.get("data") != old.get("data"):
            causes.append(v.invalid_go("data", "runtime.RawExtension{Raw:" + orjson.dumps(obj.get("data")).decode()
                                       + "}", "field is immutable"))
        return causes
