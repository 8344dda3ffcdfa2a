"""The flow controller: classification, work estimates, one QueueSet per limited priority level,
borrowing between levels, metrics and timers.

Callers (the gRPC servicer) start a request with a callback; the callback runs when a queued request
is dispatched or times out. Everything runs on the event loop, so no locks are needed: the QueueSets
are plain synchronous objects. Every level (exempt included) has its Limits and its seat demand; every
BORROWING_PERIOD (and after each configuration change) adjust_limits() sets the limited levels' current
limits from them (services/apf/borrowing.py).
"""
from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

from prometheus_client import Counter, Gauge, Histogram

from apiary_pb import apf_pb2 as fpb
from apiary_pb import envelope_pb2 as pb
from services.common.background import cancel_and_wait

from .borrowing import (
    BORROWING_PERIOD,
    AllocItem,
    Integrator,
    Limits,
    SeatDemandStats,
    compute_concurrency_allocation,
)
from .classification import Classifier
from .config import Configuration, FlowSchema, PriorityLevel, concurrency_limits
from .metrics import Observer
from .queueset import EXECUTING, LINGERING, REJECTED, WAITING, QueueSet, Request
from .workestimator import ONE_SEAT, WorkEstimate, WorkEstimator, level_max_seats

EXECUTING_REQUESTS = Gauge(
    "apiserver_flowcontrol_current_executing_requests",
    "Number of requests in initial (for a WATCH) or any (for a non-WATCH) execution stage in the "
    "API Priority and Fairness subsystem", ["priority_level", "flow_schema"])
INQUEUE_REQUESTS = Gauge(
    "apiserver_flowcontrol_current_inqueue_requests",
    "Number of requests currently pending in queues of the API Priority and Fairness subsystem",
    ["priority_level", "flow_schema"])
REJECTED_REQUESTS = Counter(
    "apiserver_flowcontrol_rejected_requests_total",
    "Number of requests rejected by API Priority and Fairness subsystem",
    ["priority_level", "flow_schema", "reason"])
DISPATCHED_REQUESTS = Counter(
    "apiserver_flowcontrol_dispatched_requests_total",
    "Number of requests executed by API Priority and Fairness subsystem", ["priority_level", "flow_schema"])
EXECUTING_SEATS = Gauge(
    "apiserver_flowcontrol_current_executing_seats",
    "Concurrency (number of seats) occupied by the currently executing (initial stage for a WATCH, any "
    "stage otherwise) requests in the API Priority and Fairness subsystem", ["priority_level", "flow_schema"])
WAIT_DURATION = Histogram(
    "apiserver_flowcontrol_request_wait_duration_seconds",
    "Length of time a request spent waiting in its queue", ["priority_level", "flow_schema", "execute"],
    buckets=(0, 0.005, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 15, 30))
NOMINAL_LIMIT_SEATS = Gauge(
    "apiserver_flowcontrol_nominal_limit_seats",
    "Nominal number of execution seats configured for each priority level", ["priority_level"])

log = logging.getLogger(__name__)

# Seconds a rejected client is told to wait (kube answers 429 with a Retry-After of a few seconds).
RETRY_AFTER_SECONDS = 1

Decided = Callable[["Ticket"], None]


def _no_stats(*_: str) -> None:
    return None


