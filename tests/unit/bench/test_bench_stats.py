"""The benchmarks' arithmetic: interleaved rounds, their medians and ratios, percentiles."""
from __future__ import annotations

import pytest

from tools.bench_stats import (interleave, latency_summary, median_of_rounds, percentile, ratio_of_rounds,
                               server_timing, stage_breakdown)


def test_rounds_alternate_the_baseline_with_its_figures():
    assert interleave(3, ["hello", "get"]) == [(0, "hello"), (0, "get"), (1, "hello"), (1, "get"),
                                                (2, "hello"), (2, "get")]
    assert interleave(1, ["etcd_put", "create", "hello", "get"]) == [
        (0, "etcd_put"), (0, "create"), (0, "hello"), (0, "get")]


def test_median_of_rounds_takes_each_number_and_each_process_separately():
    runs = [{"rate": 100.0, "p99_ms": 9.0, "requests": 500, "cpu_ms_per_request": {"proxy": 1.0, "etcd": 0.3}},
            {"rate": 300.0, "p99_ms": 30.0, "requests": 500, "cpu_ms_per_request": {"proxy": 3.0}},
            {"rate": 200.0, "p99_ms": 10.0, "requests": 500, "cpu_ms_per_request": {"proxy": 2.0, "etcd": 0.6}}]
    assert median_of_rounds(runs) == {"rate": 200.0, "p99_ms": 10.0, "requests": 500,
                                      "cpu_ms_per_request": {"proxy": 2.0, "etcd": 0.3}}


def test_median_of_rounds_keeps_text_and_counts_an_unmeasured_latency_as_the_latest():
    runs = [{"via": "https", "p99_ms": None, "rate": 1.0}, {"via": "https", "p99_ms": 4.0, "rate": 3.0},
            {"via": "https", "p99_ms": 5.0, "rate": 2.0}]
    assert median_of_rounds(runs) == {"via": "https", "p99_ms": 5.0, "rate": 2.0}
    assert median_of_rounds(runs[:1])["p99_ms"] is None


def test_the_ratio_is_the_median_of_the_ratios_within_each_round():
    # a neighbour's load halves both the baseline and the figure of round 2: its ratio is unchanged
    baseline = [{"rate": 1000.0}, {"rate": 500.0}, {"rate": 1000.0}]
    figure = [{"rate": 200.0}, {"rate": 100.0}, {"rate": 300.0}]
    assert ratio_of_rounds(figure, baseline) == 0.2
    with pytest.raises(ValueError):
        ratio_of_rounds(figure, baseline[:2])


def test_percentiles_by_nearest_rank():
    values = [i / 1000 for i in range(1, 101)]  # 1..100 ms
    assert percentile(values, 0.5) == 0.051
    assert percentile(values, 0.99) == 0.1
    assert percentile([0.5], 0.99) == 0.5
    assert latency_summary(values, elapsed=2.0) == {"rate": 50.0, "p50_ms": 50.5, "p99_ms": 100.0,
                                                    "requests": 100}


def test_server_timing_reads_each_stage_and_sums_repeats() -> None:
    assert server_timing("authn;dur=0.02, apf;dur=1.5, registry;dur=3.10, storage;dur=1, storage;dur=2") == {
        "authn": 0.02, "apf": 1.5, "registry": 3.1, "storage": 3.0}
    assert server_timing("") == {}
    assert server_timing('cache;desc="hit", db;dur=x, total;dur=4') == {"total": 4.0}


def test_stage_breakdown_sets_the_slowest_share_beside_the_median() -> None:
    # 200 requests: 198 of 10 ms (registry 8), two of 100 ms of which 90 waited in the registry stage
    samples = [(0.010, 0.001, "authn;dur=0.1, registry;dur=8") for _ in range(198)]
    samples += [(0.100, 0.002, "authn;dur=0.1, registry;dur=90"), (0.120, 0.004, "authn;dur=0.1, registry;dur=110")]
    out = stage_breakdown(samples, share=0.01)
    assert out["tail"] == {"latency": 110.0, "connection_wait": 3.0, "authn": 0.1, "registry": 100.0}
    assert out["median"] == {"latency": 10.0, "connection_wait": 1.0, "authn": 0.1, "registry": 8.0}
    assert stage_breakdown([]) == {}
