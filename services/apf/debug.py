"""kube's /debug/api_priority_and_fairness dumps of the FlowController's state: dump_priority_levels,
dump_queues and dump_requests (?includeRequestDetails), with kube's columns in kube's order, each cell
followed by "," and aligned as Go's text/tabwriter aligns them (minimum width 8, padding 1).

A level answers as kube's QueueSet for it would: a queuing level has its queues, a Reject level and an
exempt level none (their executing requests are dumped with queue and index -1). Every request is charged
its Ticket's seats for now: InitialSeats, FinalSeats 0 and AdditionalLatency 0s.
"""
from __future__ import annotations

import datetime
from collections.abc import Iterable, Sequence

from .controller import FlowController
from .metrics import Entry
from .queueset import EXECUTING, WAITING

DUMPS = ("dump_priority_levels", "dump_queues", "dump_requests")
_ZERO_TIME = "0001-01-01T00:00:00Z"  # Go's zero time.Time, as a request that has not started prints it


def tabwrite(rows: Iterable[Sequence[str]]) -> str:
    """Rows of cells joined as kube joins them (",\\t") and aligned by Go's tabwriter.NewWriter(w, 8, 0, 1,
    ' ', 0): every cell but a line's last is padded to its column's widest cell plus one, at least 8."""
    lines = [[f"{c}," for c in row[:-1]] + [row[-1]] for row in rows]
    widths: list[int] = []
    for cells in lines:
        for i, c in enumerate(cells[:-1]):
            if i == len(widths):
                widths.append(8)
            widths[i] = max(widths[i], len(c) + 1)
    return "".join("".join(c.ljust(widths[i]) for i, c in enumerate(cells[:-1])) + cells[-1] + "\n"
                   for cells in lines)


def rfc3339nano(wall: float) -> str:
    """Go's time.RFC3339Nano in UTC: fractional seconds without trailing zeros."""
    if not wall:
        return _ZERO_TIME
    t = datetime.datetime.fromtimestamp(wall, datetime.timezone.utc)
    frac = f"{t.microsecond:06d}".rstrip("0")
    return t.strftime("%Y-%m-%dT%H:%M:%S") + (f".{frac}" if frac else "") + "Z"


def seat_seconds(value: float) -> str:
    """kube's SeatSeconds.String(): fixed point with 8 decimals and the unit "ss"."""
    scaled = round(value * 1e8)
    quo, rem = divmod(abs(scaled), 10**8)
    return f"{'-' if scaled < 0 else ''}{quo}.{rem:08d}ss"


def dump(controller: FlowController, what: str, include_request_details: bool = False) -> str:
    if what == "dump_priority_levels":
        return dump_priority_levels(controller)
    if what == "dump_queues":
        return dump_queues(controller)
    if what == "dump_requests":
        return dump_requests(controller, include_request_details)
    raise KeyError(what)


def _by_level(controller: FlowController) -> dict[str, list[Entry]]:
    out: dict[str, list[Entry]] = {pl.name: [] for pl in controller.config.priority_levels}
    for e in controller.observer.entries.values():
        out.setdefault(e.ticket.priority_level.name, []).append(e)
    return out


def dump_priority_levels(controller: FlowController) -> str:
    rows = [("PriorityLevelName", "ActiveQueues", "IsIdle", "IsQuiescing", "WaitingRequests", "ExecutingRequests",
             "DispatchedRequests", "RejectedRequests", "TimedoutRequests", "CancelledRequests")]
    entries = _by_level(controller)
    configured = {pl.name for pl in controller.config.priority_levels}
    for name in sorted(entries):
        level = controller.levels.get(name)
        qs = level.queueset if level is not None else None
        if qs is not None:
            active = sum(1 for q in qs.queues if q.waiting)
            waiting, executing = qs.requests_waiting, qs.requests_executing
        else:  # exempt, or gone from the configuration with requests left (quiescing)
            states = [e.ticket.state for e in entries[name]]
            active, waiting, executing = 0, states.count(WAITING), states.count(EXECUTING)
        counts = controller.observer.counts.get(name)
        totals = (counts.dispatched, counts.rejected, counts.timedout, counts.cancelled) if counts else (0, 0, 0, 0)
        rows.append((name, str(active), _bool(waiting == 0 and executing == 0), _bool(name not in configured),
                     str(waiting), str(executing), *map(str, totals)))
    return tabwrite(rows)


