"""What the FlowController shows of itself: kube's apiserver_flowcontrol_* metrics that its own counters do
not keep (execution time, work estimates, limits, seat demand), and the per-request records the debug dumps
print (debug.py).

The FlowController calls an Observer at four points of a request's life (arrived, executing, rejected,
finished); everything else (the levels' limits as borrowing set them, the fair fraction, seat demand) is
read from the controller when Prometheus scrapes.
"""
from __future__ import annotations

import bisect
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from prometheus_client import Histogram
from prometheus_client.core import GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.utils import floatToGoString

from apiary_pb import envelope_pb2 as pb
from services.common.metrics import LOOP_REGISTRY

from .config import FlowSchema, PriorityLevel
from .queueset import QueueSet, Request

# kube's requestDurationSecondsBuckets
DURATION_BUCKETS = (0, 0.005, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 15, 30)
DEMAND_BUCKETS = (0.2, 0.4, 0.6, 0.8, 1, 1.2, 1.4, 1.7, 2, 2.8, 4, 6)

EXECUTION_SECONDS = Histogram(
    "apiserver_flowcontrol_request_execution_seconds",
    "Duration of initial stage (for a WATCH) or any (for a non-WATCH) stage of request execution in the API "
    "Priority and Fairness subsystem", ["priority_level", "flow_schema", "type"], buckets=DURATION_BUCKETS)
WORK_ESTIMATED_SEATS = Histogram(
    "apiserver_flowcontrol_work_estimated_seats",
    "Number of estimated seats (maximum of initial and final seats) associated with requests in API Priority "
    "and Fairness", ["priority_level", "flow_schema"], buckets=(1, 2, 4, 10))
WATCH_COUNT_SAMPLES = Histogram(
    "apiserver_flowcontrol_watch_count_samples",
    "count of watchers for mutating requests in API Priority and Fairness", ["priority_level", "flow_schema"],
    buckets=(0, 1, 10, 100, 1000, 10000))


class Level(Protocol):
    config: PriorityLevel
    queueset: QueueSet | None
    limits: Any  # config.Limits: nominal, lower, upper
    current_limit: int
    seats_in_use: int
    seats_waiting: int


class Ticket(Protocol):
    """What the Observer reads of the controller's Ticket (controller.py imports this module)."""

    flow_schema: FlowSchema
    priority_level: PriorityLevel
    request: Request | None
    level: Level | None
    state: str
    reason: str
    labels: tuple[str, str]
    seats: int
    estimate: Any  # workestimator.WorkEstimate


class FlowController(Protocol):
    levels: Mapping[str, Level]
    fair_frac: float
    observer: Observer


@dataclass(eq=False, slots=True)
class Entry:
    """A request between arrival and its end, as the dumps print it."""

    ticket: Ticket
    digest: pb.RequestAttributes
    arrived: float                      # wall clock (time.time())
    started: float = 0.0                # wall clock; 0 while it waits


@dataclass(slots=True)
class LevelCounts:
    """kube's QueueSet totals for dump_priority_levels: requests dispatched, rejected (queue-full,
    concurrency-limit), timed out and cancelled (their client gone while queued) since the level began."""

    dispatched: int = 0
    rejected: int = 0
    timedout: int = 0
    cancelled: int = 0


class TimingRatioHistogram:
    """kube's TimingRatioHistogram: a histogram of a ratio observed at every instant, so that each bucket
    counts the seconds the ratio spent at or below its bound."""

    def __init__(self, buckets: tuple[float, ...]) -> None:
        self.buckets = buckets
        self.series: dict[str, list[float]] = {}  # label -> [ratio, since, sum, count per bucket..., +Inf]

    def set(self, label: str, ratio: float, now: float) -> None:
        s = self.series.get(label)
        if s is None:
            self.series[label] = [ratio, now, 0.0] + [0.0] * (len(self.buckets) + 1)
            return
        self._advance(s, now)
        s[0] = ratio

    def _advance(self, s: list[float], now: float) -> None:
        dt = now - s[1]
        if dt > 0:
            s[2] += s[0] * dt
            s[3 + bisect.bisect_left(self.buckets, s[0])] += dt
        s[1] = now

    def family(self, name: str, documentation: str, label: str, now: float) -> HistogramMetricFamily:
        fam = HistogramMetricFamily(name, documentation, labels=[label])
        for value, s in sorted(self.series.items()):
            self._advance(s, now)
            cumulative, buckets = 0.0, []
            for bound, count in zip((*map(floatToGoString, self.buckets), "+Inf"), s[3:]):
                cumulative += count
                buckets.append((bound, cumulative))
            fam.add_metric([value], buckets, s[2])
        return fam

    def forget(self, keep: set[str]) -> None:
        for label in self.series.keys() - keep:
            del self.series[label]


@dataclass(frozen=True)
class Limits:
    nominal: int
    lower: int
    upper: int
    current: int


def limits(controller: FlowController, name: str) -> Limits:
    """A level's seat limits as kube reports them: nominal, lower and upper from its configuration, current
    as borrowing last set it."""
    level = controller.levels[name]
    lim = level.limits
    return Limits(lim.nominal, lim.lower, lim.upper, level.current_limit)


