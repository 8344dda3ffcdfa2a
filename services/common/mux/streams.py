"""Long-lived streams to a peer, as both the Calls client (client.py) and the watch client
(watchmux.py) keep them: reading one to its end with the error its waiters end with, and spreading
them over a peer's replicas."""
from __future__ import annotations

import asyncio
import itertools
import logging
import random
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any

import grpc

from ..errors import STATUS_DETAILS_KEY, APIError, InternalError, ServiceUnavailable, error_from_rpc

log = logging.getLogger(__name__)


# What gRPC core (not the peer's own code) reports when a stream breaks with its connection.
async def read_stream(call: Any, on_message: Callable[[Any], None], peer: str, what: str) -> APIError:
    """Hand each message of a long-lived stream to on_message until the stream ends; the error
    every call or watch still waiting on it ends with: the peer's own Status when it ended the stream
    with one (grpcutil's servicers always put it in the trailers), else a 503 — a closed stream, or
    one that gRPC core ended because the peer's transport went away (a GOAWAY, a reset connection of
    a replica that stopped: "Internal error from Core", RST_STREAM ...): the service did not fail,
    it is gone, and the client may retry on another replica."""
    try:
        async for message in call:
            on_message(message)
        return ServiceUnavailable(f"service unavailable ({peer}): {what} closed", headers={"Retry-After": "1"})
    except grpc.aio.AioRpcError as e:
        if any(key == STATUS_DETAILS_KEY for key, _ in e.trailing_metadata() or ()):
            return error_from_rpc(e, peer)
        return ServiceUnavailable(f"service unavailable ({peer}): {what} broken ({e.code().name}: {e.details()})",
                                  headers={"Retry-After": "1"})
    except asyncio.CancelledError:
        return ServiceUnavailable(f"service unavailable ({peer}): {what} cancelled")
    except Exception as e:  # noqa: BLE001 - everything waiting on the stream ends with it
        log.exception("%s to %s failed", what, peer)
        return InternalError(f"{what} to {peer} failed: {type(e).__name__}")


# How many times as often a Spread moves its streams for a while after one died.
DEGRADED_PACE = 6


class Spread:
    """Long-lived streams to a peer that runs as several replicas (grpcutil.Target): one per
    replica, opened on a round_robin channel (so each lands on the next connected replica), taken
    in turn by each call; one whose replica died is opened again on its next turn, on a live
    replica. With `rebalance` (seconds), a stream that old is retired at its next turn (it takes
    no new call and closes once those on it are answered) and a new one opened in its place, so
    that a replica started again gets its share back (kube's --goaway-chance does this for
    HTTP/2 clients). For `rebalance` seconds after a stream died, the streams opened are retired
    DEGRADED_PACE times as often: a replica killed and started again (what replicas are for) gets
    calls back within seconds of being ready, not only at the next regular move. A client with one
    replica never uses it (its one stream costs nothing more)."""

    def __init__(self, open_: Callable[[], Any], streams: int, rebalance: float = 0.0) -> None:
        self.open, self.pool = open_, [None] * streams
        self.turn = itertools.count()
        self.rebalance = rebalance
        self.due = [0.0] * streams  # when each stream is retired (rebalance only)
        self.degraded_until = 0.0  # a stream died: streams move often until then

    def pick(self) -> Any:
        pool = self.pool
        i = next(self.turn) % len(pool)
        stream = pool[i]
        if stream is not None and stream.alive:
            if not self.rebalance or time.monotonic() < self.due[i]:
                return stream
            stream.retire()
            died = False
        else:
            died = stream is not None  # with its replica
        stream = pool[i] = self.open()
        if self.rebalance:  # jittered, so that the streams of many clients do not move at once
            now = time.monotonic()
            if died:
                self.degraded_until = now + self.rebalance
            every = self.rebalance / DEGRADED_PACE if now < self.degraded_until else self.rebalance
            self.due[i] = now + every * random.uniform(0.8, 1.2)
        return stream


class StreamClient(ABC):
    """A client of long-lived streams to a peer, as the Calls client (client.py) and the watch client
    (watchmux.py) are: one stream opened on first use and again once it has ended, or one per replica
    (Spread, with `rebalance`); each read to its end, its messages handed to the client's
    `_on_message(stream)`, and what still waits on it failed by `_fail` once it ends. A subclass names
    its stream type (made from open_stream, with `alive`, `call` and its write `queue`) and what the
    stream is called in errors and its reading tasks' names."""

    stream_type: Callable[[Callable[[Any], Any]], Any]
    what: str
    task_name: str

    def __init__(self, open_stream: Callable[[Any], Any], peer: str, replicas: int = 1,
                 rebalance: float = 0.0) -> None:
        self.open_stream = open_stream
        self.peer = peer
        self._stream: Any = None
        self._spread: Spread | None = None
        if replicas > 1:
            self._spread = Spread(self._open, replicas, rebalance)
            self._ensure = self._spread.pick  # type: ignore[method-assign]

    def _open(self) -> Any:
        stream = self.stream_type(self.open_stream)
        asyncio.create_task(self._read(stream), name=f"{self.task_name}-{self.peer}")
        return stream

    def _ensure(self) -> Any:
        stream = self._stream
        if stream is None or not stream.alive:
            stream = self._stream = self._open()
        return stream

    async def _read(self, stream: Any) -> None:
        failed: APIError = ServiceUnavailable(f"service unavailable ({self.peer})")
        try:
            failed = await read_stream(stream.call, self._on_message(stream), self.peer, self.what)
        finally:
            stream.alive = False
            stream.queue.put_nowait(None)  # the writer ends too
            self._fail(stream, failed)

    @abstractmethod
    def _on_message(self, stream: Any) -> Callable[[Any], None]:
        """What handles each message read from stream."""

    @abstractmethod
    def _fail(self, stream: Any, failed: APIError) -> None:
        """End what still waits on stream, which ended with `failed`."""
