"""client-go's event recorder, in small: a controller's Event about an object (core/v1, in the object's
namespace, `default` for a cluster-scoped one), named <object>.<hex nanoseconds>; the same event again
(object, type, reason, message) counts up the one already written, as client-go's EventCorrelator does. A
failed write is logged and dropped: events are best effort."""
from __future__ import annotations

import datetime
import logging
import time
from typing import Any

from services.common.errors import APIError, NotFound

from .client import Client, Resource

log = logging.getLogger(__name__)

Obj = dict[str, Any]
EVENTS = Resource("", "v1", "events", "Event", True, frozenset())
MAX_REMEMBERED = 4096  # client-go's LRU of recent events


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


class EventRecorder:
    def __init__(self, client: Client, component: str) -> None:
        self.client, self.component = client, component
        self._seen: dict[tuple[str, str, str, str], tuple[str, str, int]] = {}  # -> (namespace, name, count)

    async def event(self, obj: Obj, typ: str, reason: str, message: str) -> None:
        meta = obj.get("metadata") or {}
        namespace = meta.get("namespace") or "default"
        key = (meta.get("uid", ""), typ, reason, message)
        now = _now()
        try:
            seen = self._seen.get(key)
            if seen is not None:
                ns, name, count = seen
                try:
                    await self.client.patch(EVENTS, ns, name, {"count": count + 1, "lastTimestamp": now})
                    self._seen[key] = (ns, name, count + 1)
                    return
                except NotFound:
                    pass  # expired: written anew
            name = f"{meta.get('name', '')}.{time.time_ns():x}"
            await self.client.create(EVENTS, namespace, {
                "apiVersion": "v1", "kind": "Event", "metadata": {"name": name, "namespace": namespace},
                "involvedObject": {"kind": obj.get("kind", ""), "apiVersion": obj.get("apiVersion", ""),
                                   "name": meta.get("name", ""), "namespace": meta.get("namespace", ""),
                                   "uid": meta.get("uid", ""), "resourceVersion": meta.get("resourceVersion", "")},
                "reason": reason, "message": message, "type": typ, "count": 1,
                "firstTimestamp": now, "lastTimestamp": now,
                "source": {"component": self.component}, "reportingComponent": self.component,
            })
            if len(self._seen) >= MAX_REMEMBERED:
                self._seen.pop(next(iter(self._seen)))
            self._seen[key] = (namespace, name, 1)
        except APIError as e:
            log.info("event %s on %s/%s dropped: %s", reason, namespace, meta.get("name"), e)
