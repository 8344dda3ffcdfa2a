"""A local OTLP/gRPC trace receiver: opentelemetry-proto's TraceService on a loopback port, keeping every
span it is sent (in memory, and in a file when given one: a JSON line per export request holding its bytes,
which read() decodes).

The tests start one in-process (Receiver) and point the services' TracingConfiguration at it; `apiary up
--tracing` (`make run TRACING=1`) runs one as a process of the stack (`python -m services.cluster.otlpreceiver
--port 4317 --out <state>/logs/traces.jsonl`), and `apiary traces` (or `python -m services.cluster.otlpreceiver
--show FILE [TRACE_ID | --audit-id ID]`) prints a trace as an indented tree. It lives here, not in tools/,
because an installed apiary (the wheel holds only services*) runs it.

A span is kept as a flat dict: trace_id, span_id, parent_span_id (hex, "" for a root), name, service,
start/end (ns), kind, attributes (plain values), events ([{name, time, attributes}]: the short steps a
service records on a span instead of spans of their own), links ([{trace_id, span_id}]) and status.
"""
from __future__ import annotations

import argparse
import base64
import os
import sys
import threading
import time
from concurrent import futures
from typing import Any

import grpc
import orjson
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2 as tspb

SERVICE = "opentelemetry.proto.collector.trace.v1.TraceService"
_EXPORTED = tspb.ExportTraceServiceResponse()


def _value(v: Any) -> Any:
    kind = v.WhichOneof("value")
    if kind == "string_value":
        return v.string_value
    if kind == "array_value":
        return [_value(x) for x in v.array_value.values]
    if kind == "kvlist_value":
        return {kv.key: _value(kv.value) for kv in v.kvlist_value.values}
    return getattr(v, kind) if kind else None


def _attributes(kvs: Any) -> dict[str, Any]:
    return {kv.key: _value(kv.value) for kv in kvs}


def spans_of(request: tspb.ExportTraceServiceRequest) -> list[dict[str, Any]]:
    out = []
    append = out.append
    for rs in request.resource_spans:
        service = _attributes(rs.resource.attributes).get("service.name", "")
        for ss in rs.scope_spans:
            for s in ss.spans:
                events = s.events
                links = s.links
                append({
                    "trace_id": s.trace_id.hex(), "span_id": s.span_id.hex(), "parent_span_id": s.parent_span_id.hex(),
                    "name": s.name, "service": service, "kind": s.kind,
                    "start": s.start_time_unix_nano, "end": s.end_time_unix_nano,
                    "attributes": _attributes(s.attributes),
                    "events": [{"name": e.name, "time": e.time_unix_nano, "attributes": _attributes(e.attributes)}
                               for e in events] if events else [],
                    "links": [{"trace_id": lk.trace_id.hex(), "span_id": lk.span_id.hex()} for lk in links]
                    if links else [],
                    "status": s.status.code,
                })
    return out


def new_traceparent() -> tuple[str, str, str]:
    """(trace ID, span ID, the W3C `traceparent` naming them, sampled): the context a client sends to have
    its request traced (continued for system:masters and system:monitoring)."""
    trace_id, span_id = os.urandom(16).hex(), os.urandom(8).hex()
    return trace_id, span_id, f"00-{trace_id}-{span_id}-01"


