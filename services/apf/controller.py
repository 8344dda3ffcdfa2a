"""The flow controller: classification, one QueueSet per limited priority level, metrics and timers.

Callers (the gRPC servicer) start a request with a callback; the callback runs when
a queued request is dispatched or times out. Everything runs on the event loop, so
no locks are needed: the QueueSets are plain synchronous objects.
"""
from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from prometheus_client import Counter, Gauge, Histogram

from apiary_pb import apf_pb2 as fpb
from apiary_pb import envelope_pb2 as pb

from .classification import Classifier
from .config import Configuration, FlowSchema, PriorityLevel, nominal_concurrency
from .metrics import Observer
from .queueset import EXECUTING, REJECTED, WAITING, QueueSet, Request

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

# Seconds a rejected client is told to wait (kube answers 429 with a Retry-After of a few seconds).
RETRY_AFTER_SECONDS = 1

Decided = Callable[["Ticket"], None]


@dataclass(eq=False)
class Ticket:
    """One request known to the controller, from start until finish."""

    flow_schema: FlowSchema
    priority_level: PriorityLevel
    on_decided: Decided | None = None
    request: Request | None = None     # None for exempt requests
    level: _Level | None = None        # where it holds or waits for its seat (None: exempt)
    state: str = EXECUTING
    reason: str = ""
    labels: tuple[str, str] = field(default=("", ""))
    seats: int = 1  # every request takes one seat until width estimates come

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


class _Level:
    def __init__(self, pl: PriorityLevel, limit: int, wait_limit: float, clock: Callable[[], float]) -> None:
        self.config = pl
        self.queueset = QueueSet(limit, pl.queuing, wait_limit=wait_limit, clock=clock)
        self.timer: asyncio.TimerHandle | None = None
        self.timer_at: float | None = None


class FlowController:
    def __init__(self, cfg: Configuration, server_seats: int, wait_limit: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.server_seats = server_seats
        self.wait_limit = wait_limit
        self.levels: dict[str, _Level] = {}
        self.observer = Observer(self)  # metrics.py's measures and the records debug.py dumps
        self.reconfigure(cfg)

    def reconfigure(self, cfg: Configuration) -> None:
        """Take a new configuration: new requests are classified by it at once. A level that keeps its
        queuing keeps its QueueSet (only its share of the seats may move); a level whose queuing changed, or
        that went away, is left to the requests it holds, which finish there."""
        self.config = cfg
        self.classifier = Classifier(cfg)
        self.nominal = nominal_concurrency(cfg.priority_levels, self.server_seats)
        levels: dict[str, _Level] = {}
        for pl in cfg.priority_levels:
            if pl.exempt:
                continue
            limit = self.nominal[pl.name]
            level = self.levels.get(pl.name)
            if level is not None and level.config.queuing == pl.queuing:
                level.config = pl
                self._notify_dispatched(level.queueset.set_concurrency_limit(limit))
                self._arm(level)
            else:
                level = _Level(pl, limit, self.wait_limit, self.clock)
            levels[pl.name] = level
            NOMINAL_LIMIT_SEATS.labels(pl.name).set(limit)
        for name in self.levels.keys() - levels.keys():
            NOMINAL_LIMIT_SEATS.remove(name)
        self.levels = levels
        self._levels_by_name = {pl.name: pl for pl in cfg.priority_levels}

    def start(self, digest: pb.RequestAttributes, on_decided: Decided | None = None) -> Ticket:
        """Classify and try to take a seat. A WAITING ticket's decision comes later through on_decided."""
        fs = self.classifier.classify(digest)
        pl = self._levels_by_name[fs.priority_level]
        level = self.levels.get(pl.name)
        t = Ticket(fs, pl, on_decided, labels=(pl.name, fs.name), level=level)
        self.observer.arrived(t, digest)
        if level is None:  # exempt: never queued, never rejected
            self._executing(t, 0.0)
            return t
        flow = f"{fs.name}/{self.classifier.flow_distinguisher(fs, digest)}"
        # Every request takes one seat for now; kube's width estimates (LIST by object count,
        # extra seats for writes with many watchers) come with the storage statistics they need.
        req, others = level.queueset.start(flow, 1, t)
        t.request = req
        if req.state == WAITING:
            t.state = WAITING
            INQUEUE_REQUESTS.labels(*t.labels).inc()
        elif req.state == EXECUTING:
            self._executing(t, req.wait)
        else:
            self._rejected(t, req.reason, req.wait)
        self._notify_dispatched(others)
        self._arm(level)
        return t

    def finish(self, t: Ticket) -> None:
        """The request is over (or its caller stopped waiting): free its seat or leave its queue."""
        was_waiting = t.state == WAITING
        if was_waiting:
            INQUEUE_REQUESTS.labels(*t.labels).dec()
            REJECTED_REQUESTS.labels(*t.labels, "cancelled").inc()  # its client went away while queued
        elif t.state == EXECUTING:
            EXECUTING_REQUESTS.labels(*t.labels).dec()
            EXECUTING_SEATS.labels(*t.labels).dec(t.seats)
        else:
            return
        t.state = "finished"
        if t.request is not None and t.level is not None:
            self._notify_dispatched(t.level.queueset.release(t.request))
            self._arm(t.level)
        self.observer.finished(t, was_waiting)

    # internals ---------------------------------------------------------------

    def _executing(self, t: Ticket, waited: float) -> None:
        t.state = EXECUTING
        EXECUTING_REQUESTS.labels(*t.labels).inc()
        EXECUTING_SEATS.labels(*t.labels).inc(t.seats)
        DISPATCHED_REQUESTS.labels(*t.labels).inc()
        WAIT_DURATION.labels(*t.labels, "true").observe(waited)
        self.observer.executing(t)

    def _rejected(self, t: Ticket, reason: str, waited: float) -> None:
        t.state = REJECTED
        t.reason = reason
        REJECTED_REQUESTS.labels(*t.labels, reason).inc()
        WAIT_DURATION.labels(*t.labels, "false").observe(waited)
        self.observer.rejected(t)

    def _notify_dispatched(self, reqs: list[Request]) -> None:
        for req in reqs:
            t: Ticket = req.payload
            INQUEUE_REQUESTS.labels(*t.labels).dec()
            self._executing(t, req.wait)
            if t.on_decided:
                t.on_decided(t)

    def _arm(self, level: _Level) -> None:
        """Keep one timer per level, at the earliest wait deadline of its queued requests."""
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

    def _expire(self, level: _Level) -> None:
        level.timer = None
        level.timer_at = None
        for req in level.queueset.expire():
            t: Ticket = req.payload
            INQUEUE_REQUESTS.labels(*t.labels).dec()
            self._rejected(t, req.reason, req.wait)
            if t.on_decided:
                t.on_decided(t)
        self._arm(level)
