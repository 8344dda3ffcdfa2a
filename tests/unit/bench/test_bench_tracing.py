"""tools/bench_tracing.py: reading what a receiver got, and the figures against the untraced stack."""
from __future__ import annotations

import itertools
import time
from pathlib import Path

import grpc
import pytest
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2 as tspb
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc as tsgrpc
from opentelemetry.proto.trace.v1 import trace_pb2

from tools import bench_tracing
from tools.bench_goals import GOALS
from tools.bench_history import flatten
from tools.bench_tracing import CONFIGS, EVERY, OFFSETS, RECEIVER, Config, figures, report, span_counts


def _span(trace: str, span: str, parent: str = "", audit_id: str = "") -> dict:
    return {"trace_id": trace, "span_id": span, "parent_span_id": parent,
            "attributes": {"audit-id": audit_id} if audit_id else {}}


def test_span_counts_finds_the_bench_requests_by_their_audit_id():
    spans = [_span("t1", "a", audit_id="bench-tracing-every-1"), _span("t1", "b", parent="a"),
             _span("t2", "c", audit_id="bench-tracing-every-2"),
             _span("t3", "d", audit_id="0b5e-controller"),  # the controller-manager's own request
             _span("t4", "e", parent="x", audit_id="bench-tracing-every-3")]  # not a root
    assert span_counts(spans) == {"spans": 5, "traces": 4, "bench_roots": 2, "bench_spans": 3}
    assert span_counts([]) == {"spans": 0, "traces": 0, "bench_roots": 0, "bench_spans": 0}


def _phase(rates: list[float], cpu: dict[str, float]) -> dict:
    rounds = [{"rate": r, "p50_ms": 1.0, "p99_ms": 2.0, "cpu_ms_per_request": cpu} for r in rates]
    return {"rate": sorted(rates)[len(rates) // 2], "p50_ms": 1.0, "p99_ms": 2.0, "rounds": rounds,
            "cpu_ms_per_request": cpu, "client_cpu_ms_per_request": 0.1}


def _raw() -> dict:
    raw = {"concurrency": 32, "rounds": 3, "start_seconds": 9.0, "load_average_start": [1.0, 1.0, 1.0],
           "load_average_end": [2.0, 1.0, 1.0],
           "received": {"rate0": {"spans": 0, "traces": 0, "bench_roots": 0, "bench_spans": 0, "sent": 100},
                        "every": {"spans": 450, "traces": 105, "bench_roots": 100, "bench_spans": 400, "sent": 100}}}
    for verb in ("get", "create"):
        raw[f"{verb}_off"] = _phase([1000.0, 500.0, 800.0], {"proxy": 0.5})
        raw[f"{verb}_rate0"] = _phase([990.0, 480.0, 800.0], {"proxy": 0.5, RECEIVER: 0.0})
        raw[f"{verb}_every"] = _phase([800.0, 450.0, 600.0], {"proxy": 0.7, RECEIVER: 0.1})
    return raw


def test_figures_are_per_round_ratios_with_the_receiver_apart():
    out = figures(_raw())
    assert set(out) == {"tracing_get_rate0", "tracing_get_every", "tracing_create_rate0", "tracing_create_every"}
    get0, every = out["tracing_get_rate0"], out["tracing_create_every"]
    assert get0["ratio"] == 0.99 and get0["baseline"] == "get, no tracing"  # 0.99, 0.96, 1.0 -> 0.99
    assert every["ratio"] == 0.8 and every["cpu_ms_per_request"] == {"proxy": 0.7}
    assert every["cpu_ratio"] == 0.7143 and get0["cpu_ratio"] == 1.0  # the receiver's CPU is not the stack's
    assert every["receiver_cpu_ms_per_request"] == 0.1
    assert every["spans_received"] == 450 and every["traced_pct"] == 100.0
    assert out["tracing_get_rate0"]["spans_received"] == 0


def test_every_figure_has_its_goal_and_the_stacks_do_not_share_ports():
    metrics = {g.metric for g in GOALS}
    assert set(flatten(figures(_raw()))) >= {m for m in metrics if m.startswith("tracing_")}
    assert {f"tracing_{v}_{c}.ratio" for v in ("get", "create") for c, _ in CONFIGS[1:]} <= metrics
    offsets = sorted(OFFSETS.values())
    assert all(b - a >= 100 for a, b in itertools.pairwise(offsets))


def test_the_report_shows_each_round_and_what_the_receivers_got():
    text = "\n".join(report(_raw()))
    assert ("get round 2: off 500.0/s (0.500 ms CPU), rate0 480.0/s (0.500 ms CPU): 0.960, every 450.0/s "
            "(0.700 ms CPU): 0.900") in text
    assert "tracing_get_every: rate ratio 0.8, CPU per request without ÷ with 0.7143" in text
    assert "receiver of every: 450 spans in 105 traces; 100 root spans of the bench's 100 requests" in text


def test_a_config_reads_what_its_receiver_wrote(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A tracing configuration's receiver is a process of its own writing a file; spans() reads on through it."""
    monkeypatch.setattr(bench_tracing, "BENCH_STATE", tmp_path)
    config = Config("every", EVERY)
    try:
        endpoint = config.stack.tracing_endpoint
        _export(endpoint, "one")
        assert _wait(config, 1) == ["one"]
        _export(endpoint, "two")
        assert _wait(config, 2) == ["one", "two"]
    finally:
        config.stop()


def _export(endpoint: str, name: str) -> None:
    span = trace_pb2.Span(trace_id=bytes(16), span_id=bytes(range(1, 9)), name=name)
    with grpc.insecure_channel(endpoint) as ch:
        tsgrpc.TraceServiceStub(ch).Export(tspb.ExportTraceServiceRequest(resource_spans=[trace_pb2.ResourceSpans(
            scope_spans=[trace_pb2.ScopeSpans(spans=[span])])]), timeout=30, wait_for_ready=True)


def _wait(config: Config, count: int) -> list[str]:
    deadline = time.monotonic() + 30
    while len(config.spans()) < count and time.monotonic() < deadline:
        time.sleep(0.05)
    return [s["name"] for s in config.spans()]
