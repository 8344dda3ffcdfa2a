"""Request deadlines: kube's WithRequestDeadline and WithTimeoutForNonLongRunningRequests.

A request that is not long-running must complete within --request-timeout (60 s) of its arrival, or
within its `?timeout=` (a Go duration) when that is shorter. Past the deadline, a request whose
answer has not started gets 504 with the Status kube's timeout filter writes; one whose answer is
already going out has its connection closed (kube aborts the handler), so the client never takes a
cut-off answer for a whole one. Watches (and the other long-running requests) are not bounded here:
a watch ends after its timeoutSeconds, or after --min-request-timeout to twice that.
"""
from __future__ import annotations

import asyncio

import orjson

from services.apiserver.requestinfo import RequestInfo
from services.common.duration import parse_duration
from services.common.errors import BadRequest

# How often the deadlines are checked: a request times out up to this much after its deadline.
TICK = 0.1
# kube-apiserver's --request-timeout and --min-request-timeout defaults
REQUEST_TIMEOUT = 60.0
MIN_REQUEST_TIMEOUT = 1800

# genericfilters.BasicLongRunningRequestCheck as kube-apiserver configures it
LONG_RUNNING_VERBS = frozenset(("watch", "proxy"))
LONG_RUNNING_SUBRESOURCES = frozenset(("attach", "exec", "proxy", "log", "portforward"))

# apierrors.NewTimeoutError("request did not complete within the allotted timeout", 0), written by the
# timeout filter as the bare metav1.Status (no kind or apiVersion: it is not run through a serializer),
# with the content type Go's sniffing gives it.
TIMEOUT_BODY = orjson.dumps({
    "metadata": {}, "status": "Failure",
    "message": "Timeout: request did not complete within the allotted timeout",
    "reason": "Timeout", "details": {}, "code": 504,
}) + b"\n"
TIMEOUT_CONTENT_TYPE = "text/plain; charset=utf-8"

_INVALID_TIMEOUT = "invalid timeout specified in the request URL"


def long_running(info: RequestInfo) -> bool:
    if info.verb in LONG_RUNNING_VERBS:
        return True
    if info.is_resource_request and info.subresource in LONG_RUNNING_SUBRESOURCES:
        return True
    return not info.is_resource_request and info.path.startswith("/debug/pprof/")


def request_timeout(query: dict[str, str], maximum: float) -> float:
    """The request's time limit: its ?timeout= if positive and shorter, else the server's maximum."""
    raw = query.get("timeout")
    if not raw:
        return maximum
    try:
        wanted = parse_duration(raw)
    except ValueError as e:
        raise BadRequest(f"{_INVALID_TIMEOUT} - {e}") from None
    return wanted if 0 < wanted < maximum else maximum


class Deadlines:
    """Every request's deadline, checked by one task every TICK.

    A timer per request (asyncio.timeout, loop.call_at) costs 8-20 µs of a request's CPU with uvloop;
    setting and clearing a dict entry costs well under one. A request past its deadline has its task
    cancelled; the handler chain asks `expired` to tell that cancellation from any other.
    """

    def __init__(self, tick: float = TICK) -> None:
        self.tick = tick
        self._due: dict[asyncio.Task[object], float] = {}
        self._expired: set[asyncio.Task[object]] = set()
        self._sweeper: asyncio.Task[None] | None = None

    def set(self, task: asyncio.Task[object], when: float | None) -> None:
        """Cancel task at loop time `when` (None: never)."""
        if when is None:
            self._due.pop(task, None)
            return
        self._due[task] = when
        if self._sweeper is None:
            self._sweeper = asyncio.ensure_future(self._sweep())

    def clear(self, task: asyncio.Task[object]) -> None:
        self._due.pop(task, None)
        self._expired.discard(task)

    def expired(self, task: asyncio.Task[object]) -> bool:
        return task in self._expired

    async def _sweep(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(self.tick)
            now = loop.time()
            late = [task for task, when in self._due.items() if when <= now] if self._due else ()
            for task in late:
                del self._due[task]
                self._expired.add(task)
                task.cancel()

    async def stop(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
            try:
                await self._sweeper
            except asyncio.CancelledError:
                pass
            self._sweeper = None
