"""Batch mode (kube's plugin/pkg/audit/buffered): process() only queues the events; a background task
takes batches of up to max_batch_size, waiting at most max_batch_wait for a batch to fill, throttled
to qps/burst batches per second, and hands each to the delegate backend (in its own task when the
delegate is asynchronous, as the webhook is). Events that do not fit in the buffer are dropped and
counted (apiserver_audit_error_total{plugin="buffered"}); stop() delivers everything still queued,
the throttle no longer applied.
"""
from __future__ import annotations

import asyncio
import collections
import logging
from dataclasses import dataclass

from . import Backend, Event
from .metrics import plugin_error

log = logging.getLogger(__name__)
PLUGIN = "buffered"


@dataclass(frozen=True)
class BatchConfig:
    buffer_size: int
    max_batch_size: int
    max_batch_wait: float = 0.0
    throttle_enable: bool = False
    throttle_qps: float = 0.0
    throttle_burst: int = 0
    async_delegate: bool = False


class TokenBucket:
    """qps tokens a second, at most burst saved up (flowcontrol.NewTokenBucketRateLimiter)."""

    def __init__(self, qps: float, burst: int) -> None:
        self.qps, self.burst = qps, burst
        self.tokens = float(burst)
        self.last = 0.0

    def reserve(self, now: float) -> float:
        """Take a token; how long to wait before it may be used."""
        if self.last:
            self.tokens = min(float(self.burst), self.tokens + (now - self.last) * self.qps)
        self.last = now
        self.tokens -= 1
        return 0.0 if self.tokens >= 0 else -self.tokens / self.qps


class BufferedBackend:
    def __init__(self, delegate: Backend, config: BatchConfig) -> None:
        self.delegate, self.config = delegate, config
        self.name = f"{PLUGIN}<{delegate.name}>"
        self._buffer: collections.deque[Event] = collections.deque()
        self._wake = asyncio.Event()
        self._stopped = asyncio.Event()
        self._stopping = False
        self._task: asyncio.Task[None] | None = None
        self._sends: set[asyncio.Task[None]] = set()
        self._throttle = (TokenBucket(config.throttle_qps, config.throttle_burst)
                          if config.throttle_enable else None)

    def process(self, events: list[Event]) -> bool:
        room = self.config.buffer_size - len(self._buffer)
        if self._stopping:
            room = 0
        if room < len(events):
            reason = "audit backend shut down" if self._stopping else "audit buffer queue blocked"
            plugin_error(PLUGIN, reason, events[max(room, 0):])
            events = events[:max(room, 0)]
        was_empty = not self._buffer
        self._buffer.extend(events)
        # the collector waits for a first event, then for a full batch (or max_batch_wait)
        if was_empty or len(self._buffer) >= self.config.max_batch_size or not self.config.max_batch_wait:
            self._wake.set()
        return True  # as kube's: a full buffer drops events, it does not fail the request

    async def start(self) -> None:
        await self.delegate.start()
        self._task = asyncio.create_task(self._run(), name=f"audit {self.name}")

    async def _collect(self) -> list[Event]:
        """Up to max_batch_size events: the first one awaited, then the rest for at most max_batch_wait."""
        cfg = self.config
        while not self._buffer:
            if self._stopping:
                return []
            self._wake.clear()
            await self._wake.wait()
        if len(self._buffer) < cfg.max_batch_size and cfg.max_batch_wait > 0 and not self._stopping:
            self._wake.clear()
            try:
                await asyncio.wait_for(self._wake.wait(), cfg.max_batch_wait)
            except asyncio.TimeoutError:
                pass
        n = min(cfg.max_batch_size, len(self._buffer))
        return [self._buffer.popleft() for _ in range(n)]

    async def _run(self) -> None:
        while True:
            batch = await self._collect()
            if not batch:
                return
            if self._throttle is not None and not self._stopping:
                delay = self._throttle.reserve(asyncio.get_running_loop().time())
                if delay > 0:
                    try:  # a stop ends the wait: what is left is delivered at once (the stop has a grace)
                        await asyncio.wait_for(self._stopped.wait(), delay)
                    except asyncio.TimeoutError:
                        pass
            self._send(batch)

    def _send(self, batch: list[Event]) -> None:
        if not self.config.async_delegate:
            self._deliver(batch)
            return
        task = asyncio.create_task(self._deliver_async(batch))
        self._sends.add(task)
        task.add_done_callback(self._sends.discard)

    def _deliver(self, batch: list[Event]) -> None:
        try:
            self.delegate.process(batch)
        except Exception as e:  # noqa: BLE001 - a crashing delegate loses its batch, not the loop
            log.exception("audit backend %s failed", self.delegate.name)
            plugin_error(PLUGIN, e, batch)

    async def _deliver_async(self, batch: list[Event]) -> None:
        send = getattr(self.delegate, "send", None)
        if send is None:
            self._deliver(batch)
            return
        await send(batch)

    async def stop(self) -> None:
        """kube's Shutdown: no new events, everything queued delivered, then the sends in flight
        awaited. Unlike kube's, the throttle no longer holds batches back: the process has a grace
        period to stop in, and the events must not be lost to it."""
        self._stopping = True
        self._stopped.set()
        self._wake.set()
        if self._task is not None:
            await self._task
        if self._sends:
            await asyncio.gather(*self._sends, return_exceptions=True)
        await self.delegate.stop()
