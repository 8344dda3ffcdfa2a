"""Unary calls multiplexed on one long-lived bidirectional gRPC stream.

A unary gRPC call in Python costs close to a millisecond of CPU between client
and server; the same messages on one open stream cost about 1.75x less
(shared/REFERENCE.md), and a stream write costs about as much as the message it
carries, so each side sends every frame waiting at that moment in one Frames
message. MuxClient sends each call as a Frame on one stream per peer and matches
answers by id; serve_mux runs each incoming Frame through the servicer's own
unary method, so both paths share one implementation.
"""
from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc

from apiary_pb import envelope_pb2 as pb

from .errors import APIError, InternalError, ServiceUnavailable, Timeout, error_from_rpc
from .grpcutil import GRPC_STARTED

log = logging.getLogger(__name__)


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


async def _answer_batches(
        queue: asyncio.Queue[tuple[int, bytes, pb.Status | None] | None]) -> AsyncIterator[pb.Frames]:
    """_batches for answers: each frame is built in the batch message itself (a large answer is
    copied once, not into a Frame and again into the Frames)."""
    while (first := await queue.get()) is not None:
        batch = pb.Frames()
        add = batch.frames.add
        item: tuple[int, bytes, pb.Status | None] | None = first
        while item is not None:
            fid, payload, error = item
            if error is None:
                add(id=fid, payload=payload)
            else:
                add(id=fid, error=error)
            if queue.empty():
                break
            item = queue.get_nowait()
        yield batch
        if item is None:
            return


class _Stream:
    """One open Calls stream: its outgoing queue and the gRPC call reading its answers."""

    def __init__(self, open_stream: Callable[[Any], Any]) -> None:
        self.queue: asyncio.Queue[pb.Frame | None] = asyncio.Queue()
        self.call = open_stream(_batches(self.queue))
        self.alive = True


class MuxClient:
    """Calls `method` on the peer over one shared stream opened by `open_stream(requests)` (e.g. stub.Calls)."""

    def __init__(self, open_stream: Callable[[Any], Any], peer: str, responses: dict[str, Any]) -> None:
        self.open_stream = open_stream
        self.peer = peer
        self.responses = responses          # method name -> response message class
        self._ids = itertools.count(1)
        self._pending: dict[int, asyncio.Future[pb.Frame]] = {}
        self._stream: _Stream | None = None

    def _ensure(self) -> _Stream:
        stream = self._stream
        if stream is None or not stream.alive:
            stream = self._stream = _Stream(self.open_stream)
            asyncio.create_task(self._read(stream), name=f"mux-read-{self.peer}")
        return stream

    async def _read(self, stream: _Stream) -> None:
        err: APIError | None = None
        try:
            async for batch in stream.call:
                for frame in batch.frames:
                    fut = self._pending.pop(frame.id, None)
                    if fut is not None and not fut.done():
                        fut.set_result(frame)
            err = ServiceUnavailable(f"service unavailable ({self.peer}): stream closed",
                                     headers={"Retry-After": "1"})
        except grpc.aio.AioRpcError as e:
            err = error_from_rpc(e, self.peer)
        except asyncio.CancelledError:
            err = ServiceUnavailable(f"service unavailable ({self.peer}): stream cancelled")
        finally:
            stream.alive = False
            stream.queue.put_nowait(None)
            failed = err or ServiceUnavailable(f"service unavailable ({self.peer})")
            for fid, fut in list(self._pending.items()):
                if getattr(fut, "stream", None) is stream and not fut.done():
                    fut.set_exception(failed)
                    self._pending.pop(fid, None)

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


Handler = Callable[[Any, grpc.aio.ServicerContext], Awaitable[Any]]


async def serve_mux(requests: AsyncIterator[pb.Frames], context: grpc.aio.ServicerContext,
                    methods: dict[str, tuple[type, Handler]]) -> AsyncIterator[pb.Frames]:
    """Server side of a Calls stream: run each frame's method concurrently, answer in completion order.

    methods maps a method name to (request class, the undecorated unary implementation). An
    implementation may return bytes: the response already serialized, sent as they are.
    """
    # (id, payload, error): the answer is copied once, into the batch message (_answer_batches)
    out: asyncio.Queue[tuple[int, bytes, pb.Status | None] | None] = asyncio.Queue()
    tasks: set[asyncio.Task[None]] = set()

    async def run(frame: pb.Frame) -> None:
        GRPC_STARTED.labels(frame.method).inc()  # a call on the stream counts as a call
        try:
            entry = methods.get(frame.method)
            if entry is None:
                raise InternalError(f"unknown method {frame.method!r}")
            req_cls, fn = entry
            resp = await fn(req_cls.FromString(frame.payload), context)
            payload = resp if type(resp) is bytes else resp.SerializeToString()
            out.put_nowait((frame.id, payload, None))
        except APIError as e:
            out.put_nowait((frame.id, b"", e.to_pb()))
        except asyncio.CancelledError:
            raise
        except Exception as e:  # noqa: BLE001 - a failing call is a 500 for that call only
            log.exception("mux call %s failed", frame.method)
            out.put_nowait((frame.id, b"", InternalError(f"{type(e).__name__}: {e}").to_pb()))

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
