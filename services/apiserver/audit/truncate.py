"""Truncation (kube's plugin/pkg/audit/truncate): an event larger than max_event_size loses its
requestObject and responseObject and is annotated audit.k8s.io/truncated: "true"; one still too large
is dropped and counted (plugin "truncate"); the events of a call are split into batches of at most
max_batch_size bytes."""
from __future__ import annotations

import orjson

from . import Backend, Event
from .metrics import plugin_error

PLUGIN = "truncate"
ANNOTATION = "audit.k8s.io/truncated"


class TruncateBackend:
    def __init__(self, delegate: Backend, max_event_size: int, max_batch_size: int) -> None:
        self.delegate, self.max_event, self.max_batch = delegate, max_event_size, max_batch_size
        self.name = f"{PLUGIN}<{delegate.name}>"

    def process(self, events: list[Event]) -> bool:
        ok, batch, batch_size = True, [], 0
        for ev in events:
            size = len(orjson.dumps(ev))
            if size > self.max_event:
                ev = {k: v for k, v in ev.items() if k not in ("requestObject", "responseObject")}
                ev["annotations"] = {**(ev.get("annotations") or {}), ANNOTATION: "true"}
                size = len(orjson.dumps(ev))
                if size > self.max_event:
                    plugin_error(PLUGIN, "event is too large even after truncating", [ev])
                    continue
            if batch and batch_size + size > self.max_batch:
                ok = self.delegate.process(batch) and ok
                batch, batch_size = [], 0
            batch.append(ev)
            batch_size += size
        if batch:
            ok = self.delegate.process(batch) and ok
        return ok

    async def start(self) -> None:
        await self.delegate.start()

    async def stop(self) -> None:
        await self.delegate.stop()
