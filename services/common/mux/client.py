"""The client side of a Calls stream: MuxClient sends each call as a Frame, matches answers by id, and
reads answers in parts under the window it grants (call_stream)."""
from __future__ import annotations

import asyncio
import itertools
from collections import deque
from collections.abc import AsyncIterator, Callable
from typing import Any

from apiary_pb import envelope_pb2 as pb

from .. import auditid, tracing
from ..errors import APIError, Timeout
from ..grpcutil import batches
from .flow import WINDOW, quiet
from .streams import StreamClient

# Seconds after which a client of several replicas moves a stream (Spread), so that a replica that
# was down gets calls again within about this long of being back.
REBALANCE = 30.0


def _frames(frames: list[pb.Frame]) -> pb.Frames:
    return pb.Frames(frames=frames)


def _expire(fut: asyncio.Future[pb.Frame]) -> None:
    """A call's timeout: its answer's future fails (a timer on it, not asyncio.wait_for's waiter future
    and callbacks around it)."""
    if not fut.done():
        fut.set_exception(TimeoutError())


class _Stream:
    """One open Calls stream: its outgoing queue, the gRPC call reading its answers, and the calls
    on it (a retired stream ends its side once they are answered: Spread)."""

    __slots__ = ("queue", "call", "alive", "inflight", "retired")

    def __init__(self, open_stream: Callable[[Any], Any]) -> None:
        self.queue: asyncio.Queue[pb.Frame | None] = asyncio.Queue()
        self.call = open_stream(batches(self.queue, _frames))
        self.alive = True
        self.inflight = 0
        self.retired = False

    def retire(self) -> None:
        self.retired = True
        if not self.inflight:
            self.queue.put_nowait(None)

    def done(self) -> None:
        """A call on it was answered (or given up on)."""
        self.inflight -= 1
        if self.retired and not self.inflight:
            self.queue.put_nowait(None)


class _Parts:
    """The frames of one call_stream answer as they arrive."""

    __slots__ = ("frames", "wake", "error", "stream")

    def __init__(self, stream: _Stream) -> None:
        self.frames: deque[pb.Frame] = deque()
        self.wake = asyncio.Event()
        self.error: APIError | None = None
        self.stream = stream

    def add(self, frame: pb.Frame) -> None:
        self.frames.append(frame)
        self.wake.set()

    def fail(self, error: APIError) -> None:
        self.error = error
        self.wake.set()


