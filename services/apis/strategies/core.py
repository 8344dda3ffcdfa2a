"""Strategies of the core/v1 kinds: ConfigMap, Secret, Namespace, ServiceAccount, Event."""
from __future__ import annotations

import base64
import datetime
from typing import Any, ClassVar

from services.apiserver import validation as v
from services.apiserver.registry.rest import Obj, Strategy, SubresourceStrategy

from . import base64_error

MAX_SECRET_SIZE = 1024 * 1024
IMMUTABLE_MSG = "field is immutable when `immutable` is set"


def _validate_keys(data: dict[str, Any], field: str) -> list[v.Cause]:
    return [v.invalid(f"{field}[{k}]", k, m) for k in data for m in v.is_config_map_key(k)]


def _immutable_update(obj: Obj, old: Obj, fields: tuple[str, ...]) -> list[v.Cause]:
    if old.get("immutable") is not True:
        return []
    causes = []
    if obj.get("immutable") is not True:
        causes.append(v.forbidden("immutable", IMMUTABLE_MSG))
    for f in fields:
        if (obj.get(f) or {}) != (old.get(f) or {}):
            causes.append(v.forbidden(f, IMMUTABLE_MSG))
    return causes


class ConfigMapStrategy(Strategy):
    def canonicalize(self, obj: Obj) -> None:
        for value in (obj.get("binaryData") or {}).values():
            if isinstance(value, str) and (err := base64_error(value)):
                raise self.cannot_handle(err)

    def validate(self, obj: Obj) -> list[v.Cause]:
        causes = super().validate(obj)
        data, binary = obj.get("data") or {}, obj.get("binaryData") or {}
        causes += _validate_keys(data, "data")
        causes += _validate_keys(binary, "binaryData")
        size = sum(len(k) + len(val.encode()) for k, val in data.items())
        for k, val in binary.items():
            if k in data:
                causes.append(v.invalid(f"data[{k}]", k, "duplicate of key present in binaryData"))
            size += len(k) + len(base64.b64decode(val))
        if size > MAX_SECRET_SIZE:
            causes.append(v.too_long("", MAX_SECRET_SIZE))
        return causes

    def validate_update(self, obj: Obj, old: Obj) -> list[v.Cause]:
        return super().validate_update(obj, old) + _immutable_update(obj, old, ("data", "binaryData"))


SECRET_TYPES_REQUIRED_KEYS = {
    "kubernetes.io/dockercfg": (".dockercfg",),
    "kubernetes.io/dockerconfigjson": (".dockerconfigjson",),
    "kubernetes.io/tls": ("tls.crt", "tls.key"),
}


class SecretStrategy(Strategy):
    def canonicalize(self, obj: Obj) -> None:
        if not obj.get("type"):
            obj["type"] = "Opaque"
        data = obj.get("data") or {}
        for value in data.values():
            if isinstance(value, str) and (err := base64_error(value)):
                raise self.cannot_handle(err)
        string_data = obj.pop("stringData", None)
        if string_data:
            data = dict(data)
            for k, s in string_data.items():
                data[k] = base64.b64encode(s.encode()).decode()
            obj["data"] = data

    def selectable_fields(self, obj: Obj) -> dict[str, str]:
        return super().selectable_fields(obj) | {"type": obj.get("type") or ""}

    def validate(self, obj: Obj) -> list[v.Cause]:
        causes = super().validate(obj)
        data = obj.get("data") or {}
        causes += _validate_keys(data, "data")
        size = sum(len(k) + len(base64.b64decode(val)) for k, val in data.items())
        if size > MAX_SECRET_SIZE:
            causes.append(v.too_long("data", MAX_SECRET_SIZE))
        typ = obj.get("type") or ""
        for key in SECRET_TYPES_REQUIRED_KEYS.get(typ, ()):
            if key not in data:
                causes.append(v.required(f"data[{key}]"))
        if typ == "kubernetes.io/service-account-token":
            ann = (obj.get("metadata") or {}).get("annotations") or {}
            if not ann.get("kubernetes.io/service-account.name"):
                causes.append(v.required("metadata.annotations[kubernetes.io/service-account.name]"))
        elif typ == "kubernetes.io/basic-auth":
            if "username" not in data and "password" not in data:
                causes.append(v.required("data[username]"))
                causes.append(v.required("data[password]"))
        elif typ == "kubernetes.io/ssh-auth" and "ssh-privatekey" not in data:
            causes.append(v.required("data[ssh-privatekey]"))
        return causes

    def validate_update(self, obj: Obj, old: Obj) -> list[v.Cause]:
        causes = super().validate_update(obj, old)
        if (obj.get("type") or "") != (old.get("type") or ""):
            causes.append(v.immutable("type", obj.get("type") or ""))
        return causes + _immutable_update(obj, old, ("data",))


