"""What kube's fair queuing alone gives tools/bench_apf.py's overload: services/apf/queueset.py driven by a
simulated clock, with no process, network or machine load in the way.

The level has 1 seat; the quiet flow arrives at capacity / 10 and the noisy one at 20 times that, each at a
fixed rate (as bench_apf's open loops send); each request holds its seat for a service time drawn from
`services` (a fixed one, or the service times a bench run measured), and the quiet flow's waits are
returned in units of the median service time, as bench_apf reports them. Comparing the run's figure with
this one tells the algorithm's share of the quiet flow's wait from what the real path adds.
"""
from __future__ import annotations

import heapq
import random
import statistics
from collections.abc import Sequence
from itertools import count

from services.apf.config import Queuing
from services.apf.queueset import EXECUTING, QueueSet, Request

from .bench_stats import percentile


def simulate(services: Sequence[float], hand_size: int, quiet_flow: str, noisy_flow: str, *,
             queues: int = 64, queue_length: int = 10, quiet_requests: int = 1000,
             seed: int = 1) -> dict[str, float]:
    """The quiet flow's p50 and p99 wait ÷ the median service time, and how many of its requests were
    rejected, over `quiet_requests` of them."""
    rng = random.Random(seed)
    now = 0.0
    qs = QueueSet(1, Queuing(queues=queues, hand_size=hand_size, queue_length_limit=queue_length),
                  wait_limit=15.0, clock=lambda: now)
    mean = statistics.fmean(services)
    quiet_rate = 1 / mean / 10
    seq = count()
    events: list[tuple[float, int, str, object]] = []
    for i in range(quiet_requests):
        heapq.heappush(events, (i / quiet_rate, next(seq), "arrive", quiet_flow))
    for i in range(quiet_requests * 20):
        heapq.heappush(events, (i / (quiet_rate * 20), next(seq), "arrive", noisy_flow))
    waits: list[float] = []
    rejected = 0

    def run(req: Request) -> None:
        if req.flow == quiet_flow:
            waits.append(req.wait)
        heapq.heappush(events, (now + rng.choice(services), next(seq), "finish", req))

    while events:
        now, _, kind, what = heapq.heappop(events)
        started: list[Request] = []
        if kind == "arrive":
            assert isinstance(what, str)
            req, started = qs.start(what)
            if req.state == EXECUTING:
                started.append(req)
            elif req.state != "waiting" and what == quiet_flow:
                rejected += 1
        else:
            assert isinstance(what, Request)
            started = qs.release(what)
        for r in started:
            run(r)
        for r in qs.expire():
            rejected += r.flow == quiet_flow
    median = statistics.median(services)
    return {"wait_p50": round(statistics.median(waits) / median, 2),
            "wait_p99": round(percentile(waits, 0.99) / median, 2), "quiet_rejected": rejected}
