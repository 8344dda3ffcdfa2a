"""events.k8s.io/v1: Event, stored as core/v1 Events under the same key prefix (conversion.py)."""
from __future__ import annotations

from services.apiserver.printers import TableConvertor
from services.apiserver.resource import GroupVersion, ResourceInfo

from .strategies.events import CONVERSION, EventsV1Strategy
from .core import EVENT_TABLE, event_row

# kube prints both versions from the internal Event: the same columns and cells
EVENTS_V1_TABLE = TableConvertor(EVENT_TABLE.columns, lambda o: event_row(CONVERSION.storage_object(o)))

V1 = GroupVersion("events.k8s.io", "v1", 17750, 15, (
    ResourceInfo(
        group="events.k8s.io", version="v1", kind="Event", plural="events", singular="event", namespaced=True,
        key_prefix="/registry/events/", short_names=("ev",), strategy=EventsV1Strategy, table=EVENTS_V1_TABLE,
        conversion=CONVERSION,
        protobuf="k8s.io.api.events.v1.Event",
    ),
))

GROUP_VERSIONS = (V1,)