class NamespaceStrategy(Strategy):
    status_fields = ("status",)

    def canonicalize(self, obj: Obj) -> None:
        meta = obj.setdefault("metadata", {})
        name = meta.get("name")
        if name:
            # SetDefaults_Namespace: the immutable name label selectors rely on.
            labels = meta.get("labels") or {}
            labels["kubernetes.io/metadata.name"] = name
            meta["labels"] = labels

    meta_field_labels: ClassVar[frozenset[str]] = frozenset({"metadata.name"})

    def selectable_fields(self, obj: Obj) -> dict[str, str]:
        return super().selectable_fields(obj) | {"status.phase": (obj.get("status") or {}).get("phase") or ""}

    def validate_name(self, obj: Obj, name: str) -> list[str]:
        return v.is_dns1123_label(name)

    def prepare_for_create(self, obj: Obj) -> None:
        obj["status"] = {"phase": "Active"}
        spec = obj.get("spec") or {}
        finalizers = list(spec.get("finalizers") or [])
        if "kubernetes" not in finalizers:
            finalizers.append("kubernetes")
        spec["finalizers"] = finalizers
        obj["spec"] = spec

    def prepare_for_update(self, obj: Obj, old: Obj) -> None:
        # Finalizers change only through /finalize, status only through /status.
        spec = dict(obj.get("spec") or {})
        old_fin = (old.get("spec") or {}).get("finalizers")
        if old_fin is None:
            spec.pop("finalizers", None)
        else:
            spec["finalizers"] = list(old_fin)
        obj["spec"] = spec
        super().prepare_for_update(obj, old)

    def validate(self, obj: Obj) -> list[v.Cause]:
        causes = super().validate(obj)
        for i, f in enumerate((obj.get("spec") or {}).get("finalizers") or []):
            causes += v.validate_finalizer_name(f, f"spec.finalizers[{i}]")
        return causes

    def for_subresource(self, subresource: str) -> Strategy:
        if subresource == "status":
            return SubresourceStrategy(self, ("status",))
        if subresource == "finalize":
            return SubresourceStrategy(self, ("spec",))
        return self


class ServiceAccountStrategy(Strategy):
    """Nothing beyond ObjectMeta; secrets merge by name in a strategic merge patch (its definition)."""


# Events ------------------------------------------------------------------------

REPORTING_INSTANCE_LENGTH_LIMIT = 128
ACTION_LENGTH_LIMIT = 128
REASON_LENGTH_LIMIT = 128
NOTE_LENGTH_LIMIT = 1024

_TIME_LAYOUT = "2006-01-02T15:04:05Z07:00"


def _normalize_time(value: Any, micro: bool) -> str:
    """metav1.Time / MicroTime as kube serializes them: UTC, seconds (or microseconds), "Z"."""
    try:
        t = datetime.datetime.fromisoformat(value)
        if t.tzinfo is None:
            raise ValueError(value)
    except (TypeError, ValueError):
        raise ValueError(f'parsing time "{value}" as "{_TIME_LAYOUT}": cannot parse "{value}" as "2006"') \
            from None
    t = t.astimezone(datetime.timezone.utc)
    return t.strftime("%Y-%m-%dT%H:%M:%S.%fZ" if micro else "%Y-%m-%dT%H:%M:%SZ")


