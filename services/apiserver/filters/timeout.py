"""Request deadlines: kube's WithTimeoutForNonLongRunningRequests and WithRequestDeadline.

A request that is not long-running must complete within --request-timeout (60 s) of its arrival, or
within its `?timeout=` (a Go duration) when that is shorter. Past the deadline, a request whose
answer has not started gets 504 with the Status kube's timeout filter writes; one whose answer is
already going out has its connection closed (kube aborts the handler), so the client never takes a
cut-off answer for a whole one. Watches (and the other long-running requests) are not bounded here:
a watch ends after its timeoutSeconds, or after --min-request-timeout to twice that.
"""
from __future__ import annotations

import asyncio
from collections.abc import Awaitable

import orjson

from services.apiserver.requestinfo import RequestInfo
from services.common import pacing
from services.common.duration import parse_duration
from services.common.errors import BadRequest

from . import Handler, RequestContext

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
    """Every request's deadline (--request-timeout after its arrival unless it asks for less), checked
    by one task every TICK.

    A timer per request (asyncio.timeout, loop.call_at) costs 8-20 µs of a request's CPU with uvloop;
    setting and clearing a dict entry costs well under one. A request past its deadline has its task
    cancelled; the handler chain asks `expired` to tell that cancellation from any other.
    """

    def __init__(self, request_timeout: float = REQUEST_TIMEOUT, tick: float = TICK) -> None:
        self.request_timeout = request_timeout
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

    def due(self, task: asyncio.Task[object] | None) -> float | None:
        """The loop time task must be answered by (None: it has no deadline)."""
        return self._due.get(task) if task is not None else None  # type: ignore[arg-type]

    def shorten(self, task: asyncio.Task[object], timeout: float) -> None:
        """The request asked for `timeout` (less than --request-timeout) since its arrival."""
        due = self._due.get(task)
        if due is not None and timeout < self.request_timeout:
            self._due[task] = due - (self.request_timeout - timeout)

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


async def _timed_out(ctx: RequestContext) -> None:
    """Past the deadline: 504 as kube's timeout filter writes it, or, with the answer already
    started, the connection closed under it."""
    if ctx.response_started:
        await ctx.abort()
        return
    ctx.code = 504
    ctx.response_started = True
    await ctx.send({"type": "http.response.start", "status": 504, "headers": [
        (b"content-type", TIMEOUT_CONTENT_TYPE.encode()), (b"audit-id", ctx.audit_id.encode()),
        (b"content-length", str(len(TIMEOUT_BODY)).encode())]})
    await ctx.send({"type": "http.response.body", "body": TIMEOUT_BODY})


def with_timeout_for_non_long_running_requests(handler: Handler, deadlines: Deadlines) -> Handler:
    """The request's deadline, counted from its arrival (with_request_deadline narrows it once the
    request is known), and the 504 past it."""
    async def timeout(ctx: RequestContext) -> None:
        task: asyncio.Task[object] = asyncio.current_task()  # type: ignore[assignment]
        deadlines.set(task, asyncio.get_running_loop().time() + deadlines.request_timeout)
        try:
            await handler(ctx)
        except asyncio.CancelledError:  # the deadline passed (or the server is stopping)
            if not deadlines.expired(task):
                raise
            task.uncancel()
            await _timed_out(ctx)
        finally:
            deadlines.clear(task)
    return timeout


def with_request_deadline(handler: Handler, deadlines: Deadlines) -> Handler:
    """No deadline for a long-running request (which no longer counts as a small call either:
    services.common.pacing); a ?timeout= shorter than --request-timeout for the others."""
    def deadline(ctx: RequestContext) -> Awaitable[None]:
        if long_running(ctx.info):
            deadlines.set(asyncio.current_task(), None)  # type: ignore[arg-type]
            pacing.large()
        elif "timeout" in ctx.query:
            deadlines.shorten(asyncio.current_task(),  # type: ignore[arg-type]
                              request_timeout(ctx.query, deadlines.request_timeout))
        return handler(ctx)
    return deadline