class Series:
    """The per-request metrics' children of one (priority level, flow schema): prometheus_client's labels()
    costs more than the observation, and every request of a level and schema updates the same ones. Each
    child is made the first time it is used (a series appears when kube's would: at its first observation)."""

    __slots__ = ("_rejected", "dispatched", "executing", "executing_seats", "inqueue", "labels", "waited",
                 "waited_rejected")
    _CHILDREN: ClassVar[dict[str, tuple[Any, tuple[str, ...]]]] = {
        "executing": (EXECUTING_REQUESTS, ()), "executing_seats": (EXECUTING_SEATS, ()),
        "inqueue": (INQUEUE_REQUESTS, ()), "dispatched": (DISPATCHED_REQUESTS, ()),
        "waited": (WAIT_DURATION, ("true",)), "waited_rejected": (WAIT_DURATION, ("false",))}

    def __init__(self, labels: tuple[str, str]) -> None:
        self.labels = labels
        self._rejected: dict[str, Any] = {}

    def __getattr__(self, name: str) -> Any:
        """A child not made yet (an unset slot): made now, and found in its slot from then on."""
        if name not in self._CHILDREN:
            raise AttributeError(name)
        metric, extra = self._CHILDREN[name]
        child = metric.labels(*self.labels, *extra)
        setattr(self, name, child)
        return child

    def rejected(self, reason: str) -> Any:
        c = self._rejected.get(reason)
        if c is None:
            c = self._rejected[reason] = REJECTED_REQUESTS.labels(*self.labels, reason)
        return c


@dataclass(eq=False, slots=True)
class Ticket:
    """One request known to the controller, from start until finish."""

    flow_schema: FlowSchema
    priority_level: PriorityLevel
    on_decided: Decided | None = None
    request: Request | None = None     # None for exempt requests
    level: Level | None = None         # where it holds or waits for its seats
    state: str = EXECUTING
    reason: str = ""
    series: Series | None = None       # its metrics' children; labels: theirs
    estimate: WorkEstimate = ONE_SEAT
    flow_distinguisher: str = ""

    @property
    def labels(self) -> tuple[str, str]:
        """(priority level, flow schema): its metrics' labels."""
        return self.series.labels if self.series is not None else ("", "")

    @property
    def seats(self) -> int:
        """The seats it holds (or waits for): its estimate's larger number."""
        return self.request.seats if self.request is not None else self.estimate.max_seats

    @property
    def granted(self) -> bool:
        return self.state == EXECUTING

    def response(self, request_id: int) -> fpb.SeatResponse:
        out = fpb.SeatResponse(
            id=request_id, granted=self.granted, flow_schema=self.flow_schema.name,
            priority_level=self.priority_level.name, flow_schema_uid=self.flow_schema.uid,
            priority_level_uid=self.priority_level.uid)
        if self.state == REJECTED:
            out.reason = self.reason
            out.retry_after_seconds = RETRY_AFTER_SECONDS
        return out


class Level:
    """A priority level's state: its limits, its QueueSet (None: exempt), its seat demand."""

    def __init__(self, pl: PriorityLevel, limits: Limits, wait_limit: float, clock: Callable[[], float]) -> None:
        self.config = pl
        self.limits = limits
        # kube starts a new level at its nominal limit less half what it may lend
        self.current_limit = limits.nominal - (limits.nominal - limits.lower) // 2
        self.queueset = None if pl.exempt else \
            QueueSet(self.current_limit, pl.queuing, wait_limit=wait_limit, clock=clock)
        self.exempt_demand = Integrator(clock)   # the exempt level's: seats of its executing requests
        self.exempt_seats = 0
        self.demand_stats = SeatDemandStats()
        self.timer: asyncio.TimerHandle | None = None
        self.timer_at: float | None = None

    @property
    def demand(self) -> Integrator:
        return self.queueset.demand if self.queueset is not None else self.exempt_demand

    @property
    def max_seats(self) -> int:
        """The most seats one request may take here (0: the work estimator's own maximum)."""
        q = self.config.queuing
        return level_max_seats(self.limits.nominal, q.hand_size) if q is not None else 0

    @property
    def seats_in_use(self) -> int:
        return self.queueset.seats_in_use if self.queueset is not None else self.exempt_seats

    @property
    def seats_waiting(self) -> int:
        return self.queueset.seats_waiting if self.queueset is not None else 0


