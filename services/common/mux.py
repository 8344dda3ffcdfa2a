"""Unary calls multiplexed on one long-lived bidirectional gRPC stream.

A unary gRPC call in Python costs close to a millisecond of CPU between client
and server; the same messages on one open stream cost about 1.75x less
(shared/REFERENCE.md), and a stream write costs about as much as the message it
carries, so each side sends every frame waiting at that moment in one Frames
message. MuxClient sends each call as a Frame on one stream per peer and matches
answers by id; serve_mux runs each incoming Frame through the servicer's own
unary method, so both paths share one implementation.

An answer may come in parts (a LIST of thousands of objects): the method returns `Streamed(parts)`
and each part goes as its own frame (`more` set on all but the last), at most about PART_BYTES per
stream message, so that the next process starts on the first part while the rest is still on its
way; `MuxClient.call_stream` reads them as they come.
"""
from __future__ import annotations

import asyncio
import itertools
import logging
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc

from apiary_pb import envelope_pb2 as pb

from .errors import APIError, InternalError, ServiceUnavailable, Timeout, error_from_rpc
from .grpcutil import GRPC_STARTED

log = logging.getLogger(__name__)

# What one stream message carries at most when answers come in parts (Streamed): small enough that
# sender, receiver and the process after them work on different parts at the same time.
PART_BYTES = 256 << 10


class Streamed:
    """A method's answer in parts (each a serialized message of the method's response type, or a
    part of one by the method's own convention), from a list or an async iterator."""

    def __init__(self, parts: Any) -> None:
        self.parts = parts

    async def __aiter__(self) -> AsyncIterator[bytes]:
        if hasattr(self.parts, "__aiter__"):
            async for part in self.parts:
                yield part
        else:
            for part in self.parts:
                yield part


async def _batches(queue: asyncio.Queue[pb.Frame | None]) -> AsyncIterator[pb.Frames]:
    """Everything queued since the last write, as one message; None ends the stream."""
    while (first := await queue.get()) is not None:
        frames = [first]
        ended = False
        while not queue.empty():
            more = queue.get_nowait()
            if more is None:
                ended = True
                break
            frames.append(more)
        yield pb.Frames(frames=frames)
        if ended:
            return


Answer = tuple[int, bytes, "pb.Status | None", bool]


async def _answer_batches(queue: asyncio.Queue[Answer | None]) -> AsyncIterator[pb.Frames]:
    """_batches for answers: each frame is built in the batch message itself (a large answer is
    copied once, not into a Frame and again into the Frames); a message stops growing past
    PART_BYTES, so that the parts of a Streamed answer travel one after the other."""
    while (first := await queue.get()) is not None:
        batch = pb.Frames()
        add = batch.frames.add
        size = 0
        item: Answer | None = first
        while item is not None:
            fid, payload, error, more = item
            if error is None:
                add(id=fid, payload=payload, more=more)
            else:
                add(id=fid, error=error)
            size += len(payload)
            if size >= PART_BYTES or queue.empty():
                break
            item = queue.get_nowait()
        yield batch
        if item is None:
            return


async def read_stream(call: Any, on_message: Callable[[Any], None], peer: str, what: str) -> APIError:
    """Hand each message of a long-lived stream to on_message until the stream ends; the error
    every call or watch still waiting on it ends with (a closed stream is a 503, a broken one the
    peer's error as gRPC reports it)."""
    try:
        async for message in call:
            on_message(message)
        return ServiceUnavailable(f"service unavailable ({peer}): {what} closed", headers={"Retry-After": "1"})
    except grpc.aio.AioRpcError as e:
        return error_from_rpc(e, peer)
    except asyncio.CancelledError:
        return ServiceUnavailable(f"service unavailable ({peer}): {what} cancelled")
    except Exception as e:  # noqa: BLE001 - everything waiting on the stream ends with it
        log.exception("%s to %s failed", what, peer)
        return InternalError(f"{what} to {peer} failed: {type(e).__name__}")


class _Stream:
    """One open Calls stream: its outgoing queue and the gRPC call reading its answers."""

    def __init__(self, open_stream: Callable[[Any], Any]) -> None:
        self.queue: asyncio.Queue[pb.Frame | None] = asyncio.Queue()
        self.call = open_stream(_batches(self.queue))
        self.alive = True


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