def dump_queues(controller: FlowController) -> str:
    rows = [("PriorityLevelName", "Index", "PendingRequests", "ExecutingRequests", "SeatsInUse", "NextDispatchR",
             "InitialSeatsSum", "MaxSeatsSum", "TotalWorkSum")]
    executing = _executing_per_queue(controller)
    for name in sorted(controller.levels):
        qs = controller.levels[name].queueset
        if qs is None:  # exempt: no queues
            continue
        for q in qs.queues:
            initial = sum(r.estimate.initial_seats for r in q.waiting)
            most = sum(r.estimate.max_seats for r in q.waiting)
            work = sum(r.work(qs.estimated_service) for r in q.waiting)
            rows.append((name, str(q.index), str(len(q.waiting)), str(executing.get((name, q.index), 0)),
                         str(q.seats_in_use), seat_seconds(q.next_dispatch_r), str(initial), str(most),
                         seat_seconds(work)))
    return tabwrite(rows)


def _executing_per_queue(controller: FlowController) -> dict[tuple[str, int], int]:
    out: dict[tuple[str, int], int] = {}
    for e in controller.observer.entries.values():
        req = e.ticket.request
        if e.ticket.state == EXECUTING and req is not None and req.queue is not None:
            key = (e.ticket.priority_level.name, req.queue.index)
            out[key] = out.get(key, 0) + 1
    return out


def dump_requests(controller: FlowController, include_request_details: bool = False) -> str:
    header = ["PriorityLevelName", "FlowSchemaName", "QueueIndex", "RequestIndexInQueue", "FlowDistingsher",
              "ArriveTime", "InitialSeats", "FinalSeats", "AdditionalLatency", "StartTime"]
    if include_request_details:
        header += ["UserName", "Verb", "APIPath", "Namespace", "Name", "APIVersion", "Resource", "SubResource"]
    rows = [header]
    entries = controller.observer.entries
    for name, level_entries in sorted(_by_level(controller).items()):
        level = controller.levels.get(name)
        placed: list[tuple[int, int, Entry]] = []
        if level is not None and level.queueset is not None:  # the waiting ones in their queues' order
            for q in level.queueset.queues:
                placed += [(q.index, i, entries[r.payload]) for i, r in enumerate(q.waiting) if r.payload in entries]
        for e in level_entries:
            if e.ticket.state == EXECUTING:
                req = e.ticket.request
                placed.append((req.queue.index if req is not None and req.queue is not None else -1, -1, e))
        placed.sort(key=lambda p: (p[0] < 0, p[0], p[1] < 0))
        for qi, ri, e in placed:
            rows.append(_request_row(controller, name, qi, ri, e, include_request_details))
    return tabwrite(rows)


def _request_row(controller: FlowController, level: str, queue: int, index: int, e: Entry,
                 details: bool) -> list[str]:
    t, d = e.ticket, e.digest
    row = [level, t.flow_schema.name, str(queue), str(index),
           controller.classifier.flow_distinguisher(t.flow_schema, d), rfc3339nano(e.arrived),
           str(t.estimate.initial_seats), str(t.estimate.final_seats), go_duration(t.estimate.additional_latency),
           rfc3339nano(e.started if t.state != WAITING else 0.0)]
    if details:
        version = f"{d.api_group}/{d.api_version}" if d.api_group else d.api_version
        row += [d.user.name, d.verb, d.path, d.namespace, d.name, version, d.resource, d.subresource]
    return row


def go_duration(seconds: float) -> str:
    """A duration as Go's time.Duration prints it, for the sub-minute ones a request's latency has."""
    if seconds <= 0:
        return "0s"
    for scale, unit in ((1.0, "s"), (1e-3, "ms"), (1e-6, "µs")):
        if seconds >= scale:
            return f"{seconds / scale:.9f}".rstrip("0").rstrip(".") + unit
    return f"{round(seconds * 1e9)}ns"


def _bool(value: bool) -> str:
    return "true" if value else "false"
