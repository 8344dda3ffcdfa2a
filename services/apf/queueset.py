"""Fair queuing for one priority level: kube's QueueSet, as synchronous logic with an injected clock.

A QueueSet owns `concurrency_limit` seats. A request asks for `width` seats (1 for
now: width estimation for LIST and watch comes later). With a Queuing config the
request is put in one of `queues` FIFO queues chosen by shuffle sharding: the flow
key is hashed, a hand of `hand_size` distinct queues is dealt from the hash, and the
request joins the one with the fewest seats waiting and executing. Requests are
then dispatched from the queues in fair order (below). Without a Queuing config
(limitResponse Reject) a request executes at once or is rejected.

Fair order follows kube's QueueSet: a virtual clock R advances, while queues are
active, at min(seats wanted, limit) / active queues per real second; each queue has
nextDispatchR, the virtual time at which its head may go. Dispatch always takes the
head of the non-empty queue with the smallest nextDispatchR and advances that
queue's nextDispatchR by width x the estimated service time; when the request
finishes, the estimate is corrected by the real duration. A queue that becomes
active starts at the current R, so idle flows get no credit and busy flows no debt.

Nothing here blocks or schedules: the caller (controller.py) turns the outcomes into
gRPC responses and calls expire() from a timer at next_deadline().
"""
from __future__ import annotations

import hashlib
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .config import Queuing

WAITING, EXECUTING, FINISHED, REJECTED = "waiting", "executing", "finished", "rejected"
QUEUE_FULL, TIME_OUT, CONCURRENCY_LIMIT = "queue-full", "time-out", "concurrency-limit"

ESTIMATED_SERVICE_SECONDS = 3.0  # kube's estimatedServiceDuration


@dataclass(eq=False)
class Request:
    flow: str
    width: int
    arrival: float
    deadline: float
    payload: Any = None
    state: str = WAITING
    reason: str = ""                  # why it was rejected
    decided_at: float = 0.0           # when it was dispatched or rejected
    queue: "_Queue | None" = field(default=None, repr=False)

    @property
    def wait(self) -> float:
        """Seconds between arrival and the decision (dispatch or rejection)."""
        return self.decided_at - self.arrival