class Receiver:
    """The receiver on 127.0.0.1:`port` (0: any free port, then .port says which).

    What it is sent is kept as the request's bytes and decoded only when asked for (spans, find, wait_for,
    the file's reader): a receiver beside a stack tracing every request shares its cores, and decoding
    each span as it arrives cost more than a span costs the service that made it."""

    def __init__(self, port: int = 0, out: str = "", host: str = "127.0.0.1") -> None:
        self._spans: list[dict[str, Any]] = []
        self._pending: list[bytes] = []
        self._lock = threading.Lock()
        self._out = open(out, "ab", buffering=0) if out else None  # noqa: SIM115 - closed by stop()
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        self._server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, {
            "Export": grpc.unary_unary_rpc_method_handler(
                self.Export, response_serializer=tspb.ExportTraceServiceResponse.SerializeToString),
        }),))
        self.host = host
        self.port = self._server.add_insecure_port(f"{host}:{port}")

    def Export(self, request: bytes, context: Any) -> tspb.ExportTraceServiceResponse:
        """TraceService.Export, its request left serialized (no deserializer: gRPC hands over the bytes)."""
        with self._lock:
            self._pending.append(request)
            if self._out is not None:
                self._out.write(b'{"otlp":"' + base64.b64encode(request) + b'"}\n')
        return _EXPORTED

    @property
    def spans(self) -> list[dict[str, Any]]:
        """Every span received so far, in the order they came."""
        with self._lock:
            return list(self._decoded())

    def _decoded(self) -> list[dict[str, Any]]:
        if self._pending:
            for raw in self._pending:
                self._spans.extend(spans_of(tspb.ExportTraceServiceRequest.FromString(raw)))
            self._pending.clear()
        return self._spans

    def start(self) -> Receiver:
        self._server.start()
        return self

    def stop(self) -> None:
        self._server.stop(grace=1).wait()
        if self._out is not None:
            self._out.close()

    def wait_for_termination(self) -> None:
        self._server.wait_for_termination()

    @property
    def endpoint(self) -> str:
        return f"{self.host}:{self.port}"

    def trace(self, trace_id: str) -> list[dict[str, Any]]:
        with self._lock:
            return [s for s in self._decoded() if s["trace_id"] == trace_id]

    def find(self, predicate: Any) -> list[dict[str, Any]]:
        with self._lock:
            return [s for s in self._decoded() if predicate(s)]

    def wait_for(self, predicate: Any, timeout: float = 10.0, settle: float = 1.5) -> list[dict[str, Any]]:
        """The spans matching `predicate` once some arrived and no new one came for `settle` seconds
        (services export in batches, each on its own schedule), or what there is after `timeout`."""
        deadline = time.monotonic() + timeout
        seen, since = -1, time.monotonic()
        while time.monotonic() < deadline:
            found = self.find(predicate)
            if len(found) != seen:
                seen, since = len(found), time.monotonic()
            elif found and time.monotonic() - since >= settle:
                return found
            time.sleep(0.1)
        return self.find(predicate)


def tree(spans: list[dict[str, Any]]) -> str:
    """One trace as an indented tree: each span's service, name, duration and attributes, its events (`· name`)
    among its children in time order."""
    by_parent: dict[str, list[dict[str, Any]]] = {}
    ids = {s["span_id"] for s in spans}
    for s in sorted(spans, key=lambda s: s["start"]):
        by_parent.setdefault(s["parent_span_id"] if s["parent_span_id"] in ids else "", []).append(s)
    lines: list[str] = []

    def walk(parent: str, depth: int, events: list[dict[str, Any]] | None = None) -> None:
        items = [(e["time"], 0, e) for e in events or []] + [(s["start"], 1, s) for s in by_parent.get(parent, [])]
        for _, is_span, s in sorted(items, key=lambda item: item[:2]):
            attrs = " ".join(f"{k}={v}" for k, v in s["attributes"].items())
            if not is_span:
                lines.append(f"{'  ' * depth}· {s['name']} {attrs}".rstrip())
                continue
            lines.append(f"{'  ' * depth}{s['service']}: {s['name']} {(s['end'] - s['start']) / 1e6:.2f} ms {attrs}".rstrip())
            walk(s["span_id"], depth + 1, s.get("events", []))

    walk("", 0)
    return "\n".join(lines)


