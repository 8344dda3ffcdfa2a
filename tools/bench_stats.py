"""The arithmetic of the benchmarks, kept pure so it is unit-tested: percentiles, interleaved rounds of
a baseline and its figure, and the medians over those rounds.

A figure and its baseline measured one after the other in rounds (baseline, figure, baseline,
figure...) see the same machine: a neighbour's burst of load slows one round of both, not all of one.
The figure's ratio is then the median of the per-round ratios, each a pair measured side by side.
"""
from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from typing import Any


def percentile(values: Sequence[float], q: float) -> float:
    """The q-quantile (0..1) of values by the nearest-rank rule: the sample at or below which q of them fall."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, int(len(ordered) * q)))]


def latency_summary(latencies: Sequence[float], elapsed: float) -> dict[str, float]:
    """rate per second, p50 and p99 in ms, and the count of requests timed in latencies (seconds)."""
    return {"rate": round(len(latencies) / elapsed, 1),
            "p50_ms": round(statistics.median(latencies) * 1000, 2),
            "p99_ms": round(percentile(latencies, 0.99) * 1000, 2),
            "requests": len(latencies)}


def interleave(rounds: int, phases: Sequence[str]) -> list[tuple[int, str]]:
    """The order to measure in: every round runs each phase once, in the order given (a baseline
    before the figures compared with it)."""
    return [(r, name) for r in range(rounds) for name in phases]


def median_of_rounds(runs: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Each numeric field's median over the rounds, nested dicts of numbers field by field (the CPU per
    request of each process); a process missing from a round counts as 0 there (it spent nothing), a
    latency of None (beyond the measurement window) as later than any. Other fields are the first
    round's."""
    out: dict[str, Any] = {}
    for key, first in runs[0].items():
        values = [r.get(key) for r in runs]
        if any(isinstance(v, dict) for v in values):
            keys = list(dict.fromkeys(k for v in values for k in (v or {})))
            out[key] = {k: _median([(v or {}).get(k, 0.0) for v in values]) for k in keys}
        elif any(_number(v) for v in values) and all(_number(v) or v is None for v in values):
            out[key] = _median([math.inf if v is None else v for v in values])
        else:
            out[key] = first
    return out


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _median(values: list[float]) -> float | None:
    m = statistics.median(values)
    if m == math.inf:
        return None
    return m if isinstance(m, int) else round(m, 4)


def ratio_of_rounds(figure: Sequence[dict[str, Any]], baseline: Sequence[dict[str, Any]], key: str = "rate",
                    digits: int = 4) -> float:
    """The median over the rounds of figure[key] / baseline[key], each ratio taken within one round."""
    return round(statistics.median(f[key] / b[key] for f, b in zip(figure, baseline, strict=True)), digits)


def server_timing(value: str) -> dict[str, float]:
    """A Server-Timing header's stages as {name: ms} (`authn;dur=0.02, registry;dur=3.10`); a stage named
    twice is summed, a stage without a duration left out."""
    out: dict[str, float] = {}
    for part in value.split(","):
        name, _, params = part.strip().partition(";")
        for param in params.split(";"):
            key, _, v = param.strip().partition("=")
            if key == "dur" and name:
                try:
                    out[name] = out.get(name, 0.0) + float(v)
                except ValueError:
                    pass
    return out


def stage_breakdown(samples: Sequence[tuple[float, float, str]], share: float = 0.01) -> dict[str, dict[str, float]]:
    """Where the slowest requests' time went, beside the typical request's: for the slowest `share` of
    samples (latency s, seconds waited for a connection, Server-Timing header) and as many around the
    median, the mean latency, connection wait and each server stage, in ms. A tail whose stages are no
    longer than the median's waited outside the server's stages (in the client, the kernel, or for a CPU)."""
    ordered = sorted(samples, key=lambda s: s[0])
    k = max(1, int(len(ordered) * share))
    mid = max(0, len(ordered) // 2 - k // 2)

    def mean(group: Sequence[tuple[float, float, str]]) -> dict[str, float]:
        out = {"latency": 0.0, "connection_wait": 0.0}
        for lat, wait, timing in group:
            out["latency"] += lat * 1000
            out["connection_wait"] += wait * 1000
            for name, ms in server_timing(timing).items():
                out[name] = out.get(name, 0.0) + ms
        return {name: round(v / len(group), 2) for name, v in out.items()}

    return {"tail": mean(ordered[-k:]), "median": mean(ordered[mid:mid + k])} if ordered else {}