class MuxClient:
    """Calls `method` on the peer over one shared stream opened by `open_stream(requests)` (e.g. stub.Calls)."""

    def __init__(self, open_stream: Callable[[Any], Any], peer: str, responses: dict[str, Any]) -> None:
        self.open_stream = open_stream
        self.peer = peer
        self.responses = responses          # method name -> response message class
        self._ids = itertools.count(1)
        self._pending: dict[int, asyncio.Future[pb.Frame] | _Parts] = {}
        self._stream: _Stream | None = None

    def _ensure(self) -> _Stream:
        stream = self._stream
        if stream is None or not stream.alive:
            stream = self._stream = _Stream(self.open_stream)
            asyncio.create_task(self._read(stream), name=f"mux-read-{self.peer}")
        return stream

    async def _read(self, stream: _Stream) -> None:
        pending = self._pending

        def on_batch(batch: pb.Frames) -> None:
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

        failed = ServiceUnavailable(f"service unavailable ({self.peer})")
        try:
            failed = await read_stream(stream.call, on_batch, self.peer, "stream")
        finally:
            stream.alive = False
            stream.queue.put_nowait(None)
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
        fut: asyncio.Future[pb.Frame] = asyncio.get_running_loop().create_future()
        fut.stream = stream  # type: ignore[attr-defined] - failed with its stream
        self._pending[fid] = fut
        stream.queue.put_nowait(pb.Frame(id=fid, method=method, payload=request.SerializeToString()))
        try:
            frame = await asyncio.wait_for(fut, timeout) if timeout else await fut
        except asyncio.TimeoutError:
            raise Timeout(f"the server was unable to return a response in the time allotted ({self.peer})",
                          headers={"Retry-After": "1"}) from None
        finally:
            self._pending.pop(fid, None)
        if frame.HasField("error"):
            raise APIError.from_pb(frame.error)
        return (response or self.responses[method]).FromString(frame.payload)

    async def call_stream(self, method: str, request: Any, timeout: float | None = None
                          ) -> AsyncIterator[tuple[bytes, bool]]:
        """The answer's parts as they arrive: (payload, more); an answer in one part is one item.
        timeout bounds the wait for each part."""
        stream = self._ensure()
        fid = next(self._ids)
        parts = _Parts(stream)
        self._pending[fid] = parts
        stream.queue.put_nowait(pb.Frame(id=fid, method=method, payload=request.SerializeToString()))
        try:
            while True:
                while parts.frames:
                    frame = parts.frames.popleft()
                    if frame.HasField("error"):
                        raise APIError.from_pb(frame.error)
                    yield frame.payload, frame.more
                    if not frame.more:
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


Handler = Callable[[Any, grpc.aio.ServicerContext], Awaitable[Any]]


async def serve_mux(requests: AsyncIterator[pb.Frames], context: grpc.aio.ServicerContext,
                    methods: dict[str, tuple[type, Handler]]) -> AsyncIterator[pb.Frames]:
    """Server side of a Calls stream: run each frame's method concurrently, answer in completion order.

    methods maps a method name to (request class, the undecorated unary implementation). An
    implementation may return bytes: the response already serialized, sent as they are.
    """
    # (id, payload, error, more): the answer is copied once, into the batch message (_answer_batches)
    out: asyncio.Queue[Answer | None] = asyncio.Queue()
    tasks: set[asyncio.Task[None]] = set()

    async def run(frame: pb.Frame) -> None:
        GRPC_STARTED.labels(frame.method).inc()  # a call on the stream counts as a call
        try:
            entry = methods.get(frame.method)
            if entry is None:
                raise InternalError(f"unknown method {frame.method!r}")
            req_cls, fn = entry
            resp = await fn(req_cls.FromString(frame.payload), context)
            if isinstance(resp, Streamed):
                prev: bytes | None = None
                try:
                    async for part in resp:
                        if prev is not None:
                            out.put_nowait((frame.id, prev, None, True))
                        prev = part
                except Exception:
                    if prev is not None:  # what was made before the failure, then the error
                        out.put_nowait((frame.id, prev, None, True))
                    raise
                out.put_nowait((frame.id, prev or b"", None, False))
                return
            payload = resp if type(resp) is bytes else resp.SerializeToString()
            out.put_nowait((frame.id, payload, None, False))
        except APIError as e:
            out.put_nowait((frame.id, b"", e.to_pb(), False))
        except asyncio.CancelledError:
            raise
        except Exception as e:  # noqa: BLE001 - a failing call is a 500 for that call only
            log.exception("mux call %s failed", frame.method)
            out.put_nowait((frame.id, b"", InternalError(f"{type(e).__name__}: {e}").to_pb(), False))

    async def pump() -> None:
        try:
            async for batch in requests:
                for frame in batch.frames:
                    t = asyncio.create_task(run(frame))
                    tasks.add(t)
                    t.add_done_callback(tasks.discard)
        finally:
            if tasks:
                await asyncio.gather(*tasks, return_exceptions=True)
            out.put_nowait(None)

    reader = asyncio.create_task(pump())
    try:
        async for batch in _answer_batches(out):
            yield batch
    finally:
        reader.cancel()
        for t in list(tasks):
            t.cancel()


def unary_methods(servicer: Any, names: dict[str, type]) -> dict[str, tuple[type, Handler]]:
    """{name: (request class, the servicer's method without its gRPC error wrapper)} for serve_mux."""
    out: dict[str, tuple[type, Handler]] = {}
    for name, req_cls in names.items():
        fn = getattr(type(servicer), name)
        fn = getattr(fn, "__wrapped__", fn)
        out[name] = (req_cls, fn.__get__(servicer))
    return out