class Reader:
    """A receiver's file read on from where the last read() stopped: the receiver only appends, so a reader
    polling a growing file (show --wait, the tracing bench) decodes each line once."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = path
        self.spans: list[dict[str, Any]] = []
        self._offset = 0  # bytes of whole lines read

    def read(self) -> list[dict[str, Any]]:
        """Every span in the file so far (none if the receiver wrote nothing yet); a line still being
        written is left for the next call."""
        try:
            with open(self.path, "rb") as f:
                f.seek(self._offset)
                data = f.read()
        except FileNotFoundError:
            return self.spans
        whole = data[:data.rfind(b"\n") + 1]
        self._offset += len(whole)
        self.spans += [span for line in whole.split(b"\n") for span in line_spans(line)]
        return self.spans


def read(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The spans a receiver wrote to `path` (none if it wrote nothing yet)."""
    return Reader(path).read()


def line_spans(line: bytes) -> list[dict[str, Any]]:
    """The spans of one line of a receiver's file: one export request's serialized bytes
    (`{"otlp": base64}`), or one span as a JSON object (the format of files written before the receiver
    kept the requests' bytes)."""
    if not line.strip():
        return []
    got = orjson.loads(line)
    if "otlp" in got:
        return spans_of(tspb.ExportTraceServiceRequest.FromString(base64.b64decode(got["otlp"])))
    return [got]


def select(spans: list[dict[str, Any]], trace_id: str = "", audit_id: str = "") -> list[str]:
    """The IDs of the traces asked for: one trace, the trace of a request (its root span carries its
    audit ID), or, with neither, the one that began last."""
    if audit_id:
        spans = [s for s in spans if s["attributes"].get("audit-id") == audit_id]
    elif trace_id:
        spans = [s for s in spans if s["trace_id"] == trace_id]
    elif spans:
        spans = [max(spans, key=lambda s: s["start"])]
    return list(dict.fromkeys(s["trace_id"] for s in spans))


def show(path: str, trace_id: str = "", audit_id: str = "", wait: float = 0.0, settle: float = 1.5) -> int:
    """Print the traces asked for as trees; with `wait`, first wait up to that many seconds for one to
    arrive and then until no span came for `settle` seconds (services export in batches, twice a
    second). 1 if there is none."""
    deadline = time.monotonic() + wait
    seen, since = -1, time.monotonic()
    reader = Reader(path)
    while True:
        spans = reader.read()
        ids = select(spans, trace_id, audit_id)
        count = sum(1 for s in spans if s["trace_id"] in ids)
        now = time.monotonic()
        if count != seen:
            seen, since = count, now
        if now >= deadline or (ids and now - since >= settle):
            break
        time.sleep(0.1)
    for tid in ids:
        print(f"trace {tid}")
        print(tree([s for s in spans if s["trace_id"] == tid]))
    if not ids:
        print(f"no trace{' ' + (audit_id or trace_id) if audit_id or trace_id else ''} in {path}", file=sys.stderr)
    return 0 if ids else 1


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m services.cluster.otlpreceiver", description=__doc__.split("\n\n")[0])
    p.add_argument("--port", type=int, default=4317)
    p.add_argument("--bind-address", default="127.0.0.1", help="the address to listen on (0.0.0.0 in a pod)")
    p.add_argument("--out", default="", help="append each span as a JSON line to this file")
    p.add_argument("--show", metavar="FILE", default="", help="print the traces kept in FILE instead of receiving")
    p.add_argument("--audit-id", default="", help="with --show: the trace of the request with this audit ID")
    p.add_argument("--wait", type=float, default=0.0, metavar="SECONDS",
                   help="with --show: wait up to SECONDS for the trace to arrive")
    p.add_argument("trace_id", nargs="?", default="", help="with --show: only this trace")
    args = p.parse_args(argv)
    if args.show:
        raise SystemExit(show(args.show, args.trace_id, args.audit_id, args.wait))
    receiver = Receiver(args.port, args.out, args.bind_address).start()
    print(f"OTLP receiver on {receiver.endpoint}", file=sys.stderr, flush=True)
    try:
        receiver.wait_for_termination()
    except KeyboardInterrupt:
        receiver.stop()


if __name__ == "__main__":
    main()