class EventStrategy(Strategy):
    """pkg/registry/core/event: v1 Events get kube's legacy validation only (ValidateEventCreate/Update with
    requestVersion v1); ObjectMeta is validated afterwards by rest.BeforeCreate with path-segment names."""
    # metav1.Time fields (seconds); eventTime and series.lastObservedTime are MicroTime
    timestamp_fields: tuple[str, ...] = ("firstTimestamp", "lastTimestamp")

    def canonicalize(self, obj: Obj) -> None:
        try:
            for f in self.timestamp_fields:
                if obj.get(f):
                    obj[f] = _normalize_time(obj[f], micro=False)
            if obj.get("eventTime"):
                obj["eventTime"] = _normalize_time(obj["eventTime"], micro=True)
            series = obj.get("series")
            if isinstance(series, dict) and series.get("lastObservedTime"):
                series["lastObservedTime"] = _normalize_time(series["lastObservedTime"], micro=True)
        except ValueError as e:
            raise self.cannot_handle(str(e)) from None

    def selectable_fields(self, obj: Obj) -> dict[str, str]:
        """event.ToSelectableFields: source falls back to reportingComponent (ReportingController)."""
        ref = obj.get("involvedObject") or {}
        reporting = obj.get("reportingComponent") or ""
        return super().selectable_fields(obj) | {
            "involvedObject.kind": ref.get("kind") or "",
            "involvedObject.namespace": ref.get("namespace") or "",
            "involvedObject.name": ref.get("name") or "",
            "involvedObject.uid": ref.get("uid") or "",
            "involvedObject.apiVersion": ref.get("apiVersion") or "",
            "involvedObject.resourceVersion": ref.get("resourceVersion") or "",
            "involvedObject.fieldPath": ref.get("fieldPath") or "",
            "reason": obj.get("reason") or "",
            "reportingComponent": reporting,
            "source": (obj.get("source") or {}).get("component") or reporting,
            "type": obj.get("type") or "",
        }

    def validate_name(self, obj: Obj, name: str) -> list[str]:
        return v.is_valid_path_segment_name(name)

    def validate_event(self, obj: Obj) -> list[v.Cause]:
        """legacyValidateEvent for requestVersion v1 (no type/series/eventTime checks: those are strict,
        events.k8s.io-only validation)."""
        causes: list[v.Cause] = []
        ns = (obj.get("metadata") or {}).get("namespace") or ""
        ref_ns = (obj.get("involvedObject") or {}).get("namespace") or ""
        mismatch = v.invalid("involvedObject.namespace", ref_ns, "does not match event.namespace")
        if not obj.get("eventTime"):
            if (not ref_ns and ns not in ("", "default")) or (ref_ns and ns != ref_ns):
                causes.append(mismatch)
        else:
            if not ref_ns and ns not in ("default", "kube-system"):
                causes.append(mismatch)
            controller = obj.get("reportingComponent") or ""
            if not controller:
                causes.append(v.required("reportingComponent"))
            causes += [v.invalid("reportingComponent", controller, m) for m in v.is_qualified_name(controller)]
            for field, limit in (("reportingInstance", REPORTING_INSTANCE_LENGTH_LIMIT),
                                 ("action", ACTION_LENGTH_LIMIT), ("reason", REASON_LENGTH_LIMIT)):
                value = obj.get(field) or ""
                if not value:
                    causes.append(v.required(field))
                if len(value) > limit:
                    causes.append(v.invalid(field, "", f"can have at most {limit} characters"))
            if len(obj.get("message") or "") > NOTE_LENGTH_LIMIT:
                causes.append(v.invalid("message", "", f"can have at most {NOTE_LENGTH_LIMIT} characters"))
        causes += [v.invalid("namespace", ns, m) for m in v.is_dns1123_subdomain(ns)]
        return causes

    def validate(self, obj: Obj) -> list[v.Cause]:
        # kube returns the strategy's errors alone, and checks ObjectMeta only when they pass.
        return self.validate_event(obj) or super().validate(obj)

    def validate_update(self, obj: Obj, old: Obj) -> list[v.Cause]:
        return self.validate_event(obj) or super().validate_update(obj, old)


