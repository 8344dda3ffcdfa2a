"""/metrics as kube names it: prometheus_client's exposition plus the counters whose kube name has no
`_total` (apiserver_admission_webhook_rejection_count, ..._fail_open_count) or whose stem is another
family's name (aggregator_unavailable_apiservice_total beside the gauge aggregator_unavailable_apiservice).

prometheus_client renders every counter's samples and TYPE line as `<name>_total`, so a Counter named
after kube's `..._count` would be served as `..._count_total` and dashboards written for kube would find
nothing. A KubeCounter keeps its values itself and renders its family under the exact name, as kube's
component-base metrics do."""
from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterable, Sequence

from prometheus_client import REGISTRY, CollectorRegistry, generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.openmetrics import exposition as om
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

_COUNTERS: list[KubeCounter] = []
# the media type a scraper names in its Accept header when it wants OpenMetrics
OPENMETRICS = "application/openmetrics-text"
OPENMETRICS_CONTENT_TYPE = om.CONTENT_TYPE_LATEST


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


class _Child:
    __slots__ = ("_counter", "_key")

    def __init__(self, counter: KubeCounter, key: tuple[str, ...]) -> None:
        self._counter, self._key = counter, key

    def inc(self, amount: float = 1.0) -> None:
        self._counter._inc(self._key, amount)


class KubeCounter:
    """A counter with labels, exposed under its name as given (Counter's labels(...).inc() interface)."""

    def __init__(self, name: str, documentation: str, labelnames: list[str] | tuple[str, ...]) -> None:
        self.name, self.documentation, self.labelnames = name, documentation, tuple(labelnames)
        self._values: dict[tuple[str, ...], float] = {}
        self._lock = threading.Lock()
        _COUNTERS.append(self)

    def labels(self, *values: str) -> _Child:
        if len(values) != len(self.labelnames):
            raise ValueError(f"{self.name}: expected {len(self.labelnames)} label values, got {len(values)}")
        return _Child(self, tuple(str(v) for v in values))

    def _inc(self, key: tuple[str, ...], amount: float) -> None:
        if amount < 0:
            raise ValueError("counters can only be incremented")
        with self._lock:
            self._values[key] = self._values.get(key, 0.0) + amount

    def value(self, *values: str) -> float:
        return self._values.get(tuple(values), 0.0)

    def render(self, kind: str = "counter") -> str:
        doc = self.documentation.replace("\\", "\\\\").replace("\n", "\\n")
        lines = [f"# HELP {self.name} {doc}\n", f"# TYPE {self.name} {kind}\n"]
        with self._lock:
            items = sorted(self._values.items())
        for key, value in items:
            labels = ",".join(f'{k}="{_escape(v)}"' for k, v in sorted(zip(self.labelnames, key)))
            lines.append(f"{self.name}{{{labels}}} {floatToGoString(value)}\n" if labels
                         else f"{self.name} {floatToGoString(value)}\n")
        return "".join(lines)


# Collectors that read the event loop's own state (APF's FlowController): collected on the loop when
# /metrics is scraped, apart from the default registry, whose collectors (prometheus_client's metrics,
# KubeCounter, the process and gc collectors) take their own locks or read only the process and are
# collected in render's thread.
LOOP_REGISTRY = CollectorRegistry()


class _Collected:
    """A registry's families as collected on the loop, for a renderer in a thread."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.families = list(registry.collect())

    def collect(self) -> Iterable[Metric]:
        return self.families


def _render(collectors: Sequence[Collector], openmetrics: bool) -> bytes:
    if not openmetrics:
        return b"".join(map(generate_latest, collectors)) + "".join(c.render() for c in _COUNTERS).encode()
    eof = b"# EOF\n"
    kube_named = "".join(c.render("unknown") for c in _COUNTERS).encode()
    return b"".join(om.generate_latest(c).removesuffix(eof) for c in collectors) + kube_named + eof


def exposition(openmetrics: bool = False) -> bytes:
    """The text a /metrics endpoint serves: the default registry, LOOP_REGISTRY, then the kube-named
    counters. In the OpenMetrics form (the only one with exemplars) those counters are of type unknown:
    OpenMetrics wants a counter's samples named <name>_total, which their kube names are not."""
    return _render((REGISTRY, LOOP_REGISTRY), openmetrics)


async def render(openmetrics: bool = False) -> bytes:
    """exposition() for a server on an event loop: rendering thousands of series takes tens of ms of
    CPU, so it runs in a thread and the loop keeps serving between the GIL's switches (every 5 ms)
    instead of stalling every request in flight for the whole scrape. LOOP_REGISTRY is collected first,
    here on the loop."""
    return await asyncio.to_thread(_render, (REGISTRY, _Collected(LOOP_REGISTRY)), openmetrics)
