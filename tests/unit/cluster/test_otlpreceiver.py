"""The local trace receiver (services/cluster/otlpreceiver.py): what it is sent over OTLP/gRPC lands in its
file (read() gives its spans back), and `--show` (`apiary traces`) prints one trace as a tree."""
from __future__ import annotations

from pathlib import Path

import grpc
import orjson
import pytest
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2 as tspb
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc as tsgrpc
from opentelemetry.proto.common.v1 import common_pb2
from opentelemetry.proto.trace.v1 import trace_pb2

from services.cluster.otlpreceiver import Reader, Receiver, main, read

TRACE = bytes(range(16))


def span(name: str, span_id: int, parent: int | None, start: int, **attrs: str) -> trace_pb2.Span:
    return trace_pb2.Span(
        trace_id=TRACE, span_id=span_id.to_bytes(8, "big"),
        parent_span_id=parent.to_bytes(8, "big") if parent else b"", name=name,
        start_time_unix_nano=start, end_time_unix_nano=start + 2_000_000,
        attributes=[common_pb2.KeyValue(key=k.replace("_", "-"), value=common_pb2.AnyValue(string_value=v))
                    for k, v in attrs.items()])


def export(endpoint: str, service: str, *spans: trace_pb2.Span) -> None:
    resource = {"attributes": [common_pb2.KeyValue(key="service.name",
                                                   value=common_pb2.AnyValue(string_value=service))]}
    with grpc.insecure_channel(endpoint) as ch:
        tsgrpc.TraceServiceStub(ch).Export(tspb.ExportTraceServiceRequest(resource_spans=[trace_pb2.ResourceSpans(
            resource=resource, scope_spans=[trace_pb2.ScopeSpans(spans=list(spans))])]), timeout=10)


def test_spans_sent_are_kept_and_shown_as_a_tree(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "traces.jsonl"
    r = Receiver(out=str(out)).start()
    try:
        export(r.endpoint, "apiary-proxy", span("POST /api/v1/namespaces/{:namespace}/configmaps", 1, None, 10,
                                                audit_id="a-1"))
        export(r.endpoint, "apiary-registry", span("create", 2, 1, 20))
    finally:
        r.stop()
    kept = read(str(out))
    assert [(s["service"], s["parent_span_id"]) for s in kept] == [("apiary-proxy", ""),
                                                                    ("apiary-registry", (1).to_bytes(8, "big").hex())]
    for argv in (["--show", str(out), TRACE.hex()], ["--show", str(out), "--audit-id", "a-1"], ["--show", str(out)]):
        with pytest.raises(SystemExit) as e:
            main(argv)
        assert e.value.code == 0
        assert capsys.readouterr().out.splitlines() == [
            f"trace {TRACE.hex()}",
            "apiary-proxy: POST /api/v1/namespaces/{:namespace}/configmaps 2.00 ms audit-id=a-1",
            "  apiary-registry: create 2.00 ms"]


def test_no_such_trace(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        main(["--show", str(tmp_path / "none.jsonl"), "--audit-id", "nope"])
    assert e.value.code == 1
    assert "no trace nope in" in capsys.readouterr().err


def test_a_reader_reads_on_from_where_it_stopped(tmp_path: Path) -> None:
    """Reader decodes each line once: a line still being written waits for the next read, and a line of the
    older format (one span as a JSON object) reads as that span."""
    out = tmp_path / "traces.jsonl"
    reader = Reader(out)
    assert reader.read() == []  # nothing written yet
    old = {"trace_id": TRACE.hex(), "span_id": "01" * 8, "parent_span_id": "", "name": "old", "service": "s",
           "kind": 1, "start": 1, "end": 2, "attributes": {}, "events": [], "links": [], "status": 0}
    out.write_bytes(orjson.dumps(old) + b"\n" + b'{"otlp":"')
    assert [s["name"] for s in reader.read()] == ["old"]
    r = Receiver(out=str(out) + ".new").start()
    try:
        export(r.endpoint, "apiary-registry", span("create", 2, 1, 20))
    finally:
        r.stop()
    line = (tmp_path / "traces.jsonl.new").read_bytes()
    with out.open("ab") as f:
        f.write(line[len(b'{"otlp":"'):])
    assert [(s["name"], s["service"]) for s in reader.read()] == [("old", "s"), ("create", "apiary-registry")]
    assert reader.read() == read(str(out))  # nothing new: nothing more