class FlowController:
    def __init__(self, cfg: Configuration, server_seats: int, wait_limit: float,
                 clock: Callable[[], float] = time.monotonic, estimator: WorkEstimator | None = None) -> None:
        self.clock = clock
        self.server_seats = server_seats
        self.wait_limit = wait_limit
        self.estimator = estimator or WorkEstimator(_no_stats, lambda *_: 0)
        self.levels: dict[str, Level] = {}
        self.fair_frac = 0.0
        self._borrowing: asyncio.Task[None] | None = None
        self._series: dict[tuple[str, str], Series] = {}
        self.observer = Observer(self)  # metrics.py's measures and the records debug.py dumps
        self.reconfigure(cfg)

    @property
    def nominal(self) -> dict[str, int]:
        return {name: level.limits.nominal for name, level in self.levels.items()}

    def start_borrowing(self) -> None:
        self._borrowing = asyncio.create_task(self._borrow(), name="apf-borrowing")

    async def stop_borrowing(self) -> None:
        await cancel_and_wait(self._borrowing)

    async def _borrow(self) -> None:
        while True:
            await asyncio.sleep(BORROWING_PERIOD)
            self.adjust_limits()

    def reconfigure(self, cfg: Configuration) -> None:
        """Take a new configuration: new requests are classified by it at once. A level that keeps its
        queuing keeps its QueueSet (only its limits may move); a level whose queuing changed, or that
        went away, is left to the requests it holds, which finish there."""
        self.config = cfg
        self.classifier = Classifier(cfg)
        self._series = {}  # those of schemas and levels gone are not kept (tickets hold their own)
        limits = concurrency_limits(cfg.priority_levels, self.server_seats)
        levels: dict[str, Level] = {}
        for pl in cfg.priority_levels:
            level = self.levels.get(pl.name)
            if level is not None and level.config.queuing == pl.queuing and level.config.exempt == pl.exempt:
                level.config = pl
                level.limits = limits[pl.name]
            else:
                level = Level(pl, limits[pl.name], self.wait_limit, self.clock)
            levels[pl.name] = level
            NOMINAL_LIMIT_SEATS.labels(pl.name).set(level.limits.nominal)
        for name in self.levels.keys() - levels.keys():
            NOMINAL_LIMIT_SEATS.remove(name)
        self.levels = levels
        self._levels_by_name = {pl.name: pl for pl in cfg.priority_levels}
        self.adjust_limits()

    def adjust_limits(self) -> None:
        """kube's updateBorrowing: every level's current limit from its seat demand since the last time."""
        names = list(self.levels)
        items = []
        for name in names:
            level = self.levels[name]
            level.demand_stats.update(*level.demand.reset())
            stats, lim = level.demand_stats, level.limits
            lower = max(lim.lower, min(lim.nominal, stats.high_watermark))
            items.append(AllocItem(max(lower, stats.smoothed), lower, lim.upper))
        try:
            allocs, self.fair_frac = compute_concurrency_allocation(sum(lv.limits.nominal for lv in
                                                                        self.levels.values()), items)
        except ValueError:
            log.exception("unable to derive new concurrency limits; keeping the current ones")
            return
        for name, alloc in zip(names, allocs):
            level = self.levels[name]
            level.current_limit = int(alloc + 0.5)
            if level.queueset is not None:
                self._notify_dispatched(level.queueset.set_concurrency_limit(level.current_limit))
                self._arm(level)

    def start(self, digest: pb.RequestAttributes, on_decided: Decided | None = None,
              wait_limit: float = 0.0) -> Ticket:
        """Classify, estimate and try to take the seats, waiting in a queue at most wait_limit seconds
        (capped by --apf-queue-wait-seconds; 0: that). A WAITING ticket's decision comes later through
        on_decided."""
        fs = self.classifier.classify(digest)
        pl = self._levels_by_name[fs.priority_level]
        level = self.levels[pl.name]
        series = self._series.get((pl.name, fs.name))
        if series is None:
            series = self._series[(pl.name, fs.name)] = Series((pl.name, fs.name))
        t = Ticket(fs, pl, on_decided, series=series, level=level,
                   flow_distinguisher=self.classifier.flow_distinguisher(fs, digest))
        t.estimate = self.estimator.estimate(digest, level.max_seats)  # exempt: max_seats 0, the estimator's
        self.observer.arrived(t, digest)
        qs = level.queueset
        if qs is None:  # exempt: never queued, never rejected
            level.exempt_seats += t.seats
            level.exempt_demand.set(level.exempt_seats)
            self._executing(t, 0.0)
            return t
        req, others = qs.start(f"{fs.name}/{t.flow_distinguisher}", t.estimate, t, wait_limit)
        t.request = req
        if req.state == WAITING:
            t.state = WAITING
            series.inqueue.inc()
        elif req.state == EXECUTING:
            self._executing(t, req.wait)
        else:
            self._rejected(t, req.reason, req.wait)
        self._notify_dispatched(others)
        self._arm(level)
        return t

    def finish(self, t: Ticket) -> None:
        """The request is over (or its caller stopped waiting): free its seats (a write's final seats a
        little later) or leave its queue."""
        was_waiting = t.state == WAITING
        series = t.series
        assert series is not None
        if was_waiting:
            series.inqueue.dec()
            series.rejected("cancelled").inc()  # its client went away while queued
        elif t.state == EXECUTING:
            series.executing.dec()
            series.executing_seats.dec(t.seats)
        else:
            return
        t.state = "finished"
        self.observer.finished(t, was_waiting)
        level = t.level
        if level is None:
            return
        if t.request is None:
            level.exempt_seats -= t.seats
            level.exempt_demand.set(level.exempt_seats)
            return
        qs = level.queueset
        assert qs is not None
        req = t.request
        self._notify_dispatched(qs.release(req))
        if req.state == LINGERING:
            asyncio.get_running_loop().call_later(req.estimate.additional_latency, self._release_final, level, req)
        self._arm(level)

    # internals ---------------------------------------------------------------

    def _release_final(self, level: Level, req: Request) -> None:
        assert level.queueset is not None
        self._notify_dispatched(level.queueset.release_final(req))
        self._arm(level)

    def _executing(self, t: Ticket, waited: float) -> None:
        t.state = EXECUTING
        series = t.series
        assert series is not None
        series.executing.inc()
        series.executing_seats.inc(t.seats)
        series.dispatched.inc()
        series.waited.observe(waited)
        self.observer.executing(t)

    def _rejected(self, t: Ticket, reason: str, waited: float) -> None:
        t.state = REJECTED
        t.reason = reason
        assert t.series is not None
        t.series.rejected(reason).inc()
        t.series.waited_rejected.observe(waited)
        self.observer.rejected(t)

    def _notify_dispatched(self, reqs: list[Request]) -> None:
        for req in reqs:
            t: Ticket = req.payload
            t.series.inqueue.dec()  # type: ignore[union-attr]
            self._executing(t, req.wait)
            if t.on_decided:
                t.on_decided(t)

    def _arm(self, level: Level) -> None:
        """Keep one timer per level, at the earliest wait deadline of its queued requests."""
        assert level.queueset is not None
        deadline = level.queueset.next_deadline()
        if deadline == level.timer_at:
            return
        if level.timer:
            level.timer.cancel()
            level.timer = None
        level.timer_at = deadline
        if deadline is not None:
            delay = max(0.0, deadline - self.clock())
            level.timer = asyncio.get_running_loop().call_later(delay, self._expire, level)

    def _expire(self, level: Level) -> None:
        level.timer = None
        level.timer_at = None
        assert level.queueset is not None
        for req in level.queueset.expire():
            t: Ticket = req.payload
            t.series.inqueue.dec()  # type: ignore[union-attr]
            self._rejected(t, req.reason, req.wait)
            if t.on_decided:
                t.on_decided(t)
        self._arm(level)
