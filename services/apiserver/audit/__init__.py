"""Audit backends as kube-apiserver's (k8s.io/apiserver/plugin/pkg/audit): where the audit events the
policy keeps go. A backend takes events (audit.k8s.io/v1 Event objects as dicts) with process(),
answering whether they were stored, and is started and stopped (flushed) with the server.

- log.py: one JSON line per event to a file, rotated (--audit-log-*);
- webhook.py: audit.k8s.io/v1 EventList batches POSTed to a webhook (--audit-webhook-*);
- buffered.py: batch mode, a buffer flushed by size or wait, events dropped (and counted) when full;
- truncate.py: events and batches kept under a size;
- options.py: kube's flags, and the chain they build (mode, truncation, the union of both backends);
- metrics.py: apiserver_audit_event_total, apiserver_audit_error_total, ...
"""
from __future__ import annotations

from typing import Any, Protocol

Event = dict[str, Any]


class Backend(Protocol):
    name: str

    def process(self, events: list[Event]) -> bool:
        """Take events; False when they were not stored (blocking-strict then fails the request)."""

    async def start(self) -> None: ...

    async def stop(self) -> None:
        """Deliver what is buffered, then close."""


class IgnoreErrors:
    """Blocking mode: the delegate's failures are counted and logged by it, never fail the request."""

    def __init__(self, delegate: Backend) -> None:
        self.delegate = delegate
        self.name = delegate.name

    def process(self, events: list[Event]) -> bool:
        self.delegate.process(events)
        return True

    async def start(self) -> None:
        await self.delegate.start()

    async def stop(self) -> None:
        await self.delegate.stop()


class Union:
    """Several backends: every event to each of them (kube's union backend)."""

    def __init__(self, backends: list[Backend]) -> None:
        self.backends = backends
        self.name = "union[" + ",".join(b.name for b in backends) + "]"

    def process(self, events: list[Event]) -> bool:
        ok = True
        for b in self.backends:
            ok = b.process(events) and ok
        return ok

    async def start(self) -> None:
        for b in self.backends:
            await b.start()

    async def stop(self) -> None:
        for b in self.backends:
            await b.stop()
