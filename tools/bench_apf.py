"""Fairness as a figure (issue 25): two users of one priority level, one sending 20x the other's rate
beyond the level's capacity.

    python -m tools.bench_apf [--seconds 10] [--hand-sizes 6,1] [--seats 1] [--state .apiary/bench-apf]
                              [--port-offset <bench's + 400>]

For each hand size, a fresh stack whose apf service has the seats (--max-requests-inflight and
--max-mutating-requests-inflight) that give a level of 1 share (of 246 with the bootstrap levels')
--seats seats, neither lending nor borrowing; a FlowSchema sending the two users there (ByUser: one flow
each; 64 queues of at most 10); 300 configmaps of 200 B that each request LISTs (from the watch cache,
1 seat: the level's most), so that a request's time is the seat's, well above the load generator's cost.
Requests are the admin's, impersonating the users (APF classifies the impersonated user). In the same run:

  service_alone  the quiet user alone, one LIST after another (3 per --seconds, at least 30): p50 of what the
                 client saw
  capacity       the noisy user alone, 8 in flight (for a fifth of --seconds, at least 2 s): the LISTs the level
                 completes per second
  overload       for --seconds, the quiet user open loop at capacity / 10 and the noisy one at 20 times that
                 (2x capacity), the noisy one with more connections than its queues hold; each answer's
                 code, its wait in APF (the proxy's Server-Timing `apf`) and its time

The figures: quiet_completed_ratio = the quiet user's 200s / the requests it sent (goal >= 0.95), and
quiet_wait_ratio = the p99 of its APF waits / its service time in the overload (the median of its
requests' time less their APF wait) (goal <= 5); beside them the noisy user's completed, its 429s and its
p50 wait. A hand of 6 is kube's suggested levels'; with it a single noisy flow takes every queue of its
hand, as in kube, and a quiet flow waits about a round of them. Beside them, queueset_sim: the same
ratios from kube's fair queuing alone (tools/apf_sim.py) at one fixed service time and at the seat times
the apf service saw in this overload (its execution-time histogram), what the algorithm gives without the
processes in the way. Prints the JSON and writes it
to <state>/apf.json.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import ssl
import statistics
import time
import urllib.request
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from services.cluster.stack import ROOT, Stack
from tools.apf_sim import simulate
from tools.bench import BENCH_OFFSET, client_ctx
from tools.bench_fairness import stages
from tools.bench_stats import percentile

NS = "bench-apf"
LEVEL = "bench-apf"
QUIET, NOISY = "bench-quiet", "bench-noisy"
OBJECTS = 300
QUEUE_LENGTH = 10

def apf_flags(seats: int) -> list[str]:
    """The apf service's seats for the level of 1 share (of 246) to get `seats`: ceil(server x 1 / 246)."""
    server = seats * 246 - 6
    return ["--max-requests-inflight", str(server - server // 3), "--max-mutating-requests-inflight", str(server // 3)]

LIST_PATH = f"/api/v1/namespaces/{NS}/configmaps"
# the figure's own stack: beside the bench stack (BENCH_OFFSET) and its replicas' (+ 200)
APF_OFFSET = BENCH_OFFSET + 400


class Client:
    """One keep-alive HTTPS connection: status, the Server-Timing stages, and the time of each request."""

    def __init__(self, port: int, ctx: ssl.SSLContext) -> None:
        self.port, self.ctx = port, ctx
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def request(self, method: str, path: str, headers: dict[str, str] | None = None,
                      body: bytes = b"") -> tuple[int, dict[str, float], bytes, dict[str, str]]:
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection("127.0.0.1", self.port, ssl=self.ctx,
                                                                     limit=1 << 20)
        r = self.reader
        assert r is not None
        head = f"{method} {path} HTTP/1.1\r\nHost: x\r\nAccept: application/json\r\nContent-Length: {len(body)}\r\n"
        head += "".join(f"{k}: {v}\r\n" for k, v in (headers or {}).items())
        self.writer.write(head.encode() + b"\r\n" + body)
        lines = (await r.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
        hdrs = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:] if line)}
        if "content-length" in hdrs:
            data = await r.readexactly(int(hdrs["content-length"]))
        else:
            parts = []
            while True:
                size = int((await r.readline()).strip(), 16)
                chunk = await r.readexactly(size + 2)
                if size == 0:
                    break
                parts.append(chunk[:-2])
            data = b"".join(parts)
        return int(lines[0].split()[1]), stages(hdrs.get("server-timing", "")), data, hdrs


