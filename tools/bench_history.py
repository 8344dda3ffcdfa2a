"""The benchmarks' past runs on this machine class, and whether a figure moved beyond its known spread.

Every `make bench` appends one line to docs/bench-history/<machine>.jsonl: the run's figures flattened
to `figure.field` numbers, with its time, commit, mode (full or quick: compared only with their own
kind) and load average. The file is committed with the code, not kept in .apiary: sessions start from
fresh clones, `make clean` wipes .apiary, and a slow regression (storage memory 2.5x -> 4.7x its JSON
over two days) is only seen against runs made before it. One file per machine class (host name, core
count, CPU model), as figures of different machines do not compare.

A figure's known spread is how far the last runs (up to HISTORY_WINDOW) strayed from their median;
with fewer than three runs known it is taken as at least DEFAULT_SPREAD (the ±10-15 % the runs of
one machine have shown), and never under MIN_SPREAD.
"""
from __future__ import annotations

import json
import os
import re
import socket
import statistics
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HISTORY_DIR = Path(__file__).resolve().parent.parent / "docs" / "bench-history"
HISTORY_WINDOW = 5
DEFAULT_SPREAD = 0.10
MIN_SPREAD = 0.03
# The numbers of a figure kept in the history; cpu_ms_per_request (a dict by process) as its sum.
TRACKED = ("rate", "deliveries_per_s", "rss_delta_mb", "seconds", "p50_ms", "p99_ms", "ratio",
           "cpu_ms_per_request", "baseline_rate", "bytes_per_object", "proxy_cpu_us_per_delivery",
           "generator_cpu_us_per_delivery", "delivered_pct", "wait_ratio")
HIGHER_IS_BETTER = {"rate", "deliveries_per_s", "delivered_pct"}


def machine() -> str:
    """This machine class's name: host name, core count and CPU model, as a file name."""
    model = ""
    try:
        model = next((line.split(":", 1)[1] for line in Path("/proc/cpuinfo").read_text().splitlines()
                      if line.startswith("model name")), "")
    except OSError:
        pass
    name = f"{socket.gethostname()}-{os.cpu_count()}cpu-{model.strip()}"
    return re.sub(r"[^a-z0-9.]+", "-", name.lower()).strip("-")


def flatten(results: dict[str, dict[str, Any]]) -> dict[str, float]:
    """The tracked numbers of every figure as {"figure.field": value}."""
    out: dict[str, float] = {}
    for name, r in results.items():
        for field in TRACKED:
            v = r.get(field)
            if isinstance(v, dict):
                v = round(sum(x for x in v.values() if isinstance(x, (int, float))), 3)
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                out[f"{name}.{field}"] = v
        if r.get("ratio_is_cost"):
            out[f"{name}.ratio_is_cost"] = 1
    return out


def better(metric: str, figures: dict[str, float]) -> int:
    """+1 when a higher value of metric is better, -1 when lower is (a ratio: by its figure's kind)."""
    figure, field = metric.rsplit(".", 1)
    if field in ("ratio", "baseline_rate"):
        # a cost's ratio is a time or size over its floor's; a rate's ratio, a rate over its baseline's
        return -1 if figures.get(f"{figure}.ratio_is_cost") else 1
    return 1 if field in HIGHER_IS_BETTER else -1


def load(path: Path, mode: str) -> list[dict[str, Any]]:
    """The runs of this mode recorded in path, oldest first (none if there is no file yet)."""
    if not path.exists():
        return []
    runs = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [r for r in runs if r.get("mode") == mode]


def append(path: Path, run: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as f:
        f.write(json.dumps(run, sort_keys=True) + "\n")


@dataclass(frozen=True)
class Verdict:
    previous: float | None
    center: float | None
    spread: float | None  # relative half-width of the known spread (0.1: ±10 %)
    moved: int            # +1 above the spread, -1 below it, 0 within it (or nothing known)
    better: int           # +1 when higher is better, -1 when lower is

    def flag(self) -> str:
        if not self.moved:
            return ""
        arrow = "↑" if self.moved > 0 else "↓"
        return f"{arrow} {'better' if self.moved == self.better else 'WORSE'}"

    def describe(self) -> str:
        """`prev X (±s %) flag`, or `new` when this is the first run of its kind."""
        if self.previous is None:
            return "new"
        text = f"prev {_short(self.previous)}"
        if self.spread is not None:
            text += f" ±{round(self.spread * 100)}%"
        return f"{text} {self.flag()}".rstrip()


def _short(v: float) -> str:
    return f"{v:.4g}" if isinstance(v, float) else str(v)


def spread(past: list[float]) -> tuple[float, float]:
    """(median, relative half-width) of the last runs' values of one figure."""
    recent = past[-HISTORY_WINDOW:]
    center = statistics.median(recent)
    scale = abs(center) or 1.0
    width = max(abs(v - center) for v in recent) / scale
    floor = DEFAULT_SPREAD if len(recent) < 3 else MIN_SPREAD
    return center, max(width, floor)


def judge(value: float, past: list[float], higher_is_better: int) -> Verdict:
    """Whether value lies beyond the known spread of the past values (oldest first)."""
    if not past:
        return Verdict(None, None, None, 0, higher_is_better)
    center, width = spread(past)
    deviation = (value - center) / (abs(center) or 1.0)
    moved = 0 if abs(deviation) <= width else (1 if deviation > 0 else -1)
    return Verdict(past[-1], center, width, moved, higher_is_better)


def compare(figures: dict[str, float], runs: Iterable[dict[str, Any]]) -> dict[str, Verdict]:
    """A verdict for every tracked number of this run against the same number in the past runs."""
    runs = list(runs)
    return {metric: judge(value, [r["figures"][metric] for r in runs if metric in r.get("figures", {})],
                          better(metric, figures))
            for metric, value in figures.items() if not metric.endswith(".ratio_is_cost")}
