"""KubeCounter: a counter served under kube's exact name (prometheus_client would add _total)."""
from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator

import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily

from services.common.metrics import KubeCounter, _render, _Snapshot, exposition, render


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


def _registry_with_every_kind() -> tuple[CollectorRegistry, list[int]]:
    """A registry with a labelled histogram (and an exemplar), a counter, a gauge and a custom collector
    that notes the thread it is collected on."""
    reg = CollectorRegistry()
    h = Histogram("apiary_test_seconds", "Latency.", ["verb", "resource"], registry=reg, buckets=(0.1, 1))
    h.labels("GET", "pods").observe(0.05, {"trace_id": "abc"})
    h.labels("LIST", 'quo"te').observe(2)
    Counter("apiary_test_requests", "Requests.", ["code"], registry=reg).labels("200").inc(3)
    Gauge("apiary_test_open", "Open.", registry=reg).set(2)
    threads: list[int] = []

    class Custom:
        def collect(self) -> Iterator[GaugeMetricFamily]:
            threads.append(threading.get_ident())
            yield GaugeMetricFamily("apiary_test_custom", "Read from the loop's state.", value=1)

    reg.register(Custom())  # type: ignore[arg-type]
    return reg, threads


@pytest.mark.parametrize("openmetrics", [False, True])
async def test_rendering_off_the_loop_serves_the_same_text(openmetrics: bool) -> None:
    reg, threads = _registry_with_every_kind()
    expected = _render(reg, openmetrics)
    snapshot = _Snapshot(reg)
    assert threads[-1] == threading.get_ident()  # the custom collector ran on the loop's thread
    assert await asyncio.to_thread(_render, snapshot, openmetrics) == expected
    assert ("# {trace_id=\"abc\"} 0.05" in expected.decode()) == openmetrics
    assert expected.decode().count("apiary_test_custom") == 3


async def test_render_is_exposition() -> None:
    text = (await render()).decode()
    assert "python_gc_objects_collected_total" in text and "# EOF" not in text
    assert (await render(openmetrics=True)).endswith(b"# EOF\n")
