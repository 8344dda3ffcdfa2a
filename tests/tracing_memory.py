"""Spans of one process kept in memory (the OpenTelemetry SDK's InMemorySpanExporter) for unit tests of the
span helpers: `sampled()` opens a sampled trace as a trusted caller's traceparent would."""
from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from services.common import tracing

TRACE_ID = "0af7651916cd43dd8448eb211c80319c"
SAMPLED = f"00-{TRACE_ID}-b7ad6b7169203331-01"
UNSAMPLED = f"00-{TRACE_ID}-b7ad6b7169203331-00"


class Spans:
    def __init__(self) -> None:
        self.exporter = InMemorySpanExporter()

    def finished(self) -> list[Any]:
        tracing.flush()
        return list(self.exporter.get_finished_spans())

    def named(self, name: str) -> list[Any]:
        return [s for s in self.finished() if s.name == name]

    def clear(self) -> None:
        tracing.flush()
        self.exporter.clear()


@contextlib.contextmanager
def started() -> Iterator[Spans]:
    """Tracing on in this process at rate 0 (only a sampled parent samples), exporting to memory."""
    spans = Spans()
    tracing.start("test", tracing.TracingConfiguration("localhost:4317", 0), exporter=spans.exporter)
    try:
        yield spans
    finally:
        tracing.shutdown()


@contextlib.contextmanager
def sampled(traceparent: str = SAMPLED) -> Iterator[Any]:
    """A request's root span continuing `traceparent` (a trusted caller's)."""
    with tracing.root("GET", traceparent, trusted=True) as root:
        yield root
