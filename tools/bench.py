"""`make bench`: apiary through the full stack, against baselines measured in the same run, beside
the previous runs on this machine class and issue 24's goals (docs/benchmarks.md says how).

Figures (each at a fixed concurrency, admin client certificate, HTTPS), each baseline measured in
rounds with its figures (baseline, figure, baseline, figure...; medians, the median of the per-round
ratios), the CPU each process spent per request beside every rate (from /proc; the load generator's
own apart) and the gRPC calls each service served per request (from its /metrics):
  get     GET of one configmap                       baseline: bare hello-world on the same HTTP stack
  list    LIST of 1,000 configmaps                   baseline: bare hello-world on the same HTTP stack
  create  POST of a new configmap                    baseline: raw etcd puts from Python (aetcd)
  get_open_loop, create_open_loop: GET and CREATE sent at half the rate each sustained, open loop (by a
  generator process of its own, tools/bench_openloop.py; `python -m tools.bench open` runs only the GET)
plus raw etcd gets; `python -m tools.bench core` runs only these.
get_oidc is the same GET with an OIDC bearer token from a local issuer (tools.fakeservers) trusted
by --authentication-config, against the GET with a client certificate of a user with the same rights
(both warm, neither in system:masters).
apf_gate (tools/bench_apf_gate.py) is that GET by a user who is not exempt (a seat from the apf service each time)
against the same GET through a second proxy of the stack with --enable-priority-and-fairness=false, in the
same rounds (`python -m tools.bench apf` runs only it).
apply and patch are a server-side apply and a strategic merge patch of a 3-container Deployment against
a plain update (PUT) of the same objects, in the same rounds (`python -m tools.bench writes` runs only those).
The aggregation figures of tools/bench_pizza.py (the pizza server registered with apiary):
aggregation_get, a GET of a pizza through the proxy against the same GET straight to the pizza
server with the front-proxy certificate and the same identity; pizza_get_cold_authz, that GET with
the pizza server's authorization cache cold against warm; watch_pizzas_100, the delivery p99 of a
watch of 100 pizzas' changes through the proxy at 100 writes/s against the same watch straight to
the pizza server.
Then the admission webhooks' figures of tools/bench_webhooks.py, the storage-scale figures of
tools/bench_storage.py (LIST of 10,000 against the HTTPS floor, watch-cache memory for 100,000
objects, watch fan-out on gRPC and through HTTPS with 200 and 1,000 watchers) and the RBAC decision
rates of tools/bench_rbac.py, and the custom resources' figures of tools/bench_crd.py (CREATE and GET of a
custom object with a schema and CEL rules against a ConfigMap of the same size; CRD create to servable), and
issue 25's fairness of tools/bench_apf.py (two users of one priority level, one at 20x the other's rate beyond
its capacity: the quiet one's completed share and its p99 wait in APF against its service time), and issue 27's
tracing cost of tools/bench_tracing.py (GET and CREATE with a tracing configuration at samplingRatePerMillion 0 and
at 1,000,000 against none, three stacks side by side in the same rounds; `python -m tools.bench tracing` runs only it).
`--quick` (`make bench QUICK=1`): only the goals' figures, smaller.
Writes .apiary/bench.json, appends the run to docs/bench-history/<machine>.jsonl (tools.bench_history);
`--record` appends the figures to docs/benchmarks.md.
"""
from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import itertools
import json
import os
import re
import ssl
import statistics
import subprocess
import sys
import time
import urllib.request
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Self, TypeVar

from services.common.runtime import tune_malloc
from services.cluster import certs
from tools import bench_history
from tools.bench_goals import ENVTEST_GOALS, goal_lines
from tools.bench_stats import interleave, latency_summary, median_of_rounds, ratio_of_rounds, stage_breakdown
from tools.fakeservers import Issuer
from services.cluster.stack import ROOT, Stack, replica_of

BENCH_STATE = ROOT / ".apiary" / "bench"
# Ports of the bench stack: the default ports plus this offset (APIARY_BENCH_PORT_OFFSET, so that
# benches of several checkouts, or a bench beside a test run, never share a port).
BENCH_OFFSET = int(os.environ.get("APIARY_BENCH_PORT_OFFSET", "2000"))
# The bare hello-world server's: its last two digits are no stack port's (8443 was the proxy's 6443 of a
# stack 2000 ports of offset away, another checkout's test stack, whose certificate the bench then refused).
HELLO_PORT = 8491 + BENCH_OFFSET
# The stack with two replicas of every service (replica 1 on its ports + 100: services/cluster/stack.py).
REPLICAS_OFFSET = BENCH_OFFSET + 200
CLK = os.sysconf("SC_CLK_TCK")


# A lean keep-alive HTTP/1.1 client, so the load generator costs less CPU than the server.

class Conn:
    def __init__(self, host: str, port: int, ctx: ssl.SSLContext) -> None:
        self.host, self.port, self.ctx = host, port, ctx
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def request(self, method: str, path: str, body: bytes = b"",
                      headers: dict[str, str] | None = None) -> tuple[int, bytes]:
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port, ssl=self.ctx)
        assert self.reader is not None
        head = f"{method} {path} HTTP/1.1\r\nHost: {self.host}\r\nContent-Length: {len(body)}\r\n"
        for k, v in (headers or {}).items():
            head += f"{k}: {v}\r\n"
        self.writer.write(head.encode() + b"\r\n" + body)
        raw = await self.reader.readuntil(b"\r\n\r\n")
        lines = raw.decode("latin-1").split("\r\n")
        status = int(lines[0].split()[1])
        hdrs = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:] if line)}
        if "content-length" in hdrs:
            data = await self.reader.readexactly(int(hdrs["content-length"]))
        else:
            parts = []
            while True:
                size = int((await self.reader.readline()).strip(), 16)
                chunk = await self.reader.readexactly(size + 2)
                if size == 0:
                    break
                parts.append(chunk[:-2])
            data = b"".join(parts)
        return status, data


async def drive(n: int, concurrency: int, one: Callable[[int, Any], Awaitable[None]],
                make_conn: Callable[[], Any]) -> dict[str, float]:
    """n requests, `concurrency` at a time (closed loop: each worker sends its next on its answer)."""
    lat: list[float] = []
    counter = iter(range(n))

    async def worker() -> None:
        conn = make_conn()
        for i in counter:
            t = time.perf_counter()
            await one(i, conn)
            lat.append(time.perf_counter() - t)

    start = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return latency_summary(lat, time.perf_counter() - start)


class OpenLoop:
    """The open-loop load generator of one phase, a tools/bench_openloop.py subprocess (uvloop, raw TLS,
    pre-built requests: lean, and no event loop shared with the bench's bookkeeping). Requests sent at a
    fixed rate whatever the answers (open loop, as many independent clients send), each on the next idle
    connection of a warmed pool (a client's bounded pool: no handshake storm when the server falls behind);
    latency counted from the moment a request was due, so the time it queued for a connection or in the
    server is charged. `stages`: the slowest 1 %'s Server-Timing stages and connection wait beside the
    median's (bench_stats.stage_breakdown). Its CPU and run-queue wait are the load generator's (Probe)."""

    def __init__(self, stack: Stack, method: str, path: str, expect: int, body: bytes = b"",
                 headers: dict[str, str] | None = None, connections: int = 64) -> None:
        pki = stack.state / "pki"
        self.spec = {"host": "127.0.0.1", "ports": [int(stack.server_of(r).rsplit(":", 1)[1])
                                                     for r in range(stack.replicas)],
                     "ca": str(pki / "ca.crt"), "cert": str(pki / "admin.crt"), "key": str(pki / "admin.key"),
                     "connections": connections, "method": method, "path": path, "headers": headers or {},
                     "body": body.decode(), "expect": expect}
        self.proc: asyncio.subprocess.Process | None = None

    async def __aenter__(self) -> Self:
        self.proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "tools.bench_openloop", json.dumps(self.spec), stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE, cwd=ROOT, limit=1 << 30)
        assert self.proc.stdout is not None
        if (await asyncio.wait_for(self.proc.stdout.readline(), 120)).strip() != b"ready":
            raise RuntimeError(f"the open-loop generator did not start ({await self.proc.wait()})")
        return self

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    async def run(self, rate: float, seconds: float) -> dict[str, Any]:
        """rate requests a second for seconds; the phase's latency summary once all are answered (the
        generator still running, for its CPU to be read)."""
        assert self.proc is not None and self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(f"{rate} {seconds}\n".encode())
        line = await self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the open-loop generator failed ({await self.proc.wait()})")
        got = json.loads(line)
        if got["bad"]:
            raise RuntimeError(f"open loop {self.spec['method']} {self.spec['path']}: {got['bad']}")
        samples = [tuple(s) for s in got["samples"]]
        out = latency_summary([s[0] for s in samples], got["elapsed"])
        out.update(offered_rate=round(rate, 1), max_in_flight=got["max_in_flight"],
                   connections=self.spec["connections"], stages=stage_breakdown(samples))
        return out

    async def __aexit__(self, *exc: object) -> None:
        if self.proc is None:
            return
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            await asyncio.wait_for(self.proc.wait(), 10)
        except TimeoutError:
            self.proc.kill()
            await self.proc.wait()


async def open_loop(stack: Stack, rate: float, seconds: float, method: str, path: str, expect: int,
                    body: bytes = b"", headers: dict[str, str] | None = None) -> dict[str, Any]:
    """One open-loop phase (OpenLoop) with the CPU of every process per request (Probe.measure)."""
    async with OpenLoop(stack, method, path, expect, body, headers) as gen:
        return await Probe(stack, generator=gen.pid).measure(gen.run(rate, seconds))


