"""Fair queuing for one priority level: kube's QueueSet, as synchronous logic with an injected clock.

A QueueSet has `concurrency_limit` seats (its level's current limit, moved by borrowing). A request
asks for the seats of its WorkEstimate (services/apf/workestimator.py): its initial seats while it
runs, and, for a write with many watchers, its final seats for a little while after it answers; it
holds the larger number throughout. With a Queuing config the request joins one of `queues` FIFO
queues chosen by shuffle sharding: its flow's hash deals a hand of `hand_size` queues, and it joins the
one with the least work waiting. Without one (limitResponse Reject) it executes at once or is
rejected (concurrency-limit).

Fair order is kube's, in seat-seconds: a virtual clock R advances, while queues are active, by
min(seats wanted, limit) / active queues per real second (the work each active queue is owed); a
queue has nextDispatchR, the virtual time its head may start. Dispatch takes the head whose virtual
finish (nextDispatchR + its work) is smallest, scanning round-robin from after the last queue served,
and only if its seats fit (a request wider than the limit goes alone); the queue's nextDispatchR then
grows by the head's work, estimated as its initial seats x 3 ms plus its final seat-seconds. When the
request finishes, the estimate is corrected by the real duration, and a queue's nextDispatchR never
falls behind the arrival of its oldest request (kube's anti-windup). A queue that becomes active
starts at R, so idle flows get no credit and busy flows no debt. A request arriving while every seat
is taken and its queue is full is rejected (queue-full); one that waits longer than the wait limit
is rejected by expire() (time-out).

Nothing here blocks or schedules: the caller (controller.py) turns the outcomes into gRPC responses,
calls expire() from a timer at next_deadline(), and release_final() when a request's final seats are due.
The state (seats in use and waiting, queues with their requests) is plain attributes, for dumps.
"""
from __future__ import annotations

import hashlib
import heapq
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .borrowing import Integrator
from .config import Queuing
from .workestimator import ONE_SEAT, WorkEstimate

WAITING, EXECUTING, LINGERING, FINISHED, REJECTED = "waiting", "executing", "lingering", "finished", "rejected"
QUEUE_FULL, TIME_OUT, CONCURRENCY_LIMIT = "queue-full", "time-out", "concurrency-limit"

ESTIMATED_SERVICE_SECONDS = 0.003  # kube's estimatedServiceDuration
# Flows whose hand of queues a QueueSet remembers (a flow's hand never changes); a burst of new flows beyond
# it starts the memory again.
HANDS_CACHED = 4096


@dataclass(eq=False, slots=True)
class Request:
    flow: str
    estimate: WorkEstimate
    arrival: float
    deadline: float
    payload: Any = None
    state: str = WAITING
    reason: str = ""                  # why it was rejected
    decided_at: float = 0.0           # when it was dispatched or rejected
    arrival_r: float = 0.0            # R at arrival
    queue: Queue | None = field(default=None, repr=False)
    # the seats it holds (or waits for): the larger of its estimate's initial and final seats
    seats: int = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.seats = self.estimate.max_seats

    @property
    def wait(self) -> float:
        """Seconds between arrival and the decision (dispatch or rejection)."""
        return self.decided_at - self.arrival

    def work(self, service: float) -> float:
        """Its estimated seat-seconds (kube's totalWork)."""
        return self.estimate.initial_seats * service + self.estimate.final_work


@dataclass(eq=False)
class Queue:
    index: int
    waiting: deque[Request] = field(default_factory=deque)
    seats_waiting: int = 0
    work_waiting: float = 0.0         # seat-seconds of the waiting requests
    seats_in_use: int = 0
    requests_executing: int = 0
    next_dispatch_r: float = 0.0

    @property
    def active(self) -> bool:
        return bool(self.waiting) or self.requests_executing > 0


def flow_hash(flow: str) -> int:
    return int.from_bytes(hashlib.blake2b(flow.encode(), digest_size=8).digest(), "big")


def deal(hash_value: int, deck: int, hand: int) -> list[int]:
    """Shuffle sharding: `hand` distinct cards out of `deck`, drawn from the hash's mixed-radix digits."""
    hand = min(hand, deck)
    picked: list[int] = []
    for i in range(hand):
        hash_value, r = divmod(hash_value, deck - i)
        card = r
        for c in sorted(picked):  # the r-th card not yet dealt
            if card >= c:
                card += 1
        picked.append(card)
    return picked


