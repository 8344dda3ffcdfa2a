"""Tracing's cost (issue 27): GET and CREATE of a configmap (closed loop, the core figures' client) on three
stacks of the same code, started once side by side and measured in turn in interleaved rounds (off, rate 0,
every request, off, ...):

  off      no tracing configuration at all
  rate0    --tracing-config-file with samplingRatePerMillion 0, exporting to a local OTLP receiver
  every    samplingRatePerMillion 1,000,000: every request traced and exported to its local receiver

After each phase of `every` the bench waits a second before reading the CPU counters, so the stack's last batch
of spans is exported within its own phase's CPU and not during the next stack's phase (the rate is the phase's
own); off and rate0 export nothing, and the next phase follows at once.
Each receiver is services/cluster/otlpreceiver.py in a process of its own (its CPU is shown apart, as
`otlpreceiver`, and it shares the machine's cores as a local collector would). The proof that the figures measure what they
say: rate0's receiver got no span, and every's got one root span (the proxy's, with the Audit-ID the bench
sent) per request the bench sent it. tracing_{get,create}_{rate0,every}: medians over the rounds and the
median of the per-round ratios against `off` (goals: rate0 >= 0.97, every >= 0.8), with the CPU per request of
each process beside each rate.

    python -m tools.bench_tracing [--quick] [--rounds N] [-n N]     (also part of `make bench`, quick too)
"""
from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import itertools
import json
import os
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Iterable
from dataclasses import dataclass, field
from typing import Any

from services.cluster import otlpreceiver
from services.cluster.stack import ROOT, Stack
from services.common.tracing import EXPORT_DELAY_MS
from tools.bench import (
    BENCH_OFFSET,
    BENCH_STATE,
    JSON_HDR,
    Conn,
    Probe,
    client_ctx,
    drive,
    interleaved,
    paired,
)

NS = "bench-tracing"
EVERY = 1_000_000
# (name, samplingRatePerMillion or None for no tracing configuration); the first is the baseline
CONFIGS: tuple[tuple[str, int | None], ...] = (("off", None), ("rate0", 0), ("every", EVERY))
# the three stacks' port offsets: beside the bench stack's (+0), its replicas' (+200), workers' (+300),
# apf's (+400) and startup's (+500)
OFFSETS = {name: BENCH_OFFSET + 600 + 100 * i for i, (name, _) in enumerate(CONFIGS)}
RECEIVER = "otlpreceiver"  # the receiver's process in the CPU per request
# every request of the bench carries an Audit-ID of this prefix (kube keeps a client's), so its root span is known
AUDIT_PREFIX = "bench-tracing-"


# a phase of a round: n CREATEs or GET_PER_CREATE * n GETs, a second or two each on an idle machine (a phase much
# shorter would be measured in a few of /proc's 10 ms clock ticks per process)
N, ROUNDS = 800, 6
QUICK_N, QUICK_ROUNDS = 300, 2  # `make bench QUICK=1` stays within its 2 minutes
GET_PER_CREATE = 2.5
# after each phase, before its CPU is read: a service's batch of spans leaves within tracing.EXPORT_DELAY_MS
DRAIN_SECONDS = 2 * EXPORT_DELAY_MS / 1000


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _body(name: str) -> bytes:
    return json.dumps({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name},
                       "data": {"key": "value-" * 20}}).encode()