class Observer:
    """The FlowController's hooks: per-request records and the metrics kube keeps at those points."""

    def __init__(self, controller: FlowController, wall: Callable[[], float] = time.time) -> None:
        self.controller = controller
        self.wall = wall
        self.entries: dict[Ticket, Entry] = {}
        self.counts: dict[str, LevelCounts] = {}
        self.demand = TimingRatioHistogram(DEMAND_BUCKETS)
        # the metrics' children by labels: prometheus_client's labels() costs more than the observation
        self._work: dict[tuple[str, ...], Any] = {}
        self._execution: dict[tuple[str, ...], Any] = {}
        _COLLECTOR.controller = controller

    def arrived(self, t: Ticket, digest: pb.RequestAttributes) -> None:
        self.entries[t] = Entry(t, digest, self.wall())
        work = self._work.get(t.labels)
        if work is None:
            work = self._work[t.labels] = WORK_ESTIMATED_SEATS.labels(*t.labels)
        work.observe(t.seats)
        if t.estimate.watch_count >= 0:
            self.watchers(t, t.estimate.watch_count)

    def executing(self, t: Ticket) -> None:
        e = self.entries.get(t)
        if e is not None:
            e.started = self.wall()
        self._counts(t).dispatched += 1
        self._demand(t)

    def rejected(self, t: Ticket) -> None:
        self.entries.pop(t, None)
        counts = self._counts(t)
        if t.reason == "time-out":
            counts.timedout += 1
        else:
            counts.rejected += 1
        self._demand(t)

    def finished(self, t: Ticket, was_waiting: bool) -> None:
        """Called once the ticket's seat is freed or it left its queue."""
        e = self.entries.pop(t, None)
        if was_waiting:
            self._counts(t).cancelled += 1
        elif e is not None:
            key = (*t.labels, "watch" if e.digest.verb == "watch" else "regular")
            execution = self._execution.get(key)
            if execution is None:
                execution = self._execution[key] = EXECUTION_SECONDS.labels(*key)
            execution.observe(max(0.0, self.wall() - e.started))
        self._demand(t)

    def watchers(self, t: Ticket, count: int) -> None:
        """A mutating request's estimate counted `count` watches it will notify (kube's watch_count_samples)."""
        WATCH_COUNT_SAMPLES.labels(*t.labels).observe(count)

    def _counts(self, t: Ticket) -> LevelCounts:
        counts = self.counts.get(t.priority_level.name)
        if counts is None:
            counts = self.counts[t.priority_level.name] = LevelCounts()
        return counts

    def _demand(self, t: Ticket) -> None:
        """demand_seats: the seats a limited level could use (executing and waiting) over its current limit."""
        if t.level is not None:
            self.sample_demand(t.level.config.name)

    def sample_demand(self, name: str) -> None:
        level = self.controller.levels.get(name)
        if level is None:
            return  # a level that went away; its last requests drain
        ratio = (level.seats_in_use + level.seats_waiting) / max(1, level.current_limit)
        self.demand.set(name, ratio, time.monotonic())


class _FlowControlCollector:
    """The gauges read from the FlowController when scraped: limits, seat_fair_frac and demand_seats."""

    def __init__(self) -> None:
        self.controller: FlowController | None = None

    def describe(self) -> list[Metric]:
        return []  # collected only when scraped (the controller may not exist yet)

    def collect(self) -> Iterator[Metric]:
        c = self.controller
        if c is None:
            return
        fams = {name: GaugeMetricFamily(f"apiserver_flowcontrol_{name}", doc, labels=["priority_level"]) for name, doc in (
            ("current_limit_seats", "current derived number of execution seats available to each priority level"),
            ("lower_limit_seats", "Configured lower bound on number of execution seats available to each "
                                  "priority level"),
            ("upper_limit_seats", "Configured upper bound on number of execution seats available to each "
                                  "priority level"))}
        for name in sorted(c.levels):
            lim = limits(c, name)
            fams["current_limit_seats"].add_metric([name], lim.current)
            fams["lower_limit_seats"].add_metric([name], lim.lower)
            fams["upper_limit_seats"].add_metric([name], lim.upper)
        yield from fams.values()
        yield GaugeMetricFamily("apiserver_flowcontrol_seat_fair_frac",
                                "Fair fraction of server's concurrency to allocate to each priority level that "
                                "can use it", value=c.fair_frac)
        for name in c.levels.keys() - c.observer.demand.series.keys():
            c.observer.sample_demand(name)
        c.observer.demand.forget(set(c.levels))
        yield c.observer.demand.family(
                "apiserver_flowcontrol_demand_seats",
                "Observations, at the end of every nanosecond, of (the number of seats each priority level could "
            "use) / (current seat limit for that level if that is not zero otherwise max(1, round(server "
            "seat limit/10.0)))", "priority_level", time.monotonic())


_COLLECTOR = _FlowControlCollector()
# it reads the controller, which the event loop changes: collected on the loop (services/common/metrics.render)
LOOP_REGISTRY.register(_COLLECTOR)  # type: ignore[arg-type]