@dataclass(eq=False)
class _Queue:
    index: int
    waiting: deque[Request] = field(default_factory=deque)
    seats_waiting: int = 0
    seats_executing: int = 0
    next_dispatch_r: float = 0.0

    @property
    def active(self) -> bool:
        return bool(self.waiting) or self.seats_executing > 0


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
        self.concurrency_limit = max(1, concurrency_limit)
        self.queuing = queuing
        self.wait_limit = wait_limit
        self.clock = clock
        self.estimated_service = estimated_service
        self.queues = [_Queue(i) for i in range(queuing.queues)] if queuing else []
        self.seats_executing = 0
        self.seats_waiting = 0
        self.requests_executing = 0
        self.requests_waiting = 0
        self._active_queues = 0
        self._nonempty: set[_Queue] = set()
        self._arrivals: deque[Request] = deque()   # waiting requests in arrival order, for expiry
        self._r = 0.0
        self._r_at = clock()
        self._robin = 0

    # virtual time ------------------------------------------------------------

    def _advance(self, now: float) -> None:
        elapsed = now - self._r_at
        self._r_at = now
        if elapsed > 0 and self._active_queues:
            wanted = self.seats_executing + self.seats_waiting
            self._r += elapsed * min(wanted, self.concurrency_limit) / self._active_queues

    # the API -----------------------------------------------------------------

    def start(self, flow: str, width: int = 1, payload: Any = None) -> tuple[Request, list[Request]]:
        """A new request: its state says whether it executes now, waits in a queue, or was rejected.

        The list holds other waiting requests that the arrival let execute (possible only
        when widths differ); the caller notifies them as it does after release().
        """
        now = self.clock()
        width = max(1, min(width, self.concurrency_limit))
        req = Request(flow, width, now, now + self.wait_limit, payload)
        if not self.queuing:
            if self.seats_executing + width <= self.concurrency_limit:
                self._execute(req, now)
            else:
                self._reject(req, CONCURRENCY_LIMIT, now)
            return req, []
        self._advance(now)
        q = self._choose_queue(flow)
        if len(q.waiting) >= self.queuing.queue_length_limit:
            self._reject(req, QUEUE_FULL, now)
            return req, []
        if not q.active:
            q.next_dispatch_r = self._r
            self._active_queues += 1
        q.waiting.append(req)
        q.seats_waiting += width
        self.seats_waiting += width
        self._nonempty.add(q)
        req.queue = q
        self.requests_waiting += 1
        self._arrivals.append(req)
        return req, [r for r in self._dispatch(now) if r is not req]

    def release(self, req: Request) -> list[Request]:
        """The request finished (or its caller gave up waiting): returns the requests that now execute."""
        now = self.clock()
        if req.state == WAITING:
            self._advance(now)
            self._remove_waiting(req)
            req.state = FINISHED
            return []
        if req.state != EXECUTING:
            return []
        self._advance(now)
        req.state = FINISHED
        self.seats_executing -= req.width
        self.requests_executing -= 1
        q = req.queue
        if q is None:
            return []
        q.seats_executing -= req.width
        if not q.active:
            self._active_queues -= 1
        # replace the estimate charged at dispatch by the real service time (kube does the same)
        q.next_dispatch_r -= req.width * (self.estimated_service - (now - req.decided_at))
        return self._dispatch(now)

    def expire(self) -> list[Request]:
        """Reject (reason time-out) every waiting request whose wait limit has passed."""
        now = self.clock()
        out: list[Request] = []
        while self._arrivals:
            head = self._arrivals[0]
            if head.state != WAITING:
                self._arrivals.popleft()
                continue
            if head.deadline > now:
                break
            self._arrivals.popleft()
            self._advance(now)
            self._remove_waiting(head)
            self._reject(head, TIME_OUT, now)
            out.append(head)
        return out

    def set_concurrency_limit(self, limit: int) -> list[Request]:
        """A new limit (the configuration changed the level's share): returns the requests that now execute."""
        now = self.clock()
        self._advance(now)
        self.concurrency_limit = max(1, limit)
        return self._dispatch(now) if self.queuing else []

    def next_deadline(self) -> float | None:
        while self._arrivals and self._arrivals[0].state != WAITING:
            self._arrivals.popleft()
        return self._arrivals[0].deadline if self._arrivals else None

    # internals ---------------------------------------------------------------

    def _choose_queue(self, flow: str) -> _Queue:
        assert self.queuing is not None
        hand = deal(flow_hash(flow), len(self.queues), self.queuing.hand_size)
        return min((self.queues[i] for i in hand), key=lambda q: q.seats_waiting + q.seats_executing)

    def _remove_waiting(self, req: Request) -> None:
        q = req.queue
        assert q is not None
        q.waiting.remove(req)
        q.seats_waiting -= req.width
        self.seats_waiting -= req.width
        self.requests_waiting -= 1
        if not q.waiting:
            self._nonempty.discard(q)
        if not q.active:
            self._active_queues -= 1

    def _execute(self, req: Request, now: float) -> None:
        req.state = EXECUTING
        req.decided_at = now
        self.seats_executing += req.width
        self.requests_executing += 1

    def _reject(self, req: Request, reason: str, now: float) -> None:
        req.state = REJECTED
        req.reason = reason
        req.decided_at = now

    def _dispatch(self, now: float) -> list[Request]:
        out: list[Request] = []
        n = len(self.queues)
        while self._nonempty:
            # smallest nextDispatchR; ties go round-robin from the queue after the last one served
            best = min(self._nonempty, key=lambda q: (q.next_dispatch_r, (q.index - self._robin) % n))
            head = best.waiting[0]
            if self.seats_executing + head.width > self.concurrency_limit:
                break  # the fair choice does not fit yet; never let narrower requests overtake it
            best.waiting.popleft()
            best.seats_waiting -= head.width
            self.seats_waiting -= head.width
            self.requests_waiting -= 1
            if not best.waiting:
                self._nonempty.discard(best)
            best.seats_executing += head.width
            best.next_dispatch_r += head.width * self.estimated_service
            self._robin = (best.index + 1) % n
            self._execute(head, now)
            out.append(head)
        return out