@dataclass
class Config:
    """One stack of the comparison, its receiver (when it traces) and the requests sent to it."""

    name: str
    rate: int | None
    stack: Stack = field(init=False)
    receiver: subprocess.Popen[bytes] | None = None
    reader: otlpreceiver.Reader | None = None
    sent: int = 0

    def __post_init__(self) -> None:
        state = BENCH_STATE / f"tracing-{self.name}"
        endpoint = ""
        if self.rate is not None:
            state.mkdir(parents=True, exist_ok=True)
            port = _free_port()
            spans_file = state / "spans.jsonl"
            spans_file.unlink(missing_ok=True)
            self.reader = otlpreceiver.Reader(spans_file)
            log = open(state / "otlpreceiver.log", "ab")  # noqa: SIM115 - the child holds it
            self.receiver = subprocess.Popen(
                [sys.executable, "-m", "services.cluster.otlpreceiver", "--port", str(port), "--out", str(spans_file)],
                cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
            log.close()
            endpoint = f"127.0.0.1:{port}"
        self.stack = Stack(state, OFFSETS[self.name], aggregated=[], tracing_endpoint=endpoint,
                           tracing_rate=self.rate or 0)

    def stop(self) -> None:
        self.stack.stop(quiet=True)
        if self.receiver is not None:
            self.receiver.terminate()
            try:
                self.receiver.wait(10)
            except subprocess.TimeoutExpired:
                self.receiver.kill()

    def spans(self) -> list[dict[str, Any]]:
        """What the receiver wrote so far (its file is read on from where the last call stopped)."""
        return self.reader.read() if self.reader is not None else []


def span_counts(spans: Iterable[dict[str, Any]], prefix: str = AUDIT_PREFIX) -> dict[str, int]:
    """What a receiver got: all spans, the traces, and the root spans of the bench's requests (their Audit-ID
    starts with `prefix`; the controller-manager's own requests are traced too) with the spans of their traces."""
    spans = list(spans)
    roots = {s["trace_id"] for s in spans
             if not s["parent_span_id"] and str(s["attributes"].get("audit-id", "")).startswith(prefix)}
    return {"spans": len(spans), "traces": len({s["trace_id"] for s in spans}), "bench_roots": len(roots),
            "bench_spans": sum(1 for s in spans if s["trace_id"] in roots)}


def wait_settled(config: Config, timeout: float = 20.0, settle: float = 2.0) -> list[dict[str, Any]]:
    """The receiver's spans once no span of the bench's requests came for `settle` seconds (the services export
    in batches). The controller-manager's own requests are traced too and go on: a settled file never comes."""
    deadline = time.monotonic() + timeout
    seen, since = -1, time.monotonic()
    while time.monotonic() < deadline:
        bench_spans = span_counts(config.spans())["bench_spans"]
        if bench_spans != seen:
            seen, since = bench_spans, time.monotonic()
        elif time.monotonic() - since >= settle:
            break
        time.sleep(0.25)
    return config.spans()


def _wait_receiver(config: Config) -> None:
    """The receiver is up before its stack starts exporting to it (its port answers)."""
    if config.receiver is None:
        return
    port = int(config.stack.tracing_endpoint.rsplit(":", 1)[1])
    deadline = time.monotonic() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            if config.receiver.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the OTLP receiver of {config.name} did not start") from None
            time.sleep(0.1)


async def drained(phase: Awaitable[dict[str, Any]], exports: bool) -> dict[str, Any]:
    """The phase's figures once its stack has exported the spans of its last requests (the rate is the phase's
    own): their export is charged to the phase's CPU per request, and does not slow the next stack's phase.
    A stack that samples nothing (off, rate 0: their receivers get no span) has nothing to wait for."""
    r = await phase
    if exports:
        await asyncio.sleep(DRAIN_SECONDS)
    return r


async def measure(configs: list[Config], concurrency: int, n: int, rounds: int) -> dict[str, Any]:
    """GET (GET_PER_CREATE * n a phase) and CREATE (n) on each stack, every phase once per round in the order
    get off, get rate0, get every, then the same for create."""
    names = itertools.count(1)
    phases = {}
    pools: dict[str, Any] = {}
    for c in configs:
        ctx = client_ctx(c.stack)
        port = int(c.stack.server.rsplit(":", 1)[1])
        setup = Conn("127.0.0.1", port, ctx)
        for path, body in (("/api/v1/namespaces", json.dumps({"apiVersion": "v1", "kind": "Namespace",
                                                              "metadata": {"name": NS}}).encode()),
                           (f"/api/v1/namespaces/{NS}/configmaps", _body("cm-0"))):
            c.sent += 1
            s, data = await setup.request("POST", path, body,
                                          {**JSON_HDR, "Audit-ID": f"{AUDIT_PREFIX}{c.name}-{c.sent}"})
            if s != 201:
                raise RuntimeError(f"{c.name}: setup {path}: {s} {data[:200]!r}")
        pools[c.name] = itertools.cycle([Conn("127.0.0.1", port, ctx) for _ in range(concurrency)]).__next__

    def counted(c: Config, fn: Any) -> Any:
        async def one(i: int, conn: Conn) -> None:
            c.sent += 1
            await fn(conn, f"{AUDIT_PREFIX}{c.name}-{c.sent}")
        return one

    async def get(conn: Conn, audit_id: str) -> None:
        s, data = await conn.request("GET", f"/api/v1/namespaces/{NS}/configmaps/cm-0",
                                     headers={"Accept": "application/json", "Audit-ID": audit_id})
        if s != 200:
            raise RuntimeError(f"get: {s} {data[:200]!r}")

    async def create(conn: Conn, audit_id: str) -> None:
        s, data = await conn.request("POST", f"/api/v1/namespaces/{NS}/configmaps", _body(f"cm-{next(names)}"),
                                     {**JSON_HDR, "Audit-ID": audit_id})
        if s != 201:
            raise RuntimeError(f"create: {s} {data[:200]!r}")

    for c in configs:  # every connection's handshake, the caches warm
        await drive(4 * concurrency, concurrency, counted(c, get), pools[c.name])
        await drive(concurrency, concurrency, counted(c, create), pools[c.name])
    for verb, fn, count in (("get", get, GET_PER_CREATE * n), ("create", create, n)):
        for c in configs:
            probe = Probe(c.stack, others={RECEIVER: c.receiver.pid} if c.receiver else None)
            phases[f"{verb}_{c.name}"] = (lambda probe=probe, c=c, fn=fn, count=count: probe.measure(
                drained(drive(int(count), concurrency, counted(c, fn), pools[c.name]), bool(c.rate))))
    # GET's rounds first, then CREATE's: a CREATE between GETs would grow the watch cache under them
    out: dict[str, Any] = {}
    for verb in ("get", "create"):
        out.update(await interleaved(rounds, {k: v for k, v in phases.items() if k.startswith(verb + "_")}))
    return out


def run(concurrency: int = 32, n: int = N, rounds: int = ROUNDS) -> dict[str, Any]:
    """The three stacks started side by side (once), measured, then stopped; the raw figures."""
    load_start = os.getloadavg()
    configs = [Config(name, rate) for name, rate in CONFIGS]
    began = time.perf_counter()
    try:
        for c in configs:
            _wait_receiver(c)
        with concurrent.futures.ThreadPoolExecutor(len(configs)) as pool:
            for f in [pool.submit(c.stack.start, fresh=True) for c in configs]:
                f.result()
        started = round(time.perf_counter() - began, 1)
        raw = asyncio.run(measure(configs, concurrency, n, rounds))
        raw["received"] = {c.name: {**span_counts(wait_settled(c)), "sent": c.sent} for c in configs if c.receiver}
    finally:
        with concurrent.futures.ThreadPoolExecutor(len(configs)) as pool:  # side by side, as they started
            for f in [pool.submit(c.stop) for c in configs]:
                f.result()
    raw.update(concurrency=concurrency, rounds=rounds, start_seconds=started,
               load_average_start=[round(x, 2) for x in load_start],
               load_average_end=[round(x, 2) for x in os.getloadavg()])
    return raw


def services_cpu(phase: dict[str, Any]) -> float:
    """The CPU ms per request of the stack's processes, summed (its receiver's apart)."""
    return sum(v for k, v in phase["cpu_ms_per_request"].items() if k != RECEIVER)


def cpu_ratio(figure: list[dict[str, Any]], baseline: list[dict[str, Any]]) -> float:
    """The median over the rounds of the services' CPU per request without tracing ÷ with it, each within one
    round: the rate ratio the stack would show if it had the cores to itself (a neighbour's load moves the rates
    of a shared machine far more than the CPU each request costs)."""
    return round(statistics.median(services_cpu(b) / services_cpu(f) for f, b in zip(figure, baseline, strict=True)),
                 4)


def figures(raw: dict[str, Any]) -> dict[str, dict]:
    """bench.json entries: tracing_{get,create}_{rate0,every} against the same verb without tracing, in the
    same rounds; every's with the spans its receiver got (bench_roots ÷ sent: every request was traced)."""
    out = {}
    for verb in ("get", "create"):
        for name, _ in CONFIGS[1:]:
            r = paired(raw[f"{verb}_{name}"], raw[f"{verb}_off"], f"{verb}, no tracing")
            r["cpu_ratio"] = cpu_ratio(raw[f"{verb}_{name}"]["rounds"], raw[f"{verb}_off"]["rounds"])
            cpu = dict(r["cpu_ms_per_request"])  # the services' (a collector's own apart)
            if RECEIVER in cpu:
                r["receiver_cpu_ms_per_request"] = cpu.pop(RECEIVER)
            r["cpu_ms_per_request"] = cpu
            got = raw.get("received", {}).get(name)
            if got:
                r.update(spans_received=got["spans"], traced_pct=round(100 * got["bench_roots"] / got["sent"], 1))
            out[f"tracing_{verb}_{name}"] = r
    return out


def report(raw: dict[str, Any]) -> list[str]:
    """The run as a person reads it: each round's rates and ratios, the CPU per request, what each receiver got."""
    lines = [(f"concurrency {raw['concurrency']}, {raw['rounds']} rounds (off, rate0, every), stacks started in "
              f"{raw['start_seconds']} s; load average {' '.join(map(str, raw['load_average_start']))} at the start, "
              f"{' '.join(map(str, raw['load_average_end']))} at the end")]
    for verb in ("get", "create"):
        off = raw[f"{verb}_off"]["rounds"]
        for i, base in enumerate(off):
            cells = [f"off {base['rate']}/s ({services_cpu(base):.3f} ms CPU)"]
            for name, _ in CONFIGS[1:]:
                r = raw[f"{verb}_{name}"]["rounds"][i]
                cells.append(f"{name} {r['rate']}/s ({services_cpu(r):.3f} ms CPU): {r['rate'] / base['rate']:.3f}")
            lines.append(f"{verb} round {i + 1}: " + ", ".join(cells))
        for name, _ in CONFIGS:
            r = raw[f"{verb}_{name}"]
            cpu = r["cpu_ms_per_request"]
            lines.append(f"  {verb} {name:5}: median {r['rate']}/s, p50 {r['p50_ms']} ms, p99 {r['p99_ms']} ms; "
                         f"CPU ms/request: services {services_cpu(r):.3f} "
                         f"({', '.join(f'{k} {v}' for k, v in cpu.items() if k != RECEIVER and v)})"
                         + (f", receiver {cpu[RECEIVER]}" if RECEIVER in cpu else "")
                         + f", bench {r['client_cpu_ms_per_request']}")
    for name, r in figures(raw).items():
        lines.append(f"{name}: rate ratio {r['ratio']}, CPU per request without ÷ with {r['cpu_ratio']} "
                     "(medians of the rounds' ratios)")
    for name, got in raw.get("received", {}).items():
        lines.append(f"receiver of {name}: {got['spans']} spans in {got['traces']} traces; {got['bench_roots']} "
                     f"root spans of the bench's {got['sent']} requests ({got['bench_spans']} spans in their traces)")
    return lines


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m tools.bench_tracing", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="fewer requests and rounds (within about 2 minutes)")
    p.add_argument("--rounds", type=int, help=f"rounds (default {ROUNDS}, quick {QUICK_ROUNDS})")
    p.add_argument("-n", type=int, help=f"CREATEs of a phase (each round, each stack), GETs {GET_PER_CREATE}n "
                   f"(default {N}, quick {QUICK_N})")
    p.add_argument("--concurrency", type=int, default=32)
    args = p.parse_args(argv)
    raw = run(args.concurrency, args.n or (QUICK_N if args.quick else N),
              args.rounds or (QUICK_ROUNDS if args.quick else ROUNDS))
    (ROOT / ".apiary").mkdir(exist_ok=True)
    (ROOT / ".apiary" / "bench-tracing.json").write_text(json.dumps(raw, indent=1))
    print("\n".join(report(raw)))
    from tools import bench_history
    from tools.bench import figure_lines
    from tools.bench_goals import goal_lines

    results = figures(raw)
    print("\n".join(figure_lines(results, {})))
    print("\n".join(line for line in goal_lines(bench_history.flatten(results), {}) if "tracing" in line))


if __name__ == "__main__":
    main()