class MuxClient(StreamClient):
    """Calls `method` on the peer over one shared stream opened by `open_stream(requests)` (e.g. stub.Calls)."""

    stream_type = _Stream
    what = "stream"
    task_name = "mux-read"

    def __init__(self, open_stream: Callable[[Any], Any], peer: str, responses: dict[str, Any],
                 replicas: int = 1) -> None:
        super().__init__(open_stream, peer, replicas, REBALANCE)
        self.responses = responses          # method name -> response message class
        self.replicas = replicas
        self._ids = itertools.count(1)
        self._pending: dict[int, asyncio.Future[pb.Frame] | _Parts] = {}
        self._parts_client: MuxClient | None = None  # answers in parts travel on a stream of their own

    def _on_message(self, stream: _Stream) -> Callable[[pb.Frames], None]:
        pending = self._pending

        def on_batch(batch: pb.Frames | bytes) -> None:
            if type(batch) is bytes:  # serve_mux's message read in process, without gRPC's deserializer
                batch = pb.Frames.FromString(batch)
            for frame in batch.frames:
                entry = pending.get(frame.id)
                if entry is None:
                    continue
                if type(entry) is _Parts:
                    entry.add(frame)
                    if not frame.more:
                        del pending[frame.id]
                    continue
                del pending[frame.id]
                if not entry.done():  # type: ignore[union-attr]
                    entry.set_result(frame)  # type: ignore[union-attr]
        return on_batch

    def _fail(self, stream: _Stream, failed: APIError) -> None:
        pending = self._pending
        for fid, entry in list(pending.items()):
            if getattr(entry, "stream", None) is not stream:
                continue
            pending.pop(fid, None)
            if type(entry) is _Parts:
                entry.fail(failed)
            elif not entry.done():  # type: ignore[union-attr]
                entry.set_exception(failed)  # type: ignore[union-attr]

    async def call(self, method: str, request: Any, timeout: float | None = None,
                   response: type | None = None) -> Any:
        """The answer, parsed as responses[method] or as response (a wire-compatible message)."""
        stream = self._ensure()
        fid = next(self._ids)
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[pb.Frame] = loop.create_future()
        fut.stream = stream  # type: ignore[attr-defined] - failed with its stream
        self._pending[fid] = fut
        stream.inflight += 1
        stream.queue.put_nowait(pb.Frame(id=fid, method=method, payload=request.SerializeToString(),
                                         audit_id=auditid.AUDIT_ID.get(), traceparent=tracing.traceparent()))
        timer = loop.call_later(timeout, _expire, fut) if timeout else None
        try:
            frame = await fut
        except asyncio.TimeoutError:
            raise Timeout(f"the server was unable to return a response in the time allotted ({self.peer})",
                          headers={"Retry-After": "1"}) from None
        finally:
            if timer is not None:
                timer.cancel()
            self._pending.pop(fid, None)
            stream.done()
        if frame.HasField("error"):
            raise APIError.from_pb(frame.error)
        return (response or self.responses[method]).FromString(frame.payload)

    def call_stream(self, method: str, request: Any, timeout: float | None = None,
                    window: int = WINDOW) -> AsyncIterator[tuple[bytes, bool]]:
        """The answer's parts as they arrive: (payload, more); an answer in one part is one item.
        timeout bounds the wait for each part. The server sends at most `window` parts beyond
        those taken from here; closing this iterator before the last part cancels the call on the
        server. These calls share a second stream to the peer (on the same connection), so that
        a whole answer never waits in the transport behind the parts of a large one."""
        parts = self._parts_client
        if parts is None:
            parts = self._parts_client = MuxClient(self.open_stream, self.peer, self.responses, self.replicas)
        return parts._call_stream(method, request, timeout, window)

    async def _call_stream(self, method: str, request: Any, timeout: float | None,
                           window: int) -> AsyncIterator[tuple[bytes, bool]]:
        stream = self._ensure()
        fid = next(self._ids)
        parts = _Parts(stream)
        self._pending[fid] = parts
        stream.inflight += 1
        queue = stream.queue
        queue.put_nowait(pb.Frame(id=fid, method=method, payload=request.SerializeToString(), window=window,
                                  audit_id=auditid.AUDIT_ID.get(), traceparent=tracing.traceparent(),
                                  quiet=quiet()))
        done = False
        taken = 0  # parts taken since the window was last granted
        try:
            while True:
                while parts.frames:
                    frame = parts.frames.popleft()
                    if frame.HasField("error"):
                        done = True
                        raise APIError.from_pb(frame.error)
                    done = not frame.more
                    taken += 1
                    if window and not done and taken >= window and stream.alive:  # the window again
                        queue.put_nowait(pb.Frame(id=fid, credit=taken, quiet=quiet()))
                        taken = 0
                    yield frame.payload, frame.more
                    if done:
                        return
                if parts.error is not None:
                    raise parts.error
                parts.wake.clear()
                try:
                    await asyncio.wait_for(parts.wake.wait(), timeout) if timeout else await parts.wake.wait()
                except asyncio.TimeoutError:
                    raise Timeout(f"the server was unable to return a response in the time allotted ({self.peer})",
                                  headers={"Retry-After": "1"}) from None
        finally:
            self._pending.pop(fid, None)
            if not done and parts.error is None and stream.alive:
                queue.put_nowait(pb.Frame(id=fid, cancel=True))
            stream.done()
