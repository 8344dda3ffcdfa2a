"""Pacing of large answers: in one process, the parts of a large answer (a LIST sent in parts)
give way to the small calls in flight.

On a machine with few cores, a LIST of hundreds of megabytes keeps the CPU of every process on its
path busy (storage renders, the registry re-frames, the proxy encrypts); a GET arriving meanwhile
gets its turns on each event loop between parts, and waits for CPU that the LIST's processes
share. Fair sharing of the streams (mux/flow.py) bounds how long one part holds a stream; this bounds how
much CPU the parts take while small calls are in flight: before each next part, the producer of a
large answer waits while any small call is in flight in its process, for at most MAX_DEFER
seconds, so a large answer still moves at least one part per MAX_DEFER (no starvation under a
steady stream of small calls), and at full speed when there is none. Since each hop of a LIST is
flow-controlled end to end (mux.WINDOW), a hop that defers slows the hops behind it too: their
CPU goes to the small call as well.

A small call is what `begin()` counts until its `end()` (the mux server's unary calls, the proxy's
requests that are not long-running); a call whose answer turns out to come in parts stops counting
as small when it does (`large()`), so that its parts do not wait for themselves.

`quiet()` says whether the parts of a large answer may be larger (mux/flow.py, part_bytes): fewer
parts cost every hop fewer messages, but a small call arriving meanwhile waits longer for each, so
only while no other small call is in flight and none ended within QUIET_HOLD.
"""
from __future__ import annotations

import asyncio
import contextvars
import time

# The longest a large answer's next part waits for small calls in flight: about the work of one
# small call on every hop, short enough that a steady stream of small calls still lets a large
# answer through at a bounded pace (one 128 KiB part per hop per MAX_DEFER at worst).
MAX_DEFER = 0.02
# How long after a small call ended a process still counts as busy: well above the gap between one
# client's back-to-back requests, so that parts stay small while any client keeps calling, and short
# beside the cadence of a cluster's periodic calls (leases renew every 2 s).
QUIET_HOLD = 0.25

_small = 0
_last_end = float("-inf")  # monotonic time when the last small call ended (a large one's end aside)
_waiters: list[asyncio.Future[None]] = []
_current: contextvars.ContextVar[Call | None] = contextvars.ContextVar("pacing_call", default=None)


class Call:
    """One small call, counted from begin() until end() (or large())."""

    __slots__ = ("counted",)

    def __init__(self) -> None:
        self.counted = True

    def end(self) -> None:
        """The small call is done."""
        global _last_end
        if self.counted:
            _last_end = time.monotonic()
            self.large()

    def large(self) -> None:
        """The call answers in parts: no longer counted, and no small call that ended."""
        global _small
        if not self.counted:
            return
        self.counted = False
        _small -= 1
        if not _small and _waiters:
            _wake_all()


def begin() -> Call:
    """A small call starts in this task (and what it awaits): counted until its end()."""
    global _small
    _small += 1
    call = Call()
    _current.set(call)
    return call


def large() -> None:
    """The current task's call answers in parts: no longer a small call."""
    call = _current.get()
    if call is not None:
        call.large()


def in_flight() -> int:
    """Small calls in flight in this process."""
    return _small


def quiet() -> bool:
    """No small call but the current task's own in flight in this process, and none ended within
    QUIET_HOLD."""
    call = _current.get()
    others = _small - (call is not None and call.counted)
    return not others and time.monotonic() - _last_end >= QUIET_HOLD


def _wake_all() -> None:
    waiters = _waiters[:]
    _waiters.clear()
    for fut in waiters:
        if not fut.done():
            try:
                fut.set_result(None)
            except RuntimeError:  # its loop is closed
                pass


def _wake(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)


async def next_part() -> None:
    """Before a large answer's next part: let the small calls in flight go first (at most MAX_DEFER)."""
    if not _small:
        return
    loop = asyncio.get_running_loop()
    fut: asyncio.Future[None] = loop.create_future()
    _waiters.append(fut)
    timer = loop.call_later(MAX_DEFER, _wake, fut)
    try:
        await fut
    finally:
        timer.cancel()
        try:  # woken by its timer or cancelled: still listed
            _waiters.remove(fut)
        except ValueError:
            pass
