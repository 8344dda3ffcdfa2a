"""KubeCounter: a counter served under kube's exact name (prometheus_client would add _total)."""
from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator

import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily

from services.common.metrics import LOOP_REGISTRY, KubeCounter, _Collected, _render, exposition, render


def test_kube_counter_keeps_its_name() -> None:
    c = KubeCounter("apiary_test_things_count", 'Things "counted".', ["name", "type"])
    c.labels("a\\b", "x").inc()
    c.labels("a\\b", "x").inc(2)
    c.labels("z", "y").inc()
    text = exposition().decode()
    assert "# HELP apiary_test_things_count Things \"counted\".\n# TYPE apiary_test_things_count counter\n" in text
    assert 'apiary_test_things_count{name="a\\\\b",type="x"} 3.0\n' in text
    assert 'apiary_test_things_count{name="z",type="y"} 1.0\n' in text
    assert "apiary_test_things_count_total" not in text
    assert c.value("z", "y") == 1.0
    # the default registry is still there
    assert "python_gc_objects_collected_total" in text


class _Custom:
    """A collector reading the loop's state; notes the thread it is collected on."""

    def __init__(self, name: str = "apiary_test_custom") -> None:
        self.name = name
        self.threads: list[int] = []

    def collect(self) -> Iterator[GaugeMetricFamily]:
        self.threads.append(threading.get_ident())
        yield GaugeMetricFamily(self.name, "Read from the loop's state.", value=1)


def _registries() -> tuple[CollectorRegistry, CollectorRegistry, _Custom]:
    """A registry with a labelled histogram (and an exemplar), a counter and a gauge; and a loop registry
    with a custom collector."""
    reg = CollectorRegistry()
    h = Histogram("apiary_test_seconds", "Latency.", ["verb", "resource"], registry=reg, buckets=(0.1, 1))
    h.labels("GET", "pods").observe(0.05, {"trace_id": "abc"})
    h.labels("LIST", 'quo"te').observe(2)
    Counter("apiary_test_requests", "Requests.", ["code"], registry=reg).labels("200").inc(3)
    Gauge("apiary_test_open", "Open.", registry=reg).set(2)
    loop_reg, custom = CollectorRegistry(), _Custom()
    loop_reg.register(custom)  # type: ignore[arg-type]
    return reg, loop_reg, custom


@pytest.mark.parametrize("openmetrics", [False, True])
async def test_rendering_off_the_loop_serves_the_same_text(openmetrics: bool) -> None:
    reg, loop_reg, custom = _registries()
    expected = _render((reg, loop_reg), openmetrics)
    collected = _Collected(loop_reg)
    assert custom.threads[-1] == threading.get_ident()  # the custom collector ran on the loop's thread
    assert await asyncio.to_thread(_render, (reg, collected), openmetrics) == expected
    text = expected.decode()
    assert ("# {trace_id=\"abc\"} 0.05" in text) == openmetrics
    assert text.count("apiary_test_custom") == 3 and text.count("# EOF") == openmetrics
    assert text.index("apiary_test_open") < text.index("apiary_test_custom")


async def test_render_collects_the_loop_registry_on_the_loop() -> None:
    custom = _Custom("apiary_test_loop_state")
    LOOP_REGISTRY.register(custom)  # type: ignore[arg-type]
    try:
        for openmetrics in (False, True):
            text = (await render(openmetrics)).decode()
            assert "apiary_test_loop_state 1.0\n" in text and "python_gc_objects_collected_total" in text
            assert custom.threads == [threading.get_ident()]
            custom.threads.clear()
            assert "apiary_test_loop_state 1.0\n" in exposition(openmetrics).decode()
            custom.threads.clear()
    finally:
        LOOP_REGISTRY.unregister(custom)  # type: ignore[arg-type]


async def test_render_is_exposition() -> None:
    text = (await render()).decode()
    assert "python_gc_objects_collected_total" in text and "# EOF" not in text
    assert (await render(openmetrics=True)).endswith(b"# EOF\n")
