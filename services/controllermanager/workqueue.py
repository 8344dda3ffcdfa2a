"""client-go's workqueue: a key is queued once however often it is added, never handled by two workers at
once (added while handled, it is handled again after), and retried with exponential backoff when its
handler fails. Metrics carry client-go's names, per queue name."""
from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Hashable
from typing import Any

from prometheus_client import Counter, Gauge, Histogram

from services.common.background import cancel_and_wait

log = logging.getLogger(__name__)

DEPTH = Gauge("workqueue_depth", "Current depth of workqueue", ["name"])
ADDS = Counter("workqueue_adds_total", "Total number of adds handled by workqueue", ["name"])
RETRIES = Counter("workqueue_retries_total", "Total number of retries handled by workqueue", ["name"])
QUEUE_DURATION = Histogram("workqueue_queue_duration_seconds",
                           "How long in seconds an item stays in workqueue before being requested.", ["name"],
                           buckets=(1e-8, 1e-7, 1e-6, 1e-5, 1e-4, 1e-3, 0.01, 0.1, 1, 10))
WORK_DURATION = Histogram("workqueue_work_duration_seconds",
                          "How long in seconds processing an item from workqueue takes.", ["name"],
                          buckets=(1e-8, 1e-7, 1e-6, 1e-5, 1e-4, 1e-3, 0.01, 0.1, 1, 10))

# client-go's default controller rate limiter: 5 ms doubling per failure, capped (here at 30 s).
BASE_DELAY, MAX_DELAY = 0.005, 30.0


class WorkQueue:
    def __init__(self, name: str, handler: Callable[[Any], Awaitable[None]], workers: int = 1) -> None:
        self.name, self.handler, self.workers = name, handler, workers
        self._queue: asyncio.Queue[Hashable] = asyncio.Queue()
        self._dirty: dict[Hashable, float] = {}  # queued keys -> when added
        self._processing: set[Hashable] = set()
        self._again: set[Hashable] = set()  # added while processing
        self._failures: dict[Hashable, int] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self._timers: set[asyncio.TimerHandle] = set()

    def add(self, key: Hashable) -> None:
        if key in self._dirty:
            return
        ADDS.labels(self.name).inc()
        if key in self._processing:
            self._again.add(key)
            return
        self._dirty[key] = time.monotonic()
        self._queue.put_nowait(key)
        DEPTH.labels(self.name).set(self._queue.qsize())

    def add_after(self, key: Hashable, delay: float) -> None:
        handle = asyncio.get_running_loop().call_later(delay, lambda: (self._timers.discard(handle), self.add(key)))
        self._timers.add(handle)

    def __len__(self) -> int:
        return self._queue.qsize()

    def start(self) -> None:
        self._tasks = [asyncio.create_task(self._worker(), name=f"{self.name}-worker-{i}")
                       for i in range(self.workers)]

    async def stop(self) -> None:
        for t in self._timers:
            t.cancel()
        self._timers.clear()
        for task in self._tasks:
            await cancel_and_wait(task)
        self._tasks = []

    async def _worker(self) -> None:
        while True:
            key = await self._queue.get()
            added = self._dirty.pop(key, time.monotonic())
            DEPTH.labels(self.name).set(self._queue.qsize())
            QUEUE_DURATION.labels(self.name).observe(time.monotonic() - added)
            self._processing.add(key)
            start = time.monotonic()
            try:
                await self.handler(key)
                self._failures.pop(key, None)
            except asyncio.CancelledError:
                raise
            except Exception as e:  # noqa: BLE001 - retried with backoff, as client-go's AddRateLimited
                n = self._failures[key] = self._failures.get(key, 0) + 1
                RETRIES.labels(self.name).inc()
                log.info("%s: %s: %s; retrying", self.name, key, e)
                self.add_after(key, min(BASE_DELAY * 2 ** n, MAX_DELAY))
            finally:
                WORK_DURATION.labels(self.name).observe(time.monotonic() - start)
                self._processing.discard(key)
                if key in self._again:
                    self._again.discard(key)
                    self.add(key)
