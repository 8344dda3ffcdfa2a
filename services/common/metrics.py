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
from collections.abc import Iterator

from prometheus_client import REGISTRY, CollectorRegistry, generate_latest
from prometheus_client.gc_collector import GCCollector
from prometheus_client.metrics import MetricWrapperBase
from prometheus_client.metrics_core import Metric
from prometheus_client.openmetrics import exposition as om
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector
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


# Collectors that take their own locks (prometheus_client's metrics, KubeCounter) or read only the
# process (/proc, gc): safe to collect from a thread while the event loop updates them.
_THREAD_SAFE = (MetricWrapperBase, ProcessCollector, GCCollector, PlatformCollector)


class _Snapshot:
    """One scrape's view of a registry: the families of collectors that read the event loop's own
    state (a FlowController, the aggregator's counts) collected now, on the loop; the thread-safe ones
    collected later, wherever the text is rendered."""

    def __init__(self, registry: CollectorRegistry) -> None:
        # CollectorRegistry.collect's own walk (target_info first, then each collector in order), split
        # in two; prometheus_client has no public list of a registry's collectors
        with registry._lock:
            collectors = list(registry._collector_to_names)
            self._parts: list[list[Metric] | object] = [[registry._target_info_metric()]] if registry._target_info else []
        self._parts += [c if isinstance(c, _THREAD_SAFE) else list(c.collect()) for c in collectors]

    def collect(self) -> Iterator[Metric]:
        for part in self._parts:
            yield from part if isinstance(part, list) else part.collect()  # type: ignore[attr-defined]


def _render(registry: CollectorRegistry | _Snapshot, openmetrics: bool) -> bytes:
    if not openmetrics:
        return generate_latest(registry) + "".join(c.render() for c in _COUNTERS).encode()  # type: ignore[arg-type]
    eof = b"# EOF\n"
    kube_named = "".join(c.render("unknown") for c in _COUNTERS).encode()
    return om.generate_latest(registry).removesuffix(eof) + kube_named + eof


def exposition(openmetrics: bool = False) -> bytes:
    """The text a /metrics endpoint serves: the default registry, then the kube-named counters. In the
    OpenMetrics form (the only one with exemplars) those counters are of type unknown: OpenMetrics wants a
    counter's samples named <name>_total, which their kube names are not."""
    return _render(REGISTRY, openmetrics)


async def render(openmetrics: bool = False) -> bytes:
    """exposition() for a server on an event loop: rendering thousands of series takes tens of ms of
    CPU, so it runs in a thread and the loop keeps serving between the GIL's switches (every 5 ms)
    instead of stalling every request in flight for the whole scrape."""
    return await asyncio.to_thread(_render, _Snapshot(REGISTRY), openmetrics)