def _objects(hand_size: int) -> list[tuple[str, dict[str, Any]]]:
    rules = [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"], "namespaces": ["*"], "clusterScope": True}]
    queuing = {"queues": 64, "handSize": hand_size, "queueLengthLimit": QUEUE_LENGTH}
    limited = {"nominalConcurrencyShares": 1, "lendablePercent": 0, "borrowingLimitPercent": 0,
               "limitResponse": {"type": "Queue", "queuing": queuing}}
    return [
        ("/api/v1/namespaces", {"metadata": {"name": NS}}),
        ("/apis/rbac.authorization.k8s.io/v1/clusterroles", {
            "metadata": {"name": "bench-apf"},
            "rules": [{"verbs": ["list"], "apiGroups": [""], "resources": ["configmaps"]}]}),
        ("/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", {
            "metadata": {"name": "bench-apf"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "bench-apf"},
            "subjects": [{"kind": "User", "name": u, "apiGroup": "rbac.authorization.k8s.io"} for u in (QUIET, NOISY)]}),
        ("/apis/flowcontrol.apiserver.k8s.io/v1/prioritylevelconfigurations", {
            "metadata": {"name": LEVEL}, "spec": {"type": "Limited", "limited": limited}}),
        ("/apis/flowcontrol.apiserver.k8s.io/v1/flowschemas", {
            "metadata": {"name": LEVEL},
            "spec": {"priorityLevelConfiguration": {"name": LEVEL}, "matchingPrecedence": 300,
                     "distinguisherMethod": {"type": "ByUser"},
                     "rules": [{"subjects": [{"kind": "User", "user": {"name": u}} for u in (QUIET, NOISY)],
                                "resourceRules": rules}]}}),
    ]


async def _setup(c: Client, hand_size: int) -> None:
    """The objects, then wait until the apf service classifies the users by the FlowSchema (its informer)."""
    uid = ""
    for path, obj in _objects(hand_size):
        status, _, data, _ = await c.request("POST", path, {"Content-Type": "application/json"},
                                             json.dumps(obj).encode())
        assert status in (201, 409), (path, status, data[:300])
        if path.endswith("flowschemas"):
            uid = json.loads(data)["metadata"]["uid"]
    for i in range(OBJECTS):
        body = json.dumps({"metadata": {"name": f"cm-{i:04d}"}, "data": {"v": "x" * 160}}).encode()
        status, _, _, _ = await c.request("POST", f"/api/v1/namespaces/{NS}/configmaps",
                                          {"Content-Type": "application/json"}, body)
        assert status in (201, 409), status
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        status, _, _, hdrs = await c.request("GET", f"{LIST_PATH}?limit=1", {"Impersonate-User": QUIET})
        if status == 200 and hdrs.get("x-kubernetes-pf-flowschema-uid") == uid:
            return
        await asyncio.sleep(0.2)
    raise AssertionError("the bench's FlowSchema never classified its users")


async def _service_time(c: Client, n: int = 60) -> float:
    lat = []
    for _ in range(n):
        t = time.perf_counter()
        status, _, _, _ = await c.request("GET", LIST_PATH, {"Impersonate-User": QUIET})
        assert status == 200, status
        lat.append(time.perf_counter() - t)
    return statistics.median(lat)


async def _capacity(clients: list[Client], seconds: float = 4.0) -> float:
    done = [0]
    stop = time.perf_counter() + seconds

    async def worker(c: Client) -> None:
        while time.perf_counter() < stop:
            status, _, _, _ = await c.request("GET", LIST_PATH, {"Impersonate-User": NOISY})
            done[0] += status == 200

    t = time.perf_counter()
    await asyncio.gather(*(worker(c) for c in clients))
    return done[0] / (time.perf_counter() - t)


async def _open_loop(user: str, rate: float, seconds: float, pool: list[Client],
                     out: list[tuple[int, float, float]]) -> int:
    """Requests due at a fixed rate whatever the answers, each on the next idle connection."""
    idle: asyncio.Queue[Client] = asyncio.Queue()
    for c in pool:
        idle.put_nowait(c)
    tasks: set[asyncio.Task[None]] = set()

    async def send() -> None:
        c = await idle.get()
        try:
            t = time.perf_counter()
            status, st, _, _ = await c.request("GET", LIST_PATH, {"Impersonate-User": user})
            out.append((status, st.get("apf", 0.0) / 1000, time.perf_counter() - t))
        finally:
            idle.put_nowait(c)

    total = int(rate * seconds)
    start = time.perf_counter()
    for i in range(total):
        await asyncio.sleep(max(0.0, start + i / rate - time.perf_counter()))
        task = asyncio.create_task(send())
        tasks.add(task)
        task.add_done_callback(tasks.discard)
    await asyncio.gather(*tasks)
    return total


def _seat_times(stack: Stack) -> dict[float, float]:
    """The level's apiserver_flowcontrol_request_execution_seconds buckets in the apf service (cumulative
    counts by upper bound): how long its requests held their seat, as the apf service saw it."""
    with urllib.request.urlopen(f"http://127.0.0.1:{stack.health_port('apf')}/metrics", timeout=10) as r:
        text = r.read().decode()
    out: dict[float, float] = {}
    for fam in text_string_to_metric_families(text):
        if fam.name == "apiserver_flowcontrol_request_execution_seconds":
            for sample in fam.samples:
                if sample.name.endswith("_bucket") and sample.labels.get("priority_level") == LEVEL:
                    le = float(sample.labels["le"])
                    out[le] = out.get(le, 0.0) + sample.value
    return out


def seat_samples(before: dict[float, float], after: dict[float, float]) -> list[float]:
    """Seat times between two scrapes of the buckets, each spread evenly over its bucket (the last one,
    unbounded, at its lower bound)."""
    bounds = sorted(after)
    out: list[float] = []
    low, below = 0.0, 0.0
    for le in bounds:
        n = round(after[le] - before.get(le, 0.0) - below)
        below += n
        high = le if le != float("inf") else low
        out += [low + (high - low) * (i + 0.5) / n for i in range(n)]
        low = le
    return out


async def measure(stack: Stack, seconds: float, hand_size: int, seats: int) -> dict[str, Any]:
    ctx = client_ctx(stack)
    port = int(stack.server.rsplit(":", 1)[1])
    setup = Client(port, ctx)
    await _setup(setup, hand_size)
    # the probes scale with the overload's length (make bench's full run: 20 s, 60 LISTs alone, 4 s of capacity)
    alone = await _service_time(setup, max(30, int(3 * seconds)))
    capacity = await _capacity([Client(port, ctx) for _ in range(8)], max(2.0, seconds / 5))
    quiet_rate = capacity / 10
    quiet: list[tuple[int, float, float]] = []
    noisy: list[tuple[int, float, float]] = []
    # more connections than the noisy flow's queues hold, so that they fill and it is rejected
    noisy_pool = [Client(port, ctx) for _ in range(hand_size * QUEUE_LENGTH + 40)]
    quiet_pool = [Client(port, ctx) for _ in range(8)]
    seats_before = _seat_times(stack)
    sent_quiet, sent_noisy = await asyncio.gather(
        _open_loop(QUIET, quiet_rate, seconds, quiet_pool, quiet),
        _open_loop(NOISY, quiet_rate * 20, seconds, noisy_pool, noisy))
    seats = seat_samples(seats_before, _seat_times(stack))
    for c in [setup, *noisy_pool, *quiet_pool]:
        if c.writer is not None:
            c.writer.close()
    quiet_ok = [(w, total - w) for status, w, total in quiet if status == 200]
    noisy_ok = [w for status, w, _ in noisy if status == 200]
    waits = [w for w, _ in quiet_ok]
    p99 = percentile(waits, 0.99) if waits else float("inf")
    # its service time: what its requests took once they had their seat, in the same overload
    service = statistics.median(s for _, s in quiet_ok) if quiet_ok else float("inf")
    # kube's fair queuing alone (services/apf/queueset.py on a simulated clock) at this level and hand:
    # with one fixed service time, and with the seat times the apf service saw in this overload (its
    # execution histogram's buckets, so roughly); waits in units of the median service time, as here
    flows = f"{LEVEL}/{QUIET}", f"{LEVEL}/{NOISY}"
    sim = {"fixed_service": simulate([service], hand_size, *flows, queue_length=QUEUE_LENGTH)} if quiet_ok else {}
    if seats:
        sim["this_run_seat_times"] = simulate(seats, hand_size, *flows, queue_length=QUEUE_LENGTH)
        sim["seat_ms_p50"] = round(statistics.median(seats) * 1000, 1)
    return {
        "level_seats": seats, "queues": 64, "hand_size": hand_size, "queue_length_limit": QUEUE_LENGTH,
        "objects_listed": OBJECTS, "seconds": seconds, "service_alone_ms": round(alone * 1000, 2),
        "capacity_per_s": round(capacity, 1),
        "quiet": {"offered_per_s": round(quiet_rate, 1), "sent": sent_quiet, "completed": len(quiet_ok),
                  "rejected": sum(1 for s, _, _ in quiet if s == 429), "service_ms": round(service * 1000, 2),
                  "wait_p50_ms": round(statistics.median(waits) * 1000, 2) if waits else None,
                  "wait_p99_ms": round(p99 * 1000, 2)},
        "noisy": {"offered_per_s": round(quiet_rate * 20, 1), "sent": sent_noisy, "completed": len(noisy_ok),
                  "rejected": sum(1 for s, _, _ in noisy if s == 429),
                  "wait_p50_ms": round(statistics.median(noisy_ok) * 1000, 2) if noisy_ok else None},
        "quiet_completed_ratio": round(len(quiet_ok) / sent_quiet, 4) if sent_quiet else 0.0,
        "quiet_wait_ratio": round(p99 / service, 2),
        "goal_completed_ratio": 0.95, "goal_wait_ratio": 5.0,
        "queueset_sim": sim,
    }


def run(state: Path, offset: int, seconds: float = 10.0, hand_sizes: tuple[int, ...] = (6, 1),
        seats: int = 1) -> dict[str, Any]:
    """The figure for each hand size, each on a fresh stack of its own (its apf service with the seats
    that give the level `seats`)."""
    out = {}
    for hand in hand_sizes:
        stack = Stack(state, offset, extra={"apf": apf_flags(seats)})
        stack.start(fresh=True)
        try:
            out[f"hand_{hand}"] = asyncio.run(measure(stack, seconds, hand, seats))
        finally:
            stack.stop(quiet=True)
    return out


def figures(raw: dict[str, Any]) -> dict[str, dict]:
    """make bench's figures (tools/bench.py): apf_fairness (kube's suggested levels' hand of 6 queues) and
    apf_fairness_hand_1; ratio is the quiet user's completed / sent, wait_ratio its p99 APF wait / its
    service time, p50_ms and p99_ms its APF waits (goals: tools/bench_goals.py)."""
    out = {}
    for key, r in raw.items():
        name = "apf_fairness" if key == "hand_6" else f"apf_fairness_{key}"
        q, n = r["quiet"], r["noisy"]
        out[name] = {
            "ratio": r["quiet_completed_ratio"], "wait_ratio": r["quiet_wait_ratio"],
            "p50_ms": q["wait_p50_ms"], "p99_ms": q["wait_p99_ms"],
            "baseline": "quiet service ms", "baseline_rate": q["service_ms"],
            "hand_size": r["hand_size"], "service_alone_ms": r["service_alone_ms"],
            "capacity_per_s": r["capacity_per_s"], "quiet_sent": q["sent"], "noisy_sent": n["sent"],
            "noisy_completed": n["completed"], "noisy_rejected": n["rejected"], "noisy_wait_p50_ms": n["wait_p50_ms"],
            "sim_wait_ratio": r["queueset_sim"].get("this_run_seat_times", {}).get("wait_p99"),
            "sim_wait_ratio_fixed": r["queueset_sim"].get("fixed_service", {}).get("wait_p99")}
    return out


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m tools.bench_apf")
    p.add_argument("--seconds", type=float, default=10.0)
    p.add_argument("--hand-sizes", default="6,1", help="the level's handSize in each run, comma-separated")
    p.add_argument("--seats", type=int, default=1, help="the level's seats")
    p.add_argument("--state", default=str(ROOT / ".apiary" / "bench-apf"))
    p.add_argument("--port-offset", type=int, default=APF_OFFSET)
    args = p.parse_args()
    res = run(Path(args.state).resolve(), args.port_offset, args.seconds,
              tuple(int(h) for h in args.hand_sizes.split(",")), args.seats)
    text = json.dumps(res, indent=2)
    (Path(args.state) / "apf.json").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
