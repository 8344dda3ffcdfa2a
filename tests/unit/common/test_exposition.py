"""services/common/exposition.py renders exactly what prometheus_client's own exposition does."""
from __future__ import annotations

from collections.abc import Iterator

import pytest
from prometheus_client import (
    REGISTRY,
    CollectorRegistry,
    Counter,
    Enum,
    Gauge,
    Histogram,
    Info,
    Summary,
    disable_created_metrics,
    enable_created_metrics,
    generate_latest,
)
from prometheus_client.core import GaugeHistogramMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.openmetrics import exposition as om

from services.common import exposition
from services.common.metrics import _Snapshot


class Fixed:
    """The families one collect() of a registry gave, the same on every scrape (the process's CPU and
    the gc counts would otherwise move between the two renderings compared)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.families = list(registry.collect())

    def collect(self) -> Iterator[Metric]:
        return iter(self.families)


def every_kind() -> CollectorRegistry:
    reg = CollectorRegistry()
    h = Histogram("apiary_x_seconds", "Latency\\ with \"quotes\"\nand lines.", ["verb", "resource"], registry=reg,
                  buckets=(0.005, 0.1, 1.5, 2e7))
    h.labels("GET", "pods").observe(0.05, {"trace_id": "4bf92f3577b34da6"})
    h.labels("LIST", 'a"b\\c\nd').observe(3e7)
    h.labels("WATCH", "").observe(0)
    Histogram("apiary_x_empty", "No child yet.", ["verb"], registry=reg)
    below = Histogram("apiary_x_offset", "Buckets below zero: no _sum.", ["k"], registry=reg, buckets=(-1, 0, 1))
    below.labels("a").observe(-0.5, {"trace_id": "cd"})
    Histogram("apiary_x_latency", "With a unit.", ["k"], registry=reg, unit="seconds").labels("b").observe(0.2)
    Histogram("apiary_x_plain", "No labels.", registry=reg).observe(0.3)
    c = Counter("apiary_x_requests", "Requests.", ["code"], registry=reg)
    c.labels("200").inc(12345678)
    c.labels("500").inc(0.25, {"trace_id": "ab"})
    Counter("apiary:x_recorded", "A name with a colon.", registry=reg).inc()
    g = Gauge("apiary_x_open", "Open.", ["kind"], registry=reg, unit="bytes")
    g.labels("a").set(-0.0)
    g.labels("b").set(float("nan"))
    g.labels("c").set(float("-inf"))
    g.labels("d").set(0.0)
    Summary("apiary_x_size", "Sizes.", registry=reg).observe(7)
    Info("apiary_x_build", "Build.", registry=reg).info({"version": "1.33"})
    Enum("apiary_x_state", "State.", states=["a", "b"], registry=reg).state("b")

    class Custom:
        def collect(self) -> Iterator[Metric]:
            fam = GaugeMetricFamily("apiary_x_custom", "Custom.", labels=["odd.name", "le"])
            fam.add_metric(["v", "1"], 5, timestamp=1700000000.123)
            yield fam
            gh = GaugeHistogramMetricFamily("apiary_x_gh", "Gauge histogram.", labels=["q"])
            gh.add_metric(["z"], [("1.0", 4), ("+Inf", 5)], gsum_value=9)
            yield gh

    reg.register(Custom())  # type: ignore[arg-type]
    return reg


@pytest.mark.parametrize("source", ["every kind", "default registry"])
def test_both_formats_are_prometheus_clients(source: str) -> None:
    fixed = Fixed(every_kind() if source == "every kind" else REGISTRY)
    for _ in range(2):  # the second time from the memo
        assert exposition.text(fixed) == generate_latest(fixed)  # type: ignore[arg-type]
        assert exposition.openmetrics(fixed) == om.generate_latest(fixed)


@pytest.mark.parametrize("created", [True, False])
def test_labelled_histograms_read_from_their_children(created: bool) -> None:
    """The live registry (labelled histograms rendered from their children, not collect()) against
    prometheus_client's renderers of the same registry."""
    reg = every_kind()
    if not created:
        disable_created_metrics()
    try:
        for _ in range(2):
            assert exposition.text(_Snapshot(reg)) == generate_latest(reg)
            assert exposition.openmetrics(_Snapshot(reg)) == om.generate_latest(reg)
        assert ("apiary_x_seconds_created" in exposition.text(_Snapshot(reg)).decode()) == created
    finally:
        enable_created_metrics()
