"""Waiting on a condition in tests: poll until it holds, fail with what was awaited when it never does.

One helper for the whole suite (tests wait on conditions, never on sleeps): informers, controllers and caches
take a change a moment after the write that made it.
"""
from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from typing import Any


def _checks(check: Callable[[], Any], timeout: float, what: str) -> Iterator[Any]:
    """check()'s values until one is truthy; AssertionError once timeout s have passed without one."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        yield value
        if value:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what} (last: {value!r})")


def wait_for(check: Callable[[], Any], timeout: float = 30.0, what: str = "condition",
             interval: float = 0.1) -> Any:
    """Call check() until it returns a truthy value and return that value; AssertionError after timeout s."""
    for value in _checks(check, timeout, what):
        if value:
            return value
        time.sleep(interval)


async def until(check: Callable[[], Any], timeout: float = 30.0, what: str = "condition",
                interval: float = 0.01) -> Any:
    """wait_for inside an event loop: the loop runs (informers, work queues) between the checks."""
    for value in _checks(check, timeout, what):
        if value:
            return value
        await asyncio.sleep(interval)