class QueueSet:
    def __init__(self, concurrency_limit: int, queuing: Queuing | None, *, wait_limit: float,
                 clock: Callable[[], float] = time.monotonic,
                 estimated_service: float = ESTIMATED_SERVICE_SECONDS) -> None:
        self.concurrency_limit = max(0, concurrency_limit)
        self.queuing = queuing
        self.wait_limit = wait_limit
        self.clock = clock
        self.estimated_service = estimated_service
        self.queues = [Queue(i) for i in range(queuing.queues)] if queuing else []
        self.seats_in_use = 0
        self.seats_waiting = 0
        self.requests_executing = 0
        self.requests_waiting = 0
        # seats in use plus seats waiting over time: the level's seat demand, for borrowing
        self.demand = Integrator(clock)
        self.current_r = 0.0
        self._r_at = clock()
        self._robin = -1
        self._enqueues = 0
        self._active = 0                       # queues with requests waiting or executing
        self._nonempty: set[Queue] = set()     # queues with requests waiting
        # waiting requests by deadline (each has its own: kube's wait limit is a quarter of the request's
        # time budget), for expiry; (deadline, arrival number, request), done ones dropped lazily
        self._deadlines: list[tuple[float, int, Request]] = []
        self._arrivals = 0
        self._hands: dict[str, list[int]] = {}  # flow -> its hand of queues (shuffle sharding)

    # virtual time ------------------------------------------------------------

    def _sync_time(self, now: float) -> None:
        elapsed = now - self._r_at
        self._r_at = now
        if elapsed <= 0:
            return
        if self._active:
            wanted = self.seats_in_use + self.seats_waiting
            self.current_r += elapsed * min(wanted, self.concurrency_limit) / self._active

    def _note_demand(self) -> None:
        self.demand.set(self.seats_in_use + self.seats_waiting)

    # the API -----------------------------------------------------------------

    def start(self, flow: str, estimate: WorkEstimate = ONE_SEAT, payload: Any = None,
              wait_limit: float = 0.0) -> tuple[Request, list[Request]]:
        """A new request: its state says whether it executes now, waits in a queue, or was rejected.
        It waits at most wait_limit seconds, and never longer than the level's wait limit
        (--apf-queue-wait-seconds, which alone applies when wait_limit is 0).

        The list holds other waiting requests that the arrival let execute (a queue's anti-windup can
        reorder the heads); the caller notifies them as it does after release().
        """
        now = self.clock()
        self._sync_time(now)
        limit = min(wait_limit, self.wait_limit) if wait_limit > 0 else self.wait_limit
        req = Request(flow, estimate, now, now + limit, payload, arrival_r=self.current_r)
        if not self.queuing:
            if self._fits(req.seats):
                self._execute(req, now)
            else:
                self._reject(req, CONCURRENCY_LIMIT, now)
            return req, []
        q = self._choose_queue(flow)
        if self.seats_in_use >= self.concurrency_limit and len(q.waiting) >= self.queuing.queue_length_limit:
            self._reject(req, QUEUE_FULL, now)
            return req, []
        if not q.active:
            q.next_dispatch_r = self.current_r
            self._active += 1
        q.waiting.append(req)
        self._nonempty.add(q)
        q.seats_waiting += req.seats
        q.work_waiting += req.work(self.estimated_service)
        self.seats_waiting += req.seats
        self.requests_waiting += 1
        req.queue = q
        self._arrivals += 1
        heapq.heappush(self._deadlines, (req.deadline, self._arrivals, req))
        self._bound(q)
        self._note_demand()
        return req, [r for r in self._dispatch(now) if r is not req]

    def release(self, req: Request) -> list[Request]:
        """The request finished (or its caller gave up waiting): returns the requests that now execute.
        A request with final seats keeps them (state LINGERING) until release_final()."""
        now = self.clock()
        if req.state == WAITING:
            self._sync_time(now)
            self._remove_waiting(req)
            req.state = FINISHED
            self._note_demand()
            return []
        if req.state != EXECUTING:
            return []
        self._sync_time(now)
        self.requests_executing -= 1
        q = req.queue
        if q is not None:
            q.requests_executing -= 1
            if not q.active:
                self._active -= 1
            # replace the estimate charged at dispatch by the real service time (kube does the same)
            q.next_dispatch_r -= req.estimate.initial_seats * (self.estimated_service - (now - req.decided_at))
            self._bound(q)
        if req.estimate.additional_latency > 0:
            req.state = LINGERING
            return self._dispatch(now)
        return self._free(req, now)

    def release_final(self, req: Request) -> list[Request]:
        """A LINGERING request's additional latency is over: its seats are free."""
        if req.state != LINGERING:
            return []
        now = self.clock()
        self._sync_time(now)
        return self._free(req, now)

    def expire(self) -> list[Request]:
        """Reject (reason time-out) every waiting request whose wait limit has passed."""
        now = self.clock()
        out: list[Request] = []
        while self._deadlines:
            head = self._deadlines[0][2]
            if head.state != WAITING:
                heapq.heappop(self._deadlines)
                continue
            if head.deadline > now:
                break
            heapq.heappop(self._deadlines)
            self._sync_time(now)
            self._remove_waiting(head)
            self._reject(head, TIME_OUT, now)
            out.append(head)
        if out:
            self._note_demand()
        return out

    def set_concurrency_limit(self, limit: int) -> list[Request]:
        """A new limit (borrowing, or the configuration changed the level's share): returns the
        requests that now execute."""
        now = self.clock()
        self._sync_time(now)
        self.concurrency_limit = max(0, limit)
        return self._dispatch(now) if self.queuing else []

    def next_deadline(self) -> float | None:
        while self._deadlines and self._deadlines[0][2].state != WAITING:
            heapq.heappop(self._deadlines)
        return self._deadlines[0][0] if self._deadlines else None

    @property
    def idle(self) -> bool:
        return not self.requests_waiting and not self.requests_executing

    # internals ---------------------------------------------------------------

    def _fits(self, seats: int) -> bool:
        """kube's canAccommodateSeats: a request wider than the limit goes only when nothing executes."""
        if seats > self.concurrency_limit:
            return self.requests_executing == 0
        return self.seats_in_use + seats <= self.concurrency_limit

    def _choose_queue(self, flow: str) -> Queue:
        assert self.queuing is not None
        hand = self._hands.get(flow)
        if hand is None:
            if len(self._hands) >= HANDS_CACHED:
                self._hands.clear()
            hand = self._hands[flow] = deal(flow_hash(flow), len(self.queues), self.queuing.hand_size)
        offset = self._enqueues % len(hand)
        self._enqueues += 1
        best = self.queues[hand[offset]]
        for i in range(1, len(hand)):
            q = self.queues[hand[(offset + i) % len(hand)]]
            if q.work_waiting < best.work_waiting:
                best = q
        return best

    def _bound(self, q: Queue) -> None:
        """kube's anti-windup: dispatch in the virtual world never precedes the oldest arrival."""
        if q.waiting and q.next_dispatch_r < q.waiting[0].arrival_r:
            q.next_dispatch_r = q.waiting[0].arrival_r

    def _remove_waiting(self, req: Request) -> None:
        q = req.queue
        assert q is not None
        q.waiting.remove(req)
        q.seats_waiting -= req.seats
        q.work_waiting -= req.work(self.estimated_service)
        self.seats_waiting -= req.seats
        self.requests_waiting -= 1
        if not q.waiting:
            self._nonempty.discard(q)
            if not q.requests_executing:
                self._active -= 1
        self._bound(q)

    def _execute(self, req: Request, now: float) -> None:
        req.state = EXECUTING
        req.decided_at = now
        self.seats_in_use += req.seats
        self.requests_executing += 1
        self._note_demand()

    def _free(self, req: Request, now: float) -> list[Request]:
        req.state = FINISHED
        self.seats_in_use -= req.seats
        if req.queue is not None:
            req.queue.seats_in_use -= req.seats
        self._note_demand()
        return self._dispatch(now) if self.queuing else []

    def _reject(self, req: Request, reason: str, now: float) -> None:
        req.state = REJECTED
        req.reason = reason
        req.decided_at = now

    def _dispatch(self, now: float) -> list[Request]:
        out: list[Request] = []
        n = len(self.queues)
        while self.requests_waiting and self.seats_in_use < self.concurrency_limit:
            # the smallest virtual finish; of equal ones, the first from after the last queue served
            robin, service = self._robin, self.estimated_service
            best = min(self._nonempty, key=lambda q: (q.next_dispatch_r + q.waiting[0].work(service),
                                                      (q.index - robin - 1) % n))
            head = best.waiting[0]
            if not self._fits(head.seats):
                break  # the fair choice does not fit yet; never let narrower requests overtake it
            best.waiting.popleft()
            if not best.waiting:
                self._nonempty.discard(best)
            best.seats_waiting -= head.seats
            best.work_waiting -= head.work(self.estimated_service)
            self.seats_waiting -= head.seats
            self.requests_waiting -= 1
            if head.estimate.final_seats > self.concurrency_limit > 0:
                # final seats beyond the level's limit: fewer seats for longer, the same work
                e = head.estimate
                head.estimate = WorkEstimate(e.initial_seats, self.concurrency_limit,
                                             e.final_work / self.concurrency_limit)
                head.seats = head.estimate.max_seats
            self._robin = best.index
            best.requests_executing += 1
            best.seats_in_use += head.seats
            best.next_dispatch_r += head.work(self.estimated_service)
            self._execute(head, now)
            self._bound(best)
            out.append(head)
        return out