def client_ctx(stack: Stack, name: str = "admin") -> ssl.SSLContext:
    pki = stack.state / "pki"
    ctx = ssl.create_default_context(cafile=str(pki / "ca.crt"))
    ctx.load_cert_chain(str(pki / f"{name}.crt"), str(pki / f"{name}.key"))
    return ctx


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process so far, its proxy workers' (--workers) included."""
    return sum(_own_cpu(p) for p in (pid, *proxy_workers(pid)))


def _own_cpu(pid: int) -> float:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:  # a worker that exited meanwhile
        return 0.0
    return (int(fields[11]) + int(fields[12])) / CLK


def run_queue_seconds(pid: int) -> float:
    """Seconds the threads of a process (its proxy workers' too) were runnable but waited for a CPU
    (/proc/<pid>/task/*/schedstat): time a request lost to the machine's other work, at no CPU cost."""
    total = 0
    for p in (pid, *proxy_workers(pid)):
        try:
            tasks = os.listdir(f"/proc/{p}/task")
        except OSError:
            continue
        for t in tasks:
            try:
                total += int(Path(f"/proc/{p}/task/{t}/schedstat").read_text().split()[1])
            except (OSError, IndexError, ValueError):  # a thread that ended meanwhile; no schedstat
                continue
    return total / 1e9


def machine_jiffies() -> tuple[int, int]:
    """The machine's busy and total CPU time so far (/proc/stat, all cores, in jiffies)."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return sum(fields) - fields[3] - fields[4], sum(fields)  # idle and iowait are not busy


def proxy_workers(pid: int) -> list[int]:
    """The worker processes a proxy started with --workers N runs beside itself (its children)."""
    found = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            if int(Path(f"/proc/{d}/stat").read_text().rsplit(")", 1)[1].split()[1]) == pid and \
                    b"--worker-index" in Path(f"/proc/{d}/cmdline").read_bytes():
                found.append(int(d))
        except (OSError, ValueError, IndexError):
            continue
    return found


def grpc_calls(stack: Stack, name: str) -> dict[str, float]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{stack.health_port(name)}/metrics", timeout=5) as r:
            text = r.read().decode()
    except OSError:
        return {}
    out = {}
    for m in re.finditer(r'^grpc_server_started_total\{grpc_method="([^"]+)"\} ([0-9.e+]+)$', text, re.M):
        out[m.group(1)] = float(m.group(2))
    for m in re.finditer(r"^apiserver_flowcontrol_dispatched_requests_total\{[^}]*\} ([0-9.e+]+)$", text, re.M):
        out["Seats(acquire)"] = out.get("Seats(acquire)", 0.0) + float(m.group(1))
    return out


class Probe:
    """CPU seconds and gRPC calls per process over one measured phase: the stack's services (all their
    replicas, or only those named), any other process by pid (a baseline's server), and the load
    generator's, kept apart (it is no server's cost): the bench's own process with, when the phase runs
    one, its generator subprocess (tools/bench_openloop.py)."""

    def __init__(self, stack: Stack, services: tuple[str, ...] | None = None,
                 others: dict[str, int] | None = None, generator: int | None = None) -> None:
        self.stack = stack
        names = ("etcd", *stack.service_names())
        self.pids = {n: stack.pid(n) for n in names if services is None or replica_of(n)[0] in services}
        self.others = others or {}
        self.generator = generator

    def snapshot(self, end: bool = False) -> dict[str, tuple[float, dict[str, float]]]:
        """At a phase's start the metrics are read before the CPU counters, at its end (end=True)
        after them: rendering /metrics costs a service milliseconds, which is not the phase's."""
        out: dict[str, tuple[float, dict[str, float]]] = {}
        cpus = self._cpus() if end else {}
        scraped = {n: grpc_calls(self.stack, n) if n != "etcd" else {} for n in self.pids}
        if not end:
            cpus = self._cpus()
        for n in self.pids:
            service = replica_of(n)[0]
            cpu, calls = out.get(service, (0.0, {}))
            for method, v in scraped[n].items():
                calls[method] = calls.get(method, 0.0) + v
            out[service] = (cpu + cpus[n], calls)
        for n in self.others:
            out[n] = (cpus[n], {})
        out[CLIENT] = (cpus[CLIENT], {})
        return out

    def _cpus(self) -> dict[str, float]:
        pids = {**self.pids, **self.others}
        return {**{n: cpu_seconds(p) if p else 0.0 for n, p in pids.items()},
                CLIENT: time.process_time() + (_own_cpu(self.generator) if self.generator else 0.0)}

    @staticmethod
    def per_request(before: dict, after: dict, n: int) -> tuple[dict[str, float], dict[str, float]]:
        cpu = {k: round((after[k][0] - before[k][0]) / n * 1000, 3) for k in before}
        hops: dict[str, float] = {}
        for k in before:
            for method, v in after[k][1].items():
                d = (v - before[k][1].get(method, 0.0)) / n
                if d >= 0.01 and method not in ("Seats", "Calls"):
                    hops[f"{k}.{method}"] = round(d, 2)
        return cpu, hops

    def waits(self) -> dict[str, float]:
        """Each service's run-queue seconds so far (summed over its replicas), the load generator's too."""
        out: dict[str, float] = {CLIENT: sum(run_queue_seconds(p) for p in (os.getpid(), self.generator) if p)}
        for n, pid in {**self.pids, **self.others}.items():
            service = replica_of(n)[0] if n in self.pids else n
            out[service] = out.get(service, 0.0) + (run_queue_seconds(pid) if pid else 0.0)
        return out

    async def measure(self, phase: Awaitable[dict[str, Any]]) -> dict[str, Any]:
        """phase's figures with the CPU ms each process spent per request (the load generator's as
        client_cpu_ms_per_request), the gRPC calls each service served per request, the ms each process
        waited for a CPU per request (run_queue_ms_per_request) and how busy the whole machine was."""
        # the run-queue reads (a walk of /proc) outside the CPU snapshots: the load generator's CPU is not theirs
        waits, jiffies = self.waits(), machine_jiffies()
        before = self.snapshot()
        r = await phase
        after = self.snapshot(end=True)
        waits_after, jiffies_after = self.waits(), machine_jiffies()
        cpu, hops = self.per_request(before, after, r["requests"])
        r["client_cpu_ms_per_request"] = cpu.pop(CLIENT)
        r.update(cpu_ms_per_request=cpu, grpc_calls_per_request=hops,
                 run_queue_ms_per_request={k: round((waits_after[k] - v) / r["requests"] * 1000, 3)
                                           for k, v in waits.items()},
                 machine_busy_pct=round(100 * (jiffies_after[0] - jiffies[0]) / max(1, jiffies_after[1] - jiffies[1]), 1))
        return r


CLIENT = "bench"  # the load generator (this process and its generator subprocess) in a Probe's snapshot


async def interleaved(rounds: int, phases: dict[str, Callable[[], Awaitable[dict[str, Any]]]]
                      ) -> dict[str, dict[str, Any]]:
    """Every phase once per round, in the order given (baseline, figure, baseline, figure...): each
    phase's medians over the rounds, with the rounds themselves under "rounds"."""
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in phases}
    for _, name in interleave(rounds, list(phases)):
        runs[name].append(await phases[name]())
    return {name: {**median_of_rounds(r), "rounds": r} for name, r in runs.items()}


JSON_HDR = {"Content-Type": "application/json", "Accept": "application/json"}
GET_PATH = "/api/v1/namespaces/bench/configmaps/cm-0"  # the GET figures' configmap
ACCEPT_JSON = {"Accept": "application/json"}


async def get_configmap(i: int, c: Conn) -> None:
    s, data = await c.request("GET", GET_PATH, headers=ACCEPT_JSON)
    if s != 200:
        raise RuntimeError(f"get: {s} {data[:200]!r}")


def _configmap(name: str) -> bytes:
    return json.dumps({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name},
                       "data": {"key": "value-" * 20}}).encode()