class ResourceQuotaStrategy(Strategy):
    """core/v1 ResourceQuota (kube's registry/core/resourcequota): status is the quota controller's."""
    status_fields = ("status",)

    def prepare_for_create(self, obj: Obj) -> None:
        obj.pop("status", None)

    def validate(self, obj: Obj) -> list[v.Cause]:
        from services.common import quantity

        causes = super().validate(obj)
        spec = obj.get("spec") or {}
        for field in ("spec.hard", "status.hard", "status.used"):
            top, _, key = field.partition(".")
            for name, value in ((obj.get(top) or {}).get(key) or {}).items():
                causes += [v.invalid(f"{field}[{name}]", name, m) for m in v.is_qualified_name(name)]
                try:
                    if quantity.parse(value) < 0:
                        causes.append(v.invalid(f"{field}[{name}]", value, "must be greater than or equal to 0"))
                except ValueError as e:
                    causes.append(v.invalid(f"{field}[{name}]", value, str(e)))
        scopes = spec.get("scopes") or []
        allowed = ["Terminating", "NotTerminating", "BestEffort", "NotBestEffort", "PriorityClass",
                   "CrossNamespacePodAffinity", "VolumeAttributesClass"]
        for i, sc in enumerate(scopes):
            if sc not in allowed:
                causes.append(v.not_supported(f"spec.scopes[{i}]", sc, allowed))
        return causes

    status_subresource = True


# Nodes -------------------------------------------------------------------------

TAINT_EFFECTS = ["NoSchedule", "PreferNoSchedule", "NoExecute"]


class NodeStrategy(Strategy):
    """core/v1 Node (kube's pkg/registry/core/node): cluster-scoped; status is the kubelet's, changed through
    /status (an update of the node keeps it, a status update keeps the spec). Covered: SetDefaults_NodeStatus
    (allocatable defaults to capacity), the name, taints (key, effect), podCIDRs and the update rules for
    podCIDRs and providerID."""
    status_fields = ("status",)

    def canonicalize(self, obj: Obj) -> None:
        status = obj.get("status")
        if isinstance(status, dict) and status.get("capacity") and status.get("allocatable") is None:
            status["allocatable"] = dict(status["capacity"])

    meta_field_labels: ClassVar[frozenset[str]] = frozenset({"metadata.name"})

    def selectable_fields(self, obj: Obj) -> dict[str, str]:
        unschedulable = bool((obj.get("spec") or {}).get("unschedulable"))
        return super().selectable_fields(obj) | {"spec.unschedulable": "true" if unschedulable else "false"}

    def prepare_for_create(self, obj: Obj) -> None:
        (obj.get("spec") or {}).pop("configSource", None)
        (obj.get("status") or {}).pop("config", None)

    def validate(self, obj: Obj) -> list[v.Cause]:
        import ipaddress

        causes = super().validate(obj)
        spec = obj.get("spec") or {}
        for i, taint in enumerate(spec.get("taints") or []):
            p = f"spec.taints[{i}]"
            key = taint.get("key") or ""
            causes += [v.invalid(f"{p}.key", key, m) for m in v.is_qualified_name(key)]
            if taint.get("value"):
                causes += [v.invalid(f"{p}.value", taint["value"], m) for m in v.is_valid_label_value(taint["value"])]
            effect = taint.get("effect") or ""
            if not effect:
                causes.append(v.required(f"{p}.effect"))
            elif effect not in TAINT_EFFECTS:
                causes.append(v.not_supported(f"{p}.effect", effect, TAINT_EFFECTS))
        cidrs = spec.get("podCIDRs") or []
        for i, cidr in enumerate(cidrs):
            try:
                ipaddress.ip_network(cidr, strict=False)
                if "/" not in cidr:
                    raise ValueError(cidr)
            except (TypeError, ValueError):
                causes.append(v.invalid(f"spec.podCIDRs[{i}]", cidr,
                                        "must be a valid CIDR value, (e.g. 10.9.8.0/24 or 2001:db8::/64)"))
        if len(cidrs) > 2:
            causes.append(v.invalid("spec.podCIDRs", spec.get("podCIDR") or "", "may specify no more than one CIDR "
                                                                              "for each IP family"))
        return causes

    def validate_update(self, obj: Obj, old: Obj) -> list[v.Cause]:
        causes = super().validate_update(obj, old)
        spec, old_spec = obj.get("spec") or {}, old.get("spec") or {}
        if old_spec.get("podCIDRs") and spec.get("podCIDRs") != old_spec.get("podCIDRs"):
            causes.append(v.forbidden("spec.podCIDRs", 'node updates may not change podCIDR except from "" to valid'))
        if old_spec.get("providerID") and spec.get("providerID") != old_spec.get("providerID"):
            causes.append(v.forbidden("spec.providerID",
                                      'node updates may not change providerID except from "" to valid'))
        return causes

    status_subresource = True


