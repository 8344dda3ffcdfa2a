"""events.k8s.io/v1 Event (kube's pkg/registry/core/event serves both groups from one storage).

The object is stored as a core/v1 Event (conversion.py; kube's Convert_v1_Event_To_core_Event and back):
regarding <-> involvedObject, note <-> message, reportingController <-> reportingComponent, deprecatedSource
<-> source, deprecatedFirstTimestamp/deprecatedLastTimestamp <-> firstTimestamp/lastTimestamp,
deprecatedCount <-> count; the other fields (eventTime, series, action, reason, related, reportingInstance,
type) have the same names. Validation is kube's ValidateEventCreate/Update for a request in
events.k8s.io/v1: the legacy rules, then the strict ones (eventTime required, type Normal or Warning, the
deprecated fields unset on create, series count and lastObservedTime, the immutable fields on update).
Field selectors name the core/v1 fields (involvedObject.name, source, ...), as the stored objects carry them.
"""
from __future__ import annotations

from services.apiserver import validation as v
from services.apiserver.conversion import renamed
from services.apiserver.registry.rest import Obj

from .core import EventStrategy

TO_CORE = {"regarding": "involvedObject", "note": "message", "reportingController": "reportingComponent",
           "deprecatedSource": "source", "deprecatedFirstTimestamp": "firstTimestamp",
           "deprecatedLastTimestamp": "lastTimestamp", "deprecatedCount": "count"}
CONVERSION = renamed("v1", "Event", TO_CORE)
EVENT_TYPES = ("Normal", "Warning")
# ValidateEventUpdate's immutable fields, by their events.k8s.io/v1 names and the paths kube reports
IMMUTABLE = (("regarding", "involvedObject"), ("reason", "reason"), ("note", "message"),
             ("deprecatedSource", "source"), ("deprecatedFirstTimestamp", "firstTimestamp"),
             ("deprecatedLastTimestamp", "lastTimestamp"), ("deprecatedCount", "count"), ("type", "type"),
             ("eventTime", "eventTime"), ("action", "action"), ("related", "related"),
             ("reportingController", "reportingController"), ("reportingInstance", "reportingInstance"))


def _series(obj: Obj) -> list[v.Cause]:
    series = obj.get("series")
    if series is None:
        return []
    causes = []
    if (series.get("count") or 0) < 2:
        causes.append(v.invalid("series.count", "", "should be at least 2"))
    if not series.get("lastObservedTime"):
        causes.append(v.required("series.lastObservedTime"))
    return causes


class EventsV1Strategy(EventStrategy):
    timestamp_fields = ("deprecatedFirstTimestamp", "deprecatedLastTimestamp")

    def selectable_fields(self, obj: Obj) -> dict[str, str]:
        return super().selectable_fields(CONVERSION.storage_object(obj))

    def validate_name(self, obj: Obj, name: str) -> list[str]:
        return v.is_dns1123_subdomain(name)

    def validate(self, obj: Obj) -> list[v.Cause]:
        causes = self.validate_event(CONVERSION.storage_object(obj))
        causes += v.validate_object_meta(obj.get("metadata") or {}, True, lambda n: self.validate_name(obj, n))
        causes += _series(obj)
        if not obj.get("eventTime"):
            causes.append(v.required("eventTime"))
        if obj.get("type") not in EVENT_TYPES:
            causes.append(v.invalid("type", "", f"has invalid value: {obj.get('type') or ''}"))
        for served, path in (("deprecatedFirstTimestamp", "firstTimestamp"),
                             ("deprecatedLastTimestamp", "lastTimestamp"), ("deprecatedCount", "count")):
            if obj.get(served):
                causes.append(v.invalid(path, "", "needs to be unset"))
        source = obj.get("deprecatedSource") or {}
        if source.get("component") or source.get("host"):
            causes.append(v.invalid("source", "", "needs to be unset"))
        return causes

    def validate_update(self, obj: Obj, old: Obj) -> list[v.Cause]:
        causes = self.validate_event(CONVERSION.storage_object(obj))
        causes += v.validate_object_meta_update(obj.get("metadata") or {}, old.get("metadata") or {})
        if obj.get("series") != old.get("series"):
            causes += _series(obj)
        for served, path in IMMUTABLE:
            if obj.get(served) != old.get(served):
                causes.append(v.immutable(path, obj.get(served) if isinstance(obj.get(served), str) else ""))
        return causes