async def bench_core(stack: Stack, concurrency: int, n: int, rounds: int,
                     open_rates: tuple[float, float] | None = None) -> dict[str, Any]:
    """apiary's GET, LIST of 1,000 and CREATE over HTTPS, each measured in rounds beside its baseline:
    raw etcd puts then CREATE, the bare hello-world on the proxy's HTTP stack then GET and LIST. Then
    raw etcd gets (a reference), and GET and CREATE in open loop at half their sustained rate."""
    hello = start_hello(stack)
    import aetcd

    host, etcd_port = stack.etcd_client_url("etcd").removeprefix("http://").split(":")
    etcd = aetcd.Client(host=host, port=int(etcd_port))
    await etcd.connect()
    try:
        ctx = client_ctx(stack)
        await wait_hello(ctx)
        # the connections go to each proxy replica in turn (a load balancer's spreading)
        ports = [int(stack.server_of(r).rsplit(":", 1)[1]) for r in range(stack.replicas)]
        turn = itertools.count()

        def mk() -> Conn:
            return Conn("127.0.0.1", ports[next(turn) % len(ports)], ctx)

        # The same connections serve every round (a TLS handshake per worker and round would weigh on
        # the rounds' few requests): each phase's workers take the next of a fixed set.
        proxy_conns, hello_conns = [mk() for _ in range(concurrency)], [
            Conn("127.0.0.1", HELLO_PORT, ctx) for _ in range(concurrency)]
        pooled, hello_pooled = itertools.cycle(proxy_conns).__next__, itertools.cycle(hello_conns).__next__
        setup = mk()
        for ns in ("bench", "bench-list"):
            body = json.dumps({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}).encode()
            await setup.request("POST", "/api/v1/namespaces", body, JSON_HDR)
        await setup.request("POST", "/api/v1/namespaces/bench/configmaps", _configmap("cm-0"), JSON_HDR)
        names = itertools.count(1)
        value = b"x" * 1024

        async def put(i: int, _: None) -> None:
            await etcd.put(f"/bench/raw/{i}".encode(), value)

        async def etcd_get(i: int, _: None) -> None:
            await etcd.get(f"/bench/raw/{i % 100}".encode())

        async def create(i: int, c: Conn) -> None:
            s, data = await c.request("POST", "/api/v1/namespaces/bench/configmaps",
                                      _configmap(f"cm-{next(names)}"), JSON_HDR)
            if s != 201:
                raise RuntimeError(f"create: {s} {data[:200]!r}")

        async def fill(i: int, c: Conn) -> None:
            await c.request("POST", "/api/v1/namespaces/bench-list/configmaps", _configmap(f"item-{i}"), JSON_HDR)

        async def lst(i: int, c: Conn) -> None:
            s, data = await c.request("GET", "/api/v1/namespaces/bench-list/configmaps",
                                      headers={"Accept": "application/json"})
            # the 1,000 items (the controller-manager's kube-root-ca.crt is there too)
            if s != 200 or data.count(b'"name":"item-') != 1000:
                raise RuntimeError(f"list: {s} {data[:200]!r}")

        async def say_hello(i: int, c: Conn) -> None:
            await c.request("GET", "/hello")

        await drive(1000, concurrency, fill, pooled)
        await drive(concurrency, concurrency, get_configmap, pooled)  # every connection's handshake done
        await drive(concurrency, concurrency, say_hello, hello_pooled)
        apiary, etcd_probe = Probe(stack), Probe(stack, services=("etcd",))
        hello_probe = Probe(stack, services=(), others={"hello": hello.pid})
        per_round = max(1, rounds)
        core = await interleaved(rounds, {
            "etcd_put": lambda: etcd_probe.measure(drive(n // per_round, concurrency, put, lambda: None)),
            "create": lambda: apiary.measure(drive(n // per_round, concurrency, create, pooled)),
            "hello": lambda: hello_probe.measure(drive(2 * n // per_round, concurrency, say_hello, hello_pooled)),
            "get": lambda: apiary.measure(drive(2 * n // per_round, concurrency, get_configmap, pooled)),
            "list": lambda: apiary.measure(drive(max(10, n // 20 // per_round), min(concurrency, 8), lst, pooled)),
        })
        raw_get = await etcd_probe.measure(drive(n, concurrency, etcd_get, lambda: None))
        await etcd.delete_prefix(b"/bench/raw/")
        # Open loop at half the rate each sustained closed-loop (the issue's latency figure).
        seconds = max(3.0, n / 200)
        # A fixed offered rate instead (--open-rate GET,CREATE) compares two builds at the same load:
        # half of a closed-loop rate that moved between them is not the same load.
        get_rate, create_rate = open_rates or (core["get"]["rate"] / 2, core["create"]["rate"] / 2)
        open_get = await open_loop(stack, get_rate, seconds, "GET", GET_PATH, 200, headers=ACCEPT_JSON)
        open_create = await open_loop(stack, create_rate, seconds, "POST", "/api/v1/namespaces/bench/configmaps", 201,
                                      _configmap(f"ol-{next(names)}-$N"), JSON_HDR)
    finally:
        stop_hello(hello)
        await etcd.close()
    return {"hello": core["hello"], "etcd": {"put": core["etcd_put"], "get": raw_get},
            "apiary": {name: core[name] for name in ("get", "list", "create")},
            "open_loop": {"get": open_get, "create": open_create}}


def bench_replicas(concurrency: int, n: int, replicas: int = 2) -> dict[str, dict]:
    """GET and CREATE on a stack with `replicas` processes of every service (one etcd), the load
    spread over its proxies: how the figures scale with replicas (on 2 cores, expect <= 1)."""
    stack = Stack(BENCH_STATE / "replicas", REPLICAS_OFFSET, replicas=replicas)
    stack.start(fresh=True)
    try:
        return asyncio.run(bench_scaled(stack, concurrency, n))
    finally:
        stack.stop(quiet=True)


async def bench_scaled(stack: Stack, concurrency: int, n: int) -> dict[str, dict]:
    """CREATE then GET of configmaps through the stack's proxies (each replica in turn), with the CPU
    of every process per request: the replicas figure, against the same on one replica."""
    ctx = client_ctx(stack)
    ports = [int(stack.server_of(r).rsplit(":", 1)[1]) for r in range(stack.replicas)]
    turn = itertools.count()

    def mk() -> Conn:
        return Conn("127.0.0.1", ports[next(turn) % len(ports)], ctx)

    setup = mk()
    body = json.dumps({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "bench-scaled"}}).encode()
    await setup.request("POST", "/api/v1/namespaces", body, JSON_HDR)
    path = "/api/v1/namespaces/bench-scaled/configmaps"

    async def create(i: int, c: Conn) -> None:
        s, data = await c.request("POST", path, _configmap(f"cm-{i}"), JSON_HDR)
        if s != 201:
            raise RuntimeError(f"create: {s} {data[:200]!r}")

    async def get(i: int, c: Conn) -> None:
        s, data = await c.request("GET", f"{path}/cm-0", headers={"Accept": "application/json"})
        if s != 200:
            raise RuntimeError(f"get: {s} {data[:200]!r}")

    probe = Probe(stack)
    return {"create": await probe.measure(drive(n, concurrency, create, mk)),
            "get": await probe.measure(drive(2 * n, concurrency, get, mk))}


WRITE_OBJECTS = 64


async def bench_writes(stack: Stack, concurrency: int, n: int, rounds: int) -> dict[str, dict]:
    """A plain update (PUT), a server-side apply and a strategic merge patch of the same 3-container
    Deployments (issue 14), each changing one env value of the first container, so each is a real write
    (a spec change: the generation moves) and the patch merges by key twice (containers, then env);
    ratios against the update, measured in rounds (update, apply, patch, update...)."""
    ctx = client_ctx(stack)
    port = int(stack.server.rsplit(":", 1)[1])

    def mk() -> Conn:
        return Conn("127.0.0.1", port, ctx)

    base = "/apis/apps/v1/namespaces/bench-writes/deployments"
    json_hdr = {"Content-Type": "application/json", "Accept": "application/json"}
    setup = mk()
    await setup.request("POST", "/api/v1/namespaces", json.dumps(
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "bench-writes"}}).encode(), json_hdr)

    def container(j: int, value: str) -> dict:
        return {"name": f"c{j}", "image": f"registry.example/app-{j}:1.0",
                "ports": [{"containerPort": 8080 + j, "name": f"http-{j}"}],
                "env": [{"name": "MODE", "value": "bench"}, {"name": "CHANGING", "value": value if j == 0 else "-"}],
                "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}

    def obj(i: int, value: str) -> bytes:
        labels = {"app": "bench", "tier": "x"}
        return json.dumps({"apiVersion": "apps/v1", "kind": "Deployment",
                           "metadata": {"name": f"w-{i % WRITE_OBJECTS}", "labels": labels},
                           "spec": {"replicas": 2, "selector": {"matchLabels": labels},
                                    "template": {"metadata": {"labels": labels}, "spec": {
                                        "containers": [container(j, value) for j in range(3)]}}}}).encode()

    for i in range(WRITE_OBJECTS):
        s, data = await setup.request("PATCH", f"{base}/w-{i}?fieldManager=bench", obj(i, "start"),
                                      {"Content-Type": "application/apply-patch+yaml", "Accept": "application/json"})
        if s not in (200, 201):
            raise RuntimeError(f"apply setup: {s} {data[:200]!r}")

    def checked(verb: str, method: str, query: str, ctype: str, body: Callable[[int], bytes]
                ) -> Callable[[int, Conn], Awaitable[None]]:
        async def one(i: int, c: Conn) -> None:
            s, data = await c.request(method, f"{base}/w-{i % WRITE_OBJECTS}{query}", body(i),
                                      {"Content-Type": ctype, "Accept": "application/json"})
            if s != 200:
                raise RuntimeError(f"{verb}: {s} {data[:200]!r}")
        return one

    def smp(i: int) -> bytes:
        return json.dumps({"spec": {"template": {"spec": {"containers": [
            {"name": "c0", "env": [{"name": "CHANGING", "value": f"p{i}"}]}]}}}}).encode()

    runs = {
        "update": checked("update", "PUT", "?fieldManager=bench-put", "application/json",
                          lambda i: obj(i, f"u{i}")),
        "apply": checked("apply", "PATCH", "?fieldManager=bench&force=true", "application/apply-patch+yaml",
                         lambda i: obj(i, f"a{i}")),
        "patch": checked("patch", "PATCH", "?fieldManager=bench-patch", "application/strategic-merge-patch+json",
                         smp),
    }
    probe = Probe(stack)
    return await interleaved(rounds, {name: (lambda fn=fn: probe.measure(drive(n // rounds, concurrency, fn, mk)))
                                      for name, fn in runs.items()})


def paired(r: dict, base: dict, baseline: str) -> dict[str, Any]:
    """A figure against the baseline measured beside it: the medians of its rounds, the median of the
    per-round ratios of the rates (a single ratio when there were no rounds) and, beside each rate,
    the CPU ms per request of every process (summed in the history) and of the load generator."""
    if r.get("rounds") and base.get("rounds"):
        ratio = ratio_of_rounds(r["rounds"], base["rounds"])
    else:
        ratio = round(r["rate"] / base["rate"], 4)
    out = {**{k: r[k] for k in ("rate", "p50_ms", "p99_ms")}, "baseline": baseline, "baseline_rate": base["rate"],
           "ratio": ratio}
    for prefix, src in (("", r), ("baseline_", base)):
        for key in ("cpu_ms_per_request", "client_cpu_ms_per_request"):
            if key in src:
                out[prefix + key] = src[key]
    return out


def write_figures(raw: dict) -> dict[str, dict]:
    w = raw["writes"]
    return {name: paired(w[name], w["update"], "update") for name in ("apply", "patch")}


POLICY_NS = "bench-policy"
BENCH_POLICY = {
    "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
    "metadata": {"name": "bench-three-expressions"},
    "spec": {"failurePolicy": "Fail",
             "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                                                     "operations": ["CREATE", "UPDATE"],
                                                     "resources": ["configmaps"]}]},
             "validations": [
                 {"expression": "!has(object.data) || size(object.data) <= 16"},
                 {"expression": "object.metadata.name.startsWith('cm-') || object.metadata.name == 'refused'",
                  "message": "names start with cm-"},
                 {"expression": "!has(object.data) || object.data.all(k, size(object.data[k]) < 1024)",
                  "messageExpression": "'value too long in ' + object.metadata.name"}]}}
BENCH_BINDING = {
    "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
    "metadata": {"name": "bench-three-expressions"},
    "spec": {"policyName": "bench-three-expressions", "validationActions": ["Deny"],
             "matchResources": {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": POLICY_NS}}}}}


async def bench_policy(stack: Stack, concurrency: int, n: int) -> dict[str, dict]:
    """CREATE of a configmap without any admission extension, then with one matching ValidatingAdmissionPolicy
    of three expressions (binding by namespaceSelector), alternated twice in the same run; the figures sum
    both rounds of each."""
    ctx = client_ctx(stack)
    port = int(stack.server.rsplit(":", 1)[1])

    def mk() -> Conn:
        return Conn("127.0.0.1", port, ctx)

    json_hdr = {"Content-Type": "application/json", "Accept": "application/json"}
    setup = mk()
    for ns in ("bench-plain", POLICY_NS):
        body = {"apiVersion": "v1", "kind": "Namespace",
                "metadata": {"name": ns, "labels": {"kubernetes.io/metadata.name": ns}}}
        await setup.request("POST", "/api/v1/namespaces", json.dumps(body).encode(), json_hdr)
    await setup.request("POST", "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies",
                        json.dumps(BENCH_POLICY).encode(), json_hdr)
    bindings = "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings"
    seq = iter(range(10**9))

    def creator(ns: str) -> Callable[[int, Conn], Awaitable[None]]:
        async def create(i: int, c: Conn) -> None:
            body = json.dumps({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"cm-{next(seq)}"},
                               "data": {"key": "value-" * 20, "other": "x"}}).encode()
            s, data = await c.request("POST", f"/api/v1/namespaces/{ns}/configmaps", body, json_hdr)
            if s != 201:
                raise RuntimeError(f"create: {s} {data[:200]!r}")
        return create

    async def policy_effective(on: bool) -> None:
        """Until a violating create is refused (on) or accepted (off): the binding arrives by watch."""
        while True:
            body = json.dumps({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"generateName": "x-"}})
            s, _ = await setup.request("POST", f"/api/v1/namespaces/{POLICY_NS}/configmaps", body.encode(),
                                       json_hdr)
            if (s == 422) == on:
                return
            await asyncio.sleep(0.1)

    totals: dict[str, list[dict]] = {"plain": [], "policy": []}
    probe = Probe(stack)

    async def measure(name: str, ns: str) -> None:
        before = probe.snapshot()
        r = await drive(n, concurrency, creator(ns), mk)
        cpu, _ = Probe.per_request(before, probe.snapshot(end=True), r["requests"])
        r["cpu_ms_per_request"] = round(sum(cpu.values()), 3)
        totals[name].append(r)

    for _ in range(2):
        await measure("plain", "bench-plain")
        await setup.request("POST", bindings, json.dumps(BENCH_BINDING).encode(), json_hdr)
        await policy_effective(True)
        await measure("policy", POLICY_NS)
        await setup.request("DELETE", f"{bindings}/bench-three-expressions", b"", json_hdr)
        await policy_effective(False)
    out = {}
    for name, runs in totals.items():
        out[name] = {"rate": round(sum(r["rate"] for r in runs) / len(runs), 1),
                     "p50_ms": round(statistics.median(r["p50_ms"] for r in runs), 2),
                     "p99_ms": max(r["p99_ms"] for r in runs),
                     "cpu_ms_per_request": round(sum(r["cpu_ms_per_request"] for r in runs) / len(runs), 3),
                     "rounds": runs}
    return out


def policy_figures(raw: dict) -> dict[str, dict]:
    p, plain = raw["policy"]["policy"], raw["policy"]["plain"]
    return {"create_vap": {"rate": p["rate"], "p50_ms": p["p50_ms"], "p99_ms": p["p99_ms"],
                           "baseline": "create_plain", "baseline_rate": plain["rate"],
                           "ratio": round(p["rate"] / plain["rate"], 4),
                           "cpu_ms_per_request": p["cpu_ms_per_request"],
                           "baseline_cpu_ms_per_request": plain["cpu_ms_per_request"]}}


def oidc_config(issuer: Issuer) -> str:
    ca = "\n".join("      " + line for line in issuer.ca_pem.strip().splitlines())
    return ("apiVersion: apiserver.config.k8s.io/v1\nkind: AuthenticationConfiguration\njwt:\n"
            f"- issuer:\n    url: {issuer.url}\n    audiences: [apiary]\n    certificateAuthority: |\n{ca}\n"
            "  claimMappings:\n    username: {claim: sub, prefix: 'oidc:'}\n"
            "    groups: {claim: groups, prefix: 'oidc:'}\n")


async def bench_oidc(stack: Stack, issuer: Issuer, concurrency: int, n: int, rounds: int) -> dict[str, dict]:
    """GET of one configmap with a client certificate, then with an OIDC token, both warm and both for
    users with the same view rights (neither in system:masters, so both take an APF seat and a cached
    authorization decision: the figure compares the authentications)."""
    pki = stack.state / "pki"
    certs.make_cert(pki / "bench-user", certs.make_ca(pki / "ca", "apiary-ca"), "cert:bench", client=True)
    port = int(stack.server.rsplit(":", 1)[1])
    admin = Conn("127.0.0.1", port, client_ctx(stack))
    json_hdr = {"Content-Type": "application/json", "Accept": "application/json"}
    for path, obj in (
        ("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "bench-oidc"}}),
        ("/api/v1/namespaces/bench-oidc/configmaps", {"apiVersion": "v1", "kind": "ConfigMap",
                                                     "metadata": {"name": "cm"}, "data": {"key": "value-" * 20}}),
        ("/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", {
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": "bench-oidc-view"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "oidc:bench"},
                         {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "cert:bench"}]}),
    ):
        await admin.request("POST", path, json.dumps(obj).encode(), json_hdr)
    token = issuer.token(sub="bench", lifetime=3600)
    bearer = ssl.create_default_context(cafile=str(stack.state / "pki" / "ca.crt"))
    path = "/api/v1/namespaces/bench-oidc/configmaps/cm"

    async def get(i: int, c: Conn) -> None:
        s, data = await c.request("GET", path, headers={"Accept": "application/json"})
        if s != 200:
            raise RuntimeError(f"get: {s} {data[:200]!r}")

    async def get_token(i: int, c: Conn) -> None:
        s, data = await c.request("GET", path, headers={"Accept": "application/json", "Authorization": f"Bearer {token}"})
        if s != 200:
            raise RuntimeError(f"get with a token: {s} {data[:200]!r}")

    deadline = time.monotonic() + 30   # the RBAC binding reaches the auth service's index
    while (await Conn("127.0.0.1", port, bearer).request("GET", path, headers={"Authorization": f"Bearer {token}"}))[0] != 200:
        if time.monotonic() > deadline:
            raise RuntimeError("the OIDC token was never allowed to GET")
        await asyncio.sleep(0.5)
    cert = client_ctx(stack, "bench-user")
    await drive(n // 5, concurrency, get, lambda: Conn("127.0.0.1", port, cert))   # warm
    await drive(n // 5, concurrency, get_token, lambda: Conn("127.0.0.1", port, bearer))
    probe = Probe(stack)
    return await interleaved(rounds, {
        "get_cert": lambda: probe.measure(drive(2 * n // rounds, concurrency, get,
                                                lambda: Conn("127.0.0.1", port, cert))),
        "get_oidc": lambda: probe.measure(drive(2 * n // rounds, concurrency, get_token,
                                                lambda: Conn("127.0.0.1", port, bearer)))})


def start_hello(stack: Stack) -> subprocess.Popen:
    pki = stack.state / "pki"
    return subprocess.Popen([sys.executable, "-m", "tools.bench", "hello-server", "--port", str(HELLO_PORT),
                             "--cert", str(pki / "apiserver.crt"), "--key", str(pki / "apiserver.key"),
                             "--ca", str(pki / "ca.crt")], cwd=ROOT)


def stop_hello(proc: subprocess.Popen) -> None:
    """Killed, not terminated: uvicorn's graceful shutdown waits ~30 s for the bench's idle keep-alive
    connections, and the baseline server keeps nothing worth a clean exit."""
    proc.kill()
    proc.wait()


async def wait_hello(ctx: ssl.SSLContext) -> None:
    for _ in range(100):
        try:
            await Conn("127.0.0.1", HELLO_PORT, ctx).request("GET", "/hello")
            return
        except OSError:
            await asyncio.sleep(0.1)


def hello_server(port: int, cert: str, key: str, ca: str) -> None:
    """The HTTP stack the proxy runs on (a bare ASGI app on uvicorn, httptools, uvloop, TLS),
    serving a constant: /hello, and /blob?bytes=N (a JSON body of N bytes, the transport floor for
    a response that size)."""
    from urllib.parse import parse_qs

    import uvicorn

    hello = b'{"hello":"world"}'
    blobs: dict[int, bytes] = {}

    async def app(scope, receive, send):  # type: ignore[no-untyped-def]
        if scope["type"] != "http":
            return
        body = hello
        if scope["path"] == "/blob":
            n = min(int(parse_qs(scope["query_string"].decode()).get("bytes", ["0"])[0]), 64 << 20)
            if n not in blobs:
                blobs[n] = b'"' + b"x" * max(0, n - 2) + b'"'
            body = blobs[n]
        elif scope["path"] != "/hello":
            await send({"type": "http.response.start", "status": 404, "headers": []})
            await send({"type": "http.response.body", "body": b""})
            return
        await send({"type": "http.response.start", "status": 200, "headers": [
            (b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})

    # kept alive between the rounds of `make bench`, as the proxy keeps its (--idle-timeout 90s)
    uvicorn.run(app, host="127.0.0.1", port=port, ssl_certfile=cert, ssl_keyfile=key, ssl_ca_certs=ca,
                ssl_cert_reqs=ssl.CERT_OPTIONAL, http="httptools", loop="uvloop", log_level="warning",
                access_log=False, lifespan="off", timeout_keep_alive=90)


EXTRA_FIGURES = ("replicas_get", "replicas_create", "watch_pizzas_100", "list_10k", "storage_memory", "watch_fanout",
                 "watch_fanout_single_100", "watch_https_200", "watch_https_1000", "rbac_inprocess", "auth_grpc",
                 "crd_established", "apf_fairness", "apf_fairness_hand_1")


def measured(r: dict) -> str:
    """The figure's measured value as `key value` (its first key: rate, rss_delta_mb, ...)."""
    key = next(iter(r))
    return f"{key} {r[key]}"


def record(results: dict, raw: dict, path: Path) -> None:
    today = dt.date.today().isoformat()
    lines = [f"\n## {today}\n", "| figure | rate/s | p50 ms | p99 ms | baseline | baseline rate/s | ratio |",
             "|---|---|---|---|---|---|---|"]
    for name, r in results.items():
        if name in EXTRA_FIGURES:
            continue
        lines.append(f"| {name} | {r['rate']} | {r['p50_ms']} | {r['p99_ms']} | {r['baseline']} | "
                     f"{r['baseline_rate']} | {r['ratio']} |")
    lines.append("\nCPU ms per request by process, and gRPC calls per request:\n")
    for name in ("get", "list", "create"):
        r = raw["apiary"][name]
        cpu = ", ".join(f"{k} {v}" for k, v in r["cpu_ms_per_request"].items() if v)
        hops = ", ".join(f"{k} {v}" for k, v in r["grpc_calls_per_request"].items())
        lines.append(f"- {name}: CPU {cpu}; gRPC {hops}")
    extra = [n for n in EXTRA_FIGURES if n in results]
    if extra:
        lines += ["\nStorage scale (tools/bench_storage.py), the watch through the aggregation proxy "
                  "(tools/bench_pizza.py) and RBAC (tools/bench_rbac.py); "
                  "p50/p99 empty: beyond the measurement window or not a latency figure:\n",
                  "| figure | measured | p50 ms | p99 ms | baseline | baseline value | ratio | notes |",
                  "|---|---|---|---|---|---|---|---|"]
        for name in extra:
            r = results[name]
            lines.append(f"| {name} | {measured(r)} | {_cell(r.get('p50_ms'))} | {_cell(r.get('p99_ms'))} | "
                         f"{r['baseline']} | {r['baseline_rate']} | {_cell(r.get('ratio'))} | {extra_notes(name, r)} |")
    with path.open("a") as f:
        f.write("\n".join(lines) + "\n")


def _cell(v: object) -> str:
    return "" if v is None else str(v)


OPEN_LOOP_FIGURES = ("get_open_loop", "create_open_loop")


def open_loop_notes(r: dict) -> str:
    """Whether an open-loop figure measured the stack or the machine: how busy the machine's cores were
    and how much of that was the stack and the load generator, each process's wait for a CPU per request,
    and the slowest 1 %'s Server-Timing stages beside the median's (a tail whose stages are no longer
    than the median's waited outside the server: for a connection, or for a CPU)."""
    def share(ms: float) -> float:  # of the machine's cores, at the phase's rate
        return round(100 * ms * r["rate"] / 1000 / (os.cpu_count() or 1), 1)

    stack_ms, client_ms = sum(r["cpu_ms_per_request"].values()), r.get("client_cpu_ms_per_request") or 0
    waits = r.get("run_queue_ms_per_request") or {}
    top = ", ".join(f"{k} {v}" for k, v in sorted(waits.items(), key=lambda kv: -kv[1])[:4] if v)

    def stages(d: dict) -> str:
        return ", ".join(f"{k} {v}" for k, v in d.items())

    st = r.get("stages") or {}
    return (f"machine {r.get('machine_busy_pct')} % busy: this stack {share(stack_ms)} % ({stack_ms:.3f} ms/req), "
            f"its load generator {share(client_ms)} % ({client_ms} ms/req); "
            f"run-queue wait ms/req: {top or 'none'}; slowest 1 % (ms): {stages(st.get('tail', {}))}; "
            f"median: {stages(st.get('median', {}))}")


def extra_notes(name: str, r: dict) -> str:
    if name in OPEN_LOOP_FIGURES:
        return open_loop_notes(r)
    if name == "list_10k":
        return (f"{r['objects']} objects, {r['response_bytes']} B: {r['seconds']} s through HTTPS vs "
                f"{r['baseline_rate']} s for the same bytes from a bare HTTPS handler; goal ratio <= "
                f"{r['goal_ratio']}; CPU ms per LIST {r['cpu_ms_per_request']} (bare handler "
                f"{r['baseline_cpu_ms_per_request']}); the storage service's List alone {r.get('storage_seconds')} s; "
                f"orjson encode of the same list {r.get('encode_seconds')} s")
    if name == "storage_memory":
        return (f"{r['objects']} objects, {r['bytes_per_object']} B RSS vs {r['json_bytes_per_object']} B JSON "
                f"each (the cache's structures alone, counted by tracemalloc in process: "
                f"{r.get('inprocess_cache_bytes_per_object')} B); goal ratio <= {r['goal_ratio']}")
    if name == "watch_pizzas_100":
        return (f"through the proxy, {r['watchers']} watcher of {r['objects']} pizzas, {r['write_rate']} writes/s "
                f"(straight to the pizza server), delivered {r['delivered']}/{r['expected']}, {r['write_errors']} "
                f"write errors; baseline: the same watch straight to the pizza server (p50 {r['baseline_p50_ms']} ms, "
                f"{r['baseline_write_rate']} writes/s)")
    if name.startswith("apf_fairness"):
        return (f"1 seat, 64 queues, hand of {r['hand_size']}; the quiet user at capacity/10 "
                f"({r['capacity_per_s']}/s), the noisy at 20x: quiet {r['ratio']} of {r['quiet_sent']} completed, "
                f"APF wait p99 {r['p99_ms']} ms = {r['wait_ratio']}x its service ({r['baseline_rate']} ms; "
                f"{r['service_alone_ms']} ms alone); noisy {r['noisy_completed']} of {r['noisy_sent']} completed, "
                f"{r['noisy_rejected']} 429s, wait p50 {r['noisy_wait_p50_ms']} ms; kube's QueueSet alone "
                f"(tools/apf_sim.py): p99 wait {r.get('sim_wait_ratio_fixed')}x a fixed service, "
                f"{r.get('sim_wait_ratio')}x the median at this run's seat times")
    if name == "crd_established":
        return (f"CRD create to Established and its collection listed through the proxy, {r['crds']} CRDs one "
                f"after another: p90 {r['p90_ms']} ms (Established alone: p50 {r['established_p50_ms']} ms, p90 "
                f"{r['established_p90_ms']} ms); each {r['times_ms']} ms")
    if name.startswith(("watch_fanout", "watch_https")):
        cpu = f"storage CPU {r['storage_cpu_s']} s"
        if r.get("proxy_cpu_s") is not None:
            cpu += (f", registry {r['registry_cpu_s']} s, proxy {r['proxy_cpu_s']} s; per delivery: proxy "
                    f"{r['proxy_cpu_us_per_delivery']} µs, registry {r['registry_cpu_us_per_delivery']} µs, storage "
                    f"{r['storage_cpu_us_per_delivery']} µs, the watch clients' own {r['generator_cpu_us_per_delivery']} µs "
                    f"({r['generator_processes']} processes)")
        return (f"{r['via']}, {r['watchers']} watchers, {r['write_rate']} writes/s, delivered "
                f"{r['delivered']}/{r['expected']} within {r['window_s']} s, {cpu}, "
                f"{r['write_errors']} write errors")
    return ""


def aggregation_figures(pizza: dict) -> dict[str, dict]:
    """bench.json entries of tools/bench_pizza.py's run (through_proxy)."""
    def figure(r: dict, baseline: str, base: dict) -> dict:
        return {**{k: r[k] for k in ("rate", "p50_ms", "p99_ms")}, "baseline": baseline,
                "baseline_rate": base["rate"], "ratio": round(r["rate"] / base["rate"], 4)}

    direct, proxied = pizza["get_direct_admin"], pizza["get_proxy"]
    out = {"aggregation_get": paired(proxied, direct, "pizza_get"),
           "pizza_get_cold_authz": figure(pizza["get_cold_authz"], "pizza_get_warm", pizza["get_direct"])}
    wd, wp = pizza["watch_direct"], pizza["watch_proxy"]
    out["watch_pizzas_100"] = {"p99_ms": wp["p99_ms"], "p50_ms": wp["p50_ms"], "baseline": "watch_direct_p99_ms",
                               "baseline_rate": wd["p99_ms"], "ratio": wp.get("ratio"), "ratio_is_cost": True,
                               "baseline_p50_ms": wd["p50_ms"], "baseline_write_rate": wd["write_rate"],
                               **{k: wp[k] for k in ("write_rate", "delivered", "expected", "write_errors",
                                                     "watchers", "objects")}}
    return out


def storage_figures(raw: dict) -> dict[str, dict]:
    """bench.json entries for the storage-scale and RBAC runs (same keys as the others, plus extras)."""
    out = dict(raw.get("storage", {}))
    rbac = raw.get("rbac")
    if rbac:
        inproc, grpc_ = rbac["rbac_inprocess"], rbac["auth_grpc"]
        out["rbac_inprocess"] = {"rate": inproc["rate"], "p50_ms": None, "p99_ms": None,
                                 "baseline": "goal_decisions_per_s", "baseline_rate": 50_000,
                                 "ratio": round(inproc["rate"] / 50_000, 2),
                                 **{k: v for k, v in inproc.items() if k != "rate"}}
        out["auth_grpc"] = {"rate": grpc_["rate"], "p50_ms": None, "p99_ms": None, "baseline": "rbac_inprocess",
                            "baseline_rate": inproc["rate"], "ratio": round(grpc_["rate"] / inproc["rate"], 4),
                            **{k: v for k, v in grpc_.items() if k != "rate"}}
    return out


T = TypeVar("T")


def core_figures(raw: dict) -> dict[str, dict]:
    """get and list against the bare HTTP stack, create against raw etcd puts (same rounds); GET and
    CREATE in open loop at half their sustained rate against the goals' p99 (ratio = p99 / goal)."""
    out = {"get": paired(raw["apiary"]["get"], raw["hello"], "http_hello"),
           "list": paired(raw["apiary"]["list"], raw["hello"], "http_hello"),
           "create": paired(raw["apiary"]["create"], raw["etcd"]["put"], "etcd_put")}
    for name in ("get", "create"):
        out[f"{name}_open_loop"] = open_loop_figure(raw["open_loop"][name], OPEN_LOOP_GOALS[name])
    return out


OPEN_LOOP_GOALS = {"get": 20.0, "create": 50.0}  # p99 ms (issue 24)


def open_loop_figure(r: dict, goal: float) -> dict[str, Any]:
    """An open-loop phase against its goal's p99 (ratio = p99 / goal)."""
    return {"p99_ms": r["p99_ms"], "p50_ms": r["p50_ms"], "rate": r["rate"], "baseline": "goal_p99_ms",
            "baseline_rate": goal, "ratio": round(r["p99_ms"] / goal, 2), "ratio_is_cost": True,
            "offered_rate": r["offered_rate"], "max_in_flight": r["max_in_flight"],
            "cpu_ms_per_request": r["cpu_ms_per_request"], "client_cpu_ms_per_request": r["client_cpu_ms_per_request"],
            "run_queue_ms_per_request": r.get("run_queue_ms_per_request", {}),
            "machine_busy_pct": r.get("machine_busy_pct"), "stages": r.get("stages", {})}


def on_fresh_stack(measure: Callable[[Stack], T]) -> T:
    """measure(stack) on a fresh bench stack, stopped afterwards (the single-figure modes)."""
    stack = Stack(BENCH_STATE, BENCH_OFFSET)
    stack.start(fresh=True)
    try:
        return measure(stack)
    finally:
        stack.stop(quiet=True)


def _cpu(v: object) -> str:
    """CPU ms per request summed over the processes (a dict by process), or the one number."""
    if isinstance(v, dict):
        return f"{sum(v.values()):.3f}"
    return "" if v is None else str(v)


# Beside a figure's measured value, the other numbers whose moves are shown (its goals' and cost's).
NOTED_FIELDS = ("ratio", "p99_ms", "cpu_ms_per_request", "proxy_cpu_us_per_delivery", "delivered_pct")


def history_note(name: str, r: dict, verdicts: dict[str, bench_history.Verdict]) -> str:
    """Beside a figure: its measured value's previous run, known spread and flag, then those of
    NOTED_FIELDS that moved beyond their spread."""
    main_key = next(iter(r))
    verdict = verdicts.get(f"{name}.{main_key}")
    parts = [verdict.describe() if verdict else "new"]
    for field in NOTED_FIELDS:
        v = verdicts.get(f"{name}.{field}")
        if field != main_key and v is not None and v.flag():
            parts.append(f"{field} {v.flag()} (prev {v.previous})")
    return "; ".join(parts)


def figure_lines(results: dict[str, dict], verdicts: dict[str, bench_history.Verdict]) -> list[str]:
    """Every figure on a line: its value, latency, baseline and ratio, the CPU ms per request of the
    servers (summed; its baseline's beside it) and of the load generator, and its history."""
    lines = [f"{'figure':24} {'measured':>24} {'p50 ms':>8} {'p99 ms':>8}  {'baseline':22} {'value':>9} "
             f"{'ratio':>7} {'CPU ms/req':>10} {'baseline':>8} {'bench':>6}  vs previous run"]
    for name, r in results.items():
        lines.append(f"{name:24} {measured(r):>24} {_cell(r.get('p50_ms')):>8} {_cell(r.get('p99_ms')):>8}  "
                     f"{str(r.get('baseline', '')):22} {_cell(r.get('baseline_rate')):>9} {_cell(r.get('ratio')):>7} "
                     f"{_cpu(r.get('cpu_ms_per_request')):>10} {_cpu(r.get('baseline_cpu_ms_per_request')):>8} "
                     f"{_cpu(r.get('client_cpu_ms_per_request')):>6}  {history_note(name, r, verdicts)}")
        if name in (*EXTRA_FIGURES, *OPEN_LOOP_FIGURES) and (notes := extra_notes(name, r)):
            lines.append(f"{'':24} {notes}")
    return lines


def timed(phases: dict[str, float], name: str, fn: Callable[[], T]) -> T:
    """fn(), its wall-clock seconds kept under name and printed as it ends (so the run's duration can be
    seen phase by phase, and a slow phase while the run goes on)."""
    t = time.perf_counter()
    try:
        return fn()
    finally:
        phases[name] = round(time.perf_counter() - t, 1)
        print(f"phase {name}: {phases[name]} s (load average {os.getloadavg()[0]:.1f})", flush=True)


def main() -> None:
    # The load generator reads multi-MB answers like the services do (services/common/runtime.py).
    tune_malloc()
    p = argparse.ArgumentParser(prog="python -m tools.bench")
    p.add_argument("mode", nargs="?", default="run",
                   choices=["run", "core", "open", "writes", "policy", "replicas", "aggregation", "watch", "workers", "crd",
                            "envtest", "apf", "tracing", "hello-server"],
                   help="run: every figure; core: only get, list and create with their baselines and the CPU "
                   "per request of each service, and the open-loop figures; open: only the open-loop GET, "
                   "--rounds times on one stack, each round at half the closed-loop GET rate just measured (or "
                   "--open-rate's first); writes: only the apply and patch "
                   "figures; policy: only CREATE with and without a ValidatingAdmissionPolicy; replicas: only GET "
                   "and CREATE with 2 replicas of every service against 1; aggregation: only the GET of a pizza "
                   "through the proxy against straight to the pizza server, --rounds times; watch: only the HTTPS "
                   "watch fan-out figures (watch_https_200, watch_https_1000), --rounds times on one stack; workers: GET "
                   "and the two HTTPS watch figures with the proxy's --workers 2 against 1, --rounds times; crd: only "
                   "the custom resources' figures (crd_create, crd_get, crd_established); apf: only the cost of "
                   "the priority-and-fairness gate (apf_gate), --rounds rounds; tracing: only tracing's cost "
                   "(tools/bench_tracing.py; its own rounds and sizes unless given); envtest: "
                   "apiary as a test cluster (tools/bench_envtest.py: `apiary up` cold and warm, `apiary down`, "
                   "memory at rest, the pytest plugin's session, a 50-test operator suite), --runs times")
    p.add_argument("--quick", action="store_true",
                   help="run: the issue's goals only, at small sizes (within 2 minutes; `make bench QUICK=1`); "
                   "kept in the history apart from full runs")
    p.add_argument("--runs", type=int, help="envtest: cold starts (default 5, quick 3)")
    p.add_argument("--profile", choices=("compact", "full"), default="compact",
                   help="envtest: the cluster's processes (default compact, the pytest plugin's; full: one per service)")
    p.add_argument("--rounds", type=int, help="rounds of each baseline and its figure (default 3, quick 2)")
    p.add_argument("--concurrency", type=int, default=32)
    p.add_argument("--open-rate", help="GET,CREATE requests/s for the open-loop figures (default: half of "
                   "each sustained closed-loop rate of the same run)")
    p.add_argument("-n", type=int, help="requests per figure over all rounds (GET runs 2n; default 1500, quick 1000)")
    p.add_argument("--history", type=Path, help="the history file to compare with and append to (default "
                   "docs/bench-history/<machine>.jsonl)")
    p.add_argument("--no-history", action="store_true", help="compare with the history but do not append this run")
    p.add_argument("--record", action="store_true", help="append the figures to docs/benchmarks.md")
    p.add_argument("--port", type=int)
    p.add_argument("--cert")
    p.add_argument("--key")
    p.add_argument("--ca")
    args = p.parse_args()
    if args.mode == "hello-server":
        hello_server(args.port, args.cert, args.key, args.ca)
        return
    n = args.n or (1000 if args.quick else 1500)
    rounds = args.rounds or (2 if args.quick else 3)
    if args.mode == "core":
        core = on_fresh_stack(lambda st: asyncio.run(bench_core(
            st, args.concurrency, n, rounds,
            tuple(float(x) for x in args.open_rate.split(",")) if args.open_rate else None)))
        print(json.dumps(core, indent=1))
        print("\n".join(figure_lines(core_figures(core), {})))
        return
    if args.mode == "open":
        open_get_rounds(args, n, rounds)
        return
    if args.mode == "writes":
        raw_writes = {"writes": on_fresh_stack(lambda st: asyncio.run(bench_writes(st, args.concurrency, n, rounds)))}
        print("\n".join(figure_lines(write_figures(raw_writes), {})))
        return
    if args.mode == "policy":
        raw = {"policy": on_fresh_stack(lambda st: asyncio.run(bench_policy(st, args.concurrency, n)))}
        r = policy_figures(raw)["create_vap"]
        print(f"create, no admission extension: {r['baseline_rate']}/s; with one matching "
              f"ValidatingAdmissionPolicy of three expressions: {r['rate']}/s (p50 {r['p50_ms']} ms, "
              f"p99 {r['p99_ms']} ms); ratio {r['ratio']} (cost {round((1 - r['ratio']) * 100, 1)} %); CPU of "
              f"the apiary processes per create {r['baseline_cpu_ms_per_request']} ms -> {r['cpu_ms_per_request']} ms")
        print(json.dumps(raw["policy"], indent=1))
        return
    if args.mode == "aggregation":
        from tools import bench_pizza

        agg = on_fresh_stack(lambda st: bench_pizza.aggregation_rounds(st, args.concurrency // 2, n, rounds))
        for i, r in enumerate(agg["rounds"]):
            d, p_ = r["get_direct_admin"], r["get_proxy"]
            print(f"round {i + 1}: through the proxy {p_['rate']}/s (p50 {p_['p50_ms']} ms), straight "
                  f"{d['rate']}/s (p50 {d['p50_ms']} ms), ratio {r['ratio']}")
            print(f"  CPU ms/request through the proxy {p_['cpu_ms_per_request']}")
            print(f"  CPU ms/request straight {d['cpu_ms_per_request']}")
        print(f"aggregation_get ratios {agg['ratios']}, median {agg['median_ratio']}")
        (ROOT / ".apiary" / "bench-aggregation.json").write_text(json.dumps(agg, indent=2))
        return
    if args.mode == "watch":
        watch_rounds(args.quick, rounds)
        return
    if args.mode == "workers":
        workers_rounds(args.concurrency, n, rounds, args.quick)
        return
    if args.mode == "crd":
        crd_only(args, n, rounds)
        return
    if args.mode == "apf":
        from tools import bench_apf_gate

        raw_apf = on_fresh_stack(lambda st: asyncio.run(bench_apf_gate.bench(st, args.concurrency, n, rounds)))
        for i, (on, off) in enumerate(zip(raw_apf["get_apf"]["rounds"], raw_apf["get_apf_off"]["rounds"])):
            print(f"round {i + 1}: APF on {on['rate']}/s (p50 {on['p50_ms']} ms), off {off['rate']}/s "
                  f"(p50 {off['p50_ms']} ms), ratio {round(on['rate'] / off['rate'], 4)}")
        for name in ("get_apf", "get_apf_off"):
            print(f"{name}: CPU ms/request {raw_apf[name]['cpu_ms_per_request']}")
        print("\n".join(figure_lines(bench_apf_gate.figures(raw_apf), {})))
        return
    if args.mode == "tracing":
        from tools import bench_tracing

        bench_tracing.main(["--concurrency", str(args.concurrency), *(["--quick"] if args.quick else []),
                            *(["--rounds", str(args.rounds)] if args.rounds else []),
                            *(["-n", str(args.n)] if args.n else [])])
        return
    if args.mode == "envtest":
        envtest(args.runs or (3 if args.quick else 5), args.profile)
        return
    if args.mode == "replicas":
        one = on_fresh_stack(lambda st: asyncio.run(bench_scaled(st, args.concurrency, n)))
        two = bench_replicas(args.concurrency, n)
        for name in ("get", "create"):
            print(f"{name}: 1 replica {one[name]['rate']}/s, 2 replicas {two[name]['rate']}/s, ratio "
                  f"{round(two[name]['rate'] / one[name]['rate'], 4)}")
            print(f"  CPU ms/request, 1 replica: {one[name]['cpu_ms_per_request']}")
            print(f"  CPU ms/request, 2 replicas (both): {two[name]['cpu_ms_per_request']}")
        return
    run(args, n, rounds)


WORKERS_OFFSET = BENCH_OFFSET + 300


def workers_rounds(concurrency: int, n: int, rounds: int, quick: bool) -> None:
    """The proxy with 2 workers against 1 (`--workers`): GET rate (closed loop) and the HTTPS watch
    fan-out (200 watchers at 100 writes/s, 1,000 at 20/s), a fresh stack per figure set, alternated
    1, 2, 1, 2...; CPU per request and per delivery summed over the proxy's processes."""
    from tools import bench_storage

    seconds, drain = (3.0, 5.0) if quick else (10.0, 10.0)
    results: dict[int, list[dict[str, dict]]] = {1: [], 2: []}
    for _ in range(rounds):
        for workers in (1, 2):
            stack = Stack(BENCH_STATE / "workers", WORKERS_OFFSET, proxy_workers=workers)
            stack.start(fresh=True)
            try:
                load = os.getloadavg()[0]
                got = {"get": asyncio.run(bench_scaled(stack, concurrency, n))["get"],
                       "watch_https_200": bench_storage.watch_fanout_https(stack, seconds=seconds, drain=drain),
                       "watch_https_1000": bench_storage.watch_fanout_https(stack, watchers=1000, rate=20.0,
                                                                             seconds=seconds, drain=drain)}
            finally:
                stack.stop(quiet=True)
            results[workers].append(got)
            g = got["get"]
            print(f"workers {workers} (load average {load:.1f}): GET {g['rate']}/s p99 {g['p99_ms']} ms, proxy CPU "
                  f"{g['cpu_ms_per_request'].get('proxy')} ms/GET", flush=True)
            for name in ("watch_https_200", "watch_https_1000"):
                r = got[name]
                print(f"  {name}: {r['deliveries_per_s']} deliveries/s, p50 {r['p50_ms']} ms, p99 {r['p99_ms']} ms, "
                      f"delivered {r['delivered_pct']} %, proxy CPU {r['proxy_cpu_us_per_delivery']} µs/delivery, "
                      f"watch clients {r['generator_cpu_us_per_delivery']} µs", flush=True)
    get = [two["get"]["rate"] / one["get"]["rate"] for one, two in zip(results[1], results[2])]
    print(f"GET rate, 2 workers ÷ 1, per round: {[round(x, 2) for x in get]}, median {statistics.median(get):.2f}")


async def bench_open_get(stack: Stack, concurrency: int, n: int, rounds: int,
                         rate: float | None = None) -> list[dict[str, Any]]:
    """Only the open-loop GET figure, --rounds times on one stack: each round the closed-loop GET (as in
    bench_core) then half its rate, or the rate given, in open loop."""
    ctx = client_ctx(stack)
    port = int(stack.server.rsplit(":", 1)[1])
    pooled = itertools.cycle([Conn("127.0.0.1", port, ctx) for _ in range(concurrency)]).__next__
    setup = pooled()
    await setup.request("POST", "/api/v1/namespaces", json.dumps(
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "bench"}}).encode(), JSON_HDR)
    await setup.request("POST", "/api/v1/namespaces/bench/configmaps", _configmap("cm-0"), JSON_HDR)
    await drive(concurrency, concurrency, get_configmap, pooled)  # every connection's handshake done
    probe = Probe(stack)
    out = []
    for _ in range(rounds):
        closed = await probe.measure(drive(2 * n // rounds, concurrency, get_configmap, pooled))
        r = await open_loop(stack, rate or closed["rate"] / 2, max(3.0, n / 200), "GET", GET_PATH, 200,
                            headers=ACCEPT_JSON)
        out.append({**r, "closed_loop": closed})
    return out


def open_get_rounds(args: argparse.Namespace, n: int, rounds: int) -> None:
    """`python -m tools.bench open`: the open-loop GET figure alone, each round's line with its notes."""
    rate = float(args.open_rate.split(",")[0]) if args.open_rate else None
    load_average = os.getloadavg()
    got = on_fresh_stack(lambda st: asyncio.run(bench_open_get(st, args.concurrency, n, rounds, rate)))
    (ROOT / ".apiary").mkdir(exist_ok=True)
    (ROOT / ".apiary" / "bench-open.json").write_text(json.dumps(got, indent=1))
    for i, r in enumerate(got):
        c = r["closed_loop"]
        print(f"round {i + 1}: closed loop {c['rate']}/s (CPU ms/GET {sum(c['cpu_ms_per_request'].values()):.3f}, "
              f"the bench's own {c['client_cpu_ms_per_request']}); open loop offered {r['offered_rate']}/s, max "
              f"in flight {r['max_in_flight']}")
        print("\n".join(figure_lines({"get_open_loop": open_loop_figure(r, OPEN_LOOP_GOALS["get"])}, {})))
    print(f"load average {load_average[0]:.2f} at the start, {os.getloadavg()[0]:.2f} at the end")


def watch_rounds(quick: bool, rounds: int) -> None:
    """The two HTTPS watch fan-out figures, one after the other in each round, on one fresh stack."""
    from tools import bench_storage

    seconds, drain = (3.0, 5.0) if quick else (10.0, 10.0)

    def measure(st: Stack) -> list[dict[str, dict]]:
        return [{"watch_https_200": bench_storage.watch_fanout_https(st, seconds=seconds, drain=drain),
                 "watch_https_1000": bench_storage.watch_fanout_https(st, watchers=1000, rate=20.0,
                                                                       seconds=seconds, drain=drain)}
                for _ in range(rounds)]

    for i, figures in enumerate(on_fresh_stack(measure)):
        for name, r in figures.items():
            print(f"round {i + 1} {name}: p50 {r['p50_ms']} ms, p99 {r['p99_ms']} ms, delivered "
                  f"{r['delivered_pct']} %, CPU µs per delivery: proxy {r['proxy_cpu_us_per_delivery']}, registry "
                  f"{r['registry_cpu_us_per_delivery']}, storage {r['storage_cpu_us_per_delivery']}, watch clients "
                  f"{r['generator_cpu_us_per_delivery']} (load average {os.getloadavg()[0]:.1f})")


def crd_only(args: argparse.Namespace, n: int, rounds: int) -> None:
    """The custom resources' figures on a fresh stack, with their goals and the CPU per request of each process."""
    from tools import bench_crd

    load_average = os.getloadavg()
    raw = on_fresh_stack(lambda st: bench_crd.run(st, args.concurrency, n, rounds))
    (ROOT / ".apiary" / "bench-crd.json").write_text(json.dumps(raw, indent=2))
    results = bench_crd.figures(raw)
    print(f"concurrency {args.concurrency}, {rounds} rounds, {raw['object_bytes']} B objects created "
          f"(GET answers {raw['get_bytes']} B), load average "
          f"{load_average[0]:.2f} {load_average[1]:.2f} {load_average[2]:.2f} at the start, "
          f"{os.getloadavg()[0]:.2f} at the end")
    print("\n".join(figure_lines(results, {})))
    for name in ("configmap_create", "create", "configmap_get", "get"):
        print(f"{name}: CPU ms/request {raw[name]['cpu_ms_per_request']}, gRPC calls/request "
              f"{raw[name]['grpc_calls_per_request']}")
    figures = bench_history.flatten(results)
    print("\n".join(line for line in goal_lines(figures, {}) if "CRD" in line or "custom" in line))


def envtest(runs: int, profile: str = "compact") -> None:
    """issue 23's figures, against their goals; the raw figures in .apiary/bench-envtest.json."""
    from tools import bench_envtest

    r = bench_envtest.bench(runs, profile)
    (ROOT / ".apiary").mkdir(exist_ok=True)
    (ROOT / ".apiary" / "bench-envtest.json").write_text(json.dumps(r, indent=1))
    print(json.dumps(r, indent=1))
    print(f"\n{runs} runs, profile {profile}, load average {r['load_average_start']} at the start, {r['load_average_end']} at the end")
    print("\n".join(goal_lines(bench_envtest.figures(r), {}, ENVTEST_GOALS)))


def run(args: argparse.Namespace, n: int, rounds: int) -> None:
    """Every figure (or, quick, those of issue 24's goals at small sizes), printed beside the previous
    run's and the goals; appended to the history."""
    from tools import bench_apf, bench_apf_gate, bench_crd, bench_pizza, bench_storage, bench_webhooks
    from tools.bench_tracing import QUICK_N, QUICK_ROUNDS, ROUNDS, N
    from tools.bench_tracing import figures as tracing_figures
    from tools.bench_tracing import report as tracing_report
    from tools.bench_tracing import run as tracing_run

    began = time.perf_counter()
    load_average = os.getloadavg()[0]
    phases: dict[str, float] = {}
    issuer = Issuer(BENCH_STATE / "oidc", "bench-issuer").start()
    authn_config = BENCH_STATE / "oidc" / "authentication-config.yaml"
    authn_config.write_text(oidc_config(issuer))
    stack = Stack(BENCH_STATE, BENCH_OFFSET, extra={"auth": ["--authentication-config", str(authn_config)]})
    c = args.concurrency
    raw: dict[str, Any] = {}
    # The memory figure on a stack that has done nothing else: after the other phases the RSS delta
    # depends on what they freed (malloc reuses it for the cache), 1.65 one day and 2.23 the next.
    # (100,000 objects quick or not: with 20,000 a start's few MB moved it by a third)
    memory = timed(phases, "storage_memory", lambda: on_fresh_stack(bench_storage.storage_memory))
    try:
        timed(phases, "start", lambda: stack.start(fresh=True))
        raw.update(timed(phases, "core", lambda: asyncio.run(bench_core(stack, c, n, rounds))))
        if not args.quick:
            raw["oidc"] = timed(phases, "oidc", lambda: asyncio.run(bench_oidc(stack, issuer, c, n, rounds)))
            raw["apf_gate"] = timed(phases, "apf_gate", lambda: asyncio.run(bench_apf_gate.bench(stack, c, n, rounds)))
            raw["writes"] = timed(phases, "writes", lambda: asyncio.run(bench_writes(stack, c, n, rounds)))
            raw["policy"] = timed(phases, "policy", lambda: asyncio.run(bench_policy(stack, c, n)))
            raw["pizza"] = timed(phases, "pizza", lambda: bench_pizza.run(stack, c // 2, n, through_proxy=True,
                                                                          rounds=rounds))
            raw["webhooks"] = timed(phases, "webhooks", lambda: bench_webhooks.run(stack, c, n))
            raw["crd"] = timed(phases, "crd", lambda: bench_crd.run(stack, c, n, rounds))
        raw["storage"] = {"storage_memory": memory,
                          **timed(phases, "storage", lambda: bench_storage.run(stack, quick=args.quick, memory=False))}
    finally:
        stack.stop(quiet=True)
        issuer.stop()
    raw["apf"] = timed(phases, "apf", lambda: bench_apf.run(BENCH_STATE / "apf", bench_apf.APF_OFFSET,
                                                            6.0 if args.quick else 20.0))
    raw["tracing"] = timed(phases, "tracing", lambda: tracing_run(
        c, QUICK_N if args.quick else N, QUICK_ROUNDS if args.quick else ROUNDS))
    if not args.quick:
        raw["replicas"] = timed(phases, "replicas", lambda: bench_replicas(c, n))
        from tools import bench_rbac

        raw["rbac"] = timed(phases, "rbac", bench_rbac.run)
    results = core_figures(raw)
    if not args.quick:
        results["get_oidc"] = paired(raw["oidc"]["get_oidc"], raw["oidc"]["get_cert"], "get_cert")
        results.update(bench_apf_gate.figures(raw["apf_gate"]))
    results["etcd_get"] = {**{k: raw["etcd"]["get"][k] for k in ("rate", "p50_ms", "p99_ms")},
                           "baseline": "etcd_get", "baseline_rate": raw["etcd"]["get"]["rate"], "ratio": 1.0,
                           "cpu_ms_per_request": raw["etcd"]["get"]["cpu_ms_per_request"]}
    if not args.quick:
        results.update(write_figures(raw))
        results.update(bench_webhooks.figures(raw["webhooks"]))
        results.update(aggregation_figures(raw["pizza"]))
        results.update(bench_crd.figures(raw["crd"]))
    results.update(storage_figures(raw))
    results.update(bench_apf.figures(raw["apf"]))
    results.update(tracing_figures(raw["tracing"]))
    if not args.quick:
        results.update(policy_figures(raw))
        for name in ("get", "create"):
            two, one = raw["replicas"][name], raw["apiary"][name]
            results[f"replicas_{name}"] = {
                "rate": two["rate"], "p50_ms": two["p50_ms"], "p99_ms": two["p99_ms"],
                "baseline": f"{name}, 1 replica", "baseline_rate": one["rate"],
                "ratio": round(two["rate"] / one["rate"], 4), "cpu_ms_per_request": two["cpu_ms_per_request"],
                "baseline_cpu_ms_per_request": one["cpu_ms_per_request"]}
    out = ROOT / ".apiary" / "bench.json"
    out.write_text(json.dumps(results, indent=2))
    (ROOT / ".apiary" / "bench-raw.json").write_text(json.dumps(raw, indent=2))

    mode = "quick" if args.quick else "full"
    history = args.history or bench_history.HISTORY_DIR / f"{bench_history.machine()}.jsonl"
    figures = bench_history.flatten(results)
    verdicts = bench_history.compare(figures, bench_history.load(history, mode))
    print(f"\n{mode} run, concurrency {c}, {rounds} rounds of each baseline and its figure (medians), "
          f"load average {load_average:.2f} at the start; history {history}")
    print("\n".join(figure_lines(results, verdicts)))
    for name in ("get", "list", "create"):
        print(f"{name}: CPU ms/request {raw['apiary'][name]['cpu_ms_per_request']}, the bench's own "
              f"{raw['apiary'][name]['client_cpu_ms_per_request']}")
        print(f"{name}: gRPC calls/request {raw['apiary'][name]['grpc_calls_per_request']}")
    print("\n".join(tracing_report(raw["tracing"])))
    print("\ngoals (issues 24, 22, 25 and 27):")
    print("\n".join(goal_lines(figures, verdicts)))
    seconds = round(time.perf_counter() - began)
    print(f"\nphases (s): {phases}; {seconds} s in all (budget {120 if args.quick else 600} s)")
    if not args.no_history:
        bench_history.append(history, {
            "time": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"), "mode": mode, "commit": _commit(),
            "machine": bench_history.machine(), "load_average": round(load_average, 2), "seconds": seconds,
            "figures": figures})
    print(f"wrote {out}" + ("" if args.no_history else f" and appended the run to {history}"))
    if args.record:
        record(results, raw, ROOT / "docs" / "benchmarks.md")


def _commit() -> str:
    """The checkout's commit, with + when it has uncommitted changes."""
    try:
        sha = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                             check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
                               capture_output=True, text=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return ""
    return sha + ("+" if dirty else "")


if __name__ == "__main__":
    main()