# LimitRanges -------------------------------------------------------------------

LIMIT_TYPES = ("Container", "Pod", "PersistentVolumeClaim")


# ValidateLimitRange's order checks of one resource, in kube's order: (the part that may not exceed, the part
# it is held against, the field reported, the part whose value the cause shows, kube's message)
_LIMIT_ORDER = (
    ("min", "max", "min", "min", "min value {low} is greater than max value {high}"),
    ("min", "defaultRequest", "defaultRequest", "defaultRequest",
     "min value {low} is greater than default request value {high}"),
    ("defaultRequest", "max", "defaultRequest", "defaultRequest",
     "default request value {low} is greater than max value {high}"),
    ("defaultRequest", "default", "defaultRequest", "defaultRequest",
     "default request value {low} is greater than default limit value {high}"),
    ("min", "default", "default", "min", "min value {low} is greater than default value {high}"),
    ("default", "max", "default", "max", "default value {low} is greater than max value {high}"),
)


class LimitRangeStrategy(Strategy):
    """core/v1 LimitRange (kube's pkg/registry/core/limitrange). Covered: SetDefaults_LimitRangeItem (for
    Container items: default from max, defaultRequest from default then min) and ValidateLimitRange's rules
    on types (unique), resource names, quantities and their order (min <= defaultRequest <= default <= max,
    maxLimitRequestRatio >= 1), with kube's messages. Quantities are kept as written (kube would print
    them canonically). The LimitRanger admission plugin (defaults on Pods) is not here: Pods are another
    engineer's kind."""

    def canonicalize(self, obj: Obj) -> None:
        for item in (obj.get("spec") or {}).get("limits") or []:
            if not isinstance(item, dict) or item.get("type") != "Container":
                continue
            default = dict(item.get("default") or {})
            request = dict(item.get("defaultRequest") or {})
            for k, val in (item.get("max") or {}).items():
                default.setdefault(k, val)
            for k, val in default.items():
                request.setdefault(k, val)
            for k, val in (item.get("min") or {}).items():
                request.setdefault(k, val)
            if default:
                item["default"] = default
            if request:
                item["defaultRequest"] = request

    def validate(self, obj: Obj) -> list[v.Cause]:
        from services.common import quantity

        causes = super().validate(obj)
        seen: set[str] = set()
        for i, item in enumerate((obj.get("spec") or {}).get("limits") or []):
            p = f"spec.limits[{i}]"
            typ = item.get("type") or ""
            if typ in seen:
                causes.append(v.duplicate(f"{p}.type", typ))
            seen.add(typ)
            parsed: dict[str, dict[str, Any]] = {}
            for part in ("max", "min", "default", "defaultRequest", "maxLimitRequestRatio"):
                parsed[part] = {}
                for name, value in (item.get(part) or {}).items():
                    causes += [v.invalid(f"{p}.{part}[{name}]", name, m) for m in v.is_qualified_name(name)]
                    try:
                        q = quantity.parse(value)
                    except ValueError as e:
                        causes.append(v.invalid(f"{p}.{part}[{name}]", value, str(e)))
                        continue
                    if q < 0:
                        causes.append(v.invalid(f"{p}.{part}[{name}]", value, "must be greater than or equal to 0"))
                    parsed[part][name] = (q, value)
            if typ == "PersistentVolumeClaim":
                for part in ("default", "defaultRequest"):
                    if item.get(part):
                        causes.append(v.forbidden(f"{p}.{part}", "may not be specified when `type` is "
                                                                 "'PersistentVolumeClaim'"))
            keys = set().union(*(parsed[k] for k in parsed))
            for k in sorted(keys):
                for low, high, part, shown, text in _LIMIT_ORDER:
                    a, b = parsed[low].get(k), parsed[high].get(k)
                    if a and b and a[0] > b[0]:
                        causes.append(v.invalid(f"{p}.{part}[{k}]", parsed[shown][k][1],
                                                text.format(low=a[1], high=b[1])))
                ratio = parsed["maxLimitRequestRatio"].get(k)
                if ratio and ratio[0] < 1:
                    causes.append(v.invalid(f"{p}.maxLimitRequestRatio[{k}]", ratio[1],
                                            f"ratio {ratio[1]} is less than 1"))
        return causes
