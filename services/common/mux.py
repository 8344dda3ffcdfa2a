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

Sharing the stream: the server sends whole (unary) answers first, then the parts of answers in
parts round-robin between calls, at most about PART_BYTES per message, so a small call made during
a large LIST waits for one part, not for the LIST, and concurrent LISTs progress together. Flow
control per call: call_stream grants the server WINDOW parts (Frame.window), and grants them again
(one Frame.credit) once its consumer has taken them all, and a server takes the next part from the
method's iterator only when it may send it; so a slow consumer (an HTTP client reading slowly)
slows every hop behind it instead of each hop buffering the whole answer, and a caller that gives
up sends Frame.cancel, which cancels the method.
"""
from __future__ import annotations

import asyncio
import itertools
import logging
import random
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc

from apiary_pb import envelope_pb2 as pb

from . import auditid, pacing
from .errors import STATUS_DETAILS_KEY, APIError, InternalError, ServiceUnavailable, Timeout, error_from_rpc
from .grpcutil import GRPC_STARTED, batches
from .runtime import after_large_answer

log = logging.getLogger(__name__)

# What one stream message carries at most when answers come in parts (Streamed): small enough that
# sender, receiver and the process after them work on different parts at the same time, and that
# a process busy with a part keeps other calls waiting little (a GET during a large LIST waited
# about 1.5x longer with 256 KiB parts; 64 KiB made the LIST slower for nothing).
PART_BYTES = 128 << 10
# Parts of one answer that may be on their way to a call_stream caller: no hop holds more than
# about 0.25 MiB of one answer. The caller grants the window again once it has taken all of it, one
# credit message per WINDOW parts: each flow-control message costs a gRPC message on both sides
# (about a third of a LIST's CPU per hop when every part was credited on its own), and a hop's
# producer then waits while its consumer works through the window, so that a LIST gives way to the
# small calls in flight (pacing.py) within a window. A GET beside a 208 MB LIST: 1.7x its idle
# latency, against 2.0-2.3x with a credit per part and 3x without flow control (tools/bench_fairness).
WINDOW = 2
# Seconds after which a client of several replicas moves a stream (Spread), so that a replica that
# was down gets calls again within about this long of being back.
REBALANCE = 30.0
# Parts of one answer a server queues for its writer beyond the one being written (without flow
# control from the caller this alone bounds what the server holds).
QUEUED_PARTS = 2


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

    async def aclose(self) -> None:
        """Close the parts' iterator (an answer given up on: what it reads from is let go at once)."""
        close = getattr(self.parts, "aclose", None)
        if close is not None:
            await close()
        else:
            getattr(self.parts, "close", lambda: None)()


Answer = tuple[int, bytes, "pb.Status | None", bool]


class _Outgoing:
    """The parts of one answer in parts that wait to be written, and what its producer waits for:
    room in this queue and, when the caller asked for flow control, credit."""

    __slots__ = ("fid", "queue", "credit", "wake")

    def __init__(self, fid: int, window: int) -> None:
        self.fid = fid
        self.queue: deque[Answer] = deque()
        self.credit: int | None = window or None  # None: the caller did not ask for flow control
        self.wake = asyncio.Event()

    def may_send(self) -> bool:
        return len(self.queue) < QUEUED_PARTS and (self.credit is None or self.credit > 0)

    def grant(self, n: int) -> None:
        if self.credit is not None:
            self.credit += n
            self.wake.set()

    async def room(self) -> None:
        """Until one more part may be queued (then it is counted against the credit)."""
        while not self.may_send():
            self.wake.clear()
            await self.wake.wait()
        if self.credit is not None:
            self.credit -= 1


class _Scheduler:
    """The server's outgoing answers: whole answers first, then one part of each answer in parts in
    turn; each message stops growing past PART_BYTES (and holds at least one part when one waits)."""

    def __init__(self) -> None:
        self.whole: deque[Answer] = deque()
        self.turns: dict[int, _Outgoing] = {}  # answers with parts waiting, in their turn's order
        self.wake = asyncio.Event()
        self.closed = False

    def answer(self, item: Answer) -> None:
        self.whole.append(item)
        self.wake.set()

    def part(self, out: _Outgoing, item: Answer) -> None:
        out.queue.append(item)
        if out.fid not in self.turns:
            self.turns[out.fid] = out
        self.wake.set()

    def drop(self, out: _Outgoing) -> None:
        """Forget the parts of an answer nobody wants any more."""
        out.queue.clear()
        self.turns.pop(out.fid, None)

    def close(self) -> None:
        self.closed = True
        self.wake.set()

    async def batches(self) -> AsyncIterator[pb.Frames]:
        """Each frame is built in the batch message itself (a large answer is copied once, not
        into a Frame and again into the Frames)."""
        whole, turns = self.whole, self.turns
        while True:
            while not whole and not turns:
                if self.closed:
                    return
                self.wake.clear()
                await self.wake.wait()
            batch = pb.Frames()
            add = batch.frames.add
            size = 0
            while whole and size < PART_BYTES:
                fid, payload, error, more = whole.popleft()
                if error is None:
                    add(id=fid, payload=payload, more=more)
                else:
                    add(id=fid, error=error)
                size += len(payload)
            first = True
            while turns and (first or size < PART_BYTES):
                first = False
                fid = next(iter(turns))
                out = turns.pop(fid)
                fid, payload, error, more = out.queue.popleft()
                if error is None:
                    add(id=fid, payload=payload, more=more)
                else:
                    add(id=fid, error=error)
                size += len(payload)
                if out.queue:
                    turns[fid] = out  # its next part waits for its next turn
                out.wake.set()
            yield batch


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


class Spread:
    """Long-lived streams to a peer that runs as several replicas (grpcutil.Target): one per
    replica, opened on a round_robin channel (so each lands on the next connected replica), taken
    in turn by each call; one whose replica died is opened again on its next turn, on a live
    replica. With `rebalance` (seconds), a stream that old is retired at its next turn (it takes
    no new call and closes once those on it are answered) and a new one opened in its place, so
    that a replica started again gets its share back (kube's --goaway-chance does this for
    HTTP/2 clients). A client with one replica never uses it (its one stream costs nothing more)."""

    def __init__(self, open_: Callable[[], Any], streams: int, rebalance: float = 0.0) -> None:
        self.open, self.pool = open_, [None] * streams
        self.turn = itertools.count()
        self.rebalance = rebalance
        self.due = [0.0] * streams  # when each stream is retired (rebalance only)

    def pick(self) -> Any:
        pool = self.pool
        i = next(self.turn) % len(pool)
        stream = pool[i]
        if stream is not None and stream.alive:
            if not self.rebalance or time.monotonic() < self.due[i]:
                return stream
            stream.retire()
        stream = pool[i] = self.open()
        if self.rebalance:  # jittered, so that the streams of many clients do not move at once
            self.due[i] = time.monotonic() + self.rebalance * random.uniform(0.8, 1.2)
        return stream


def _frames(frames: list[pb.Frame]) -> pb.Frames:
    return pb.Frames(frames=frames)


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


class MuxClient:
    """Calls `method` on the peer over one shared stream opened by `open_stream(requests)` (e.g. stub.Calls)."""

    def __init__(self, open_stream: Callable[[Any], Any], peer: str, responses: dict[str, Any],
                 replicas: int = 1) -> None:
        self.open_stream = open_stream
        self.peer = peer
        self.responses = responses          # method name -> response message class
        self.replicas = replicas
        self._ids = itertools.count(1)
        self._pending: dict[int, asyncio.Future[pb.Frame] | _Parts] = {}
        self._stream: _Stream | None = None
        self._parts_client: MuxClient | None = None  # answers in parts travel on a stream of their own
        if replicas > 1:
            self._ensure = Spread(self._open, replicas, REBALANCE).pick  # type: ignore[method-assign]

    def _open(self) -> _Stream:
        stream = _Stream(self.open_stream)
        asyncio.create_task(self._read(stream), name=f"mux-read-{self.peer}")
        return stream

    def _ensure(self) -> _Stream:
        stream = self._stream
        if stream is None or not stream.alive:
            stream = self._stream = self._open()
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
        stream.inflight += 1
        stream.queue.put_nowait(pb.Frame(id=fid, method=method, payload=request.SerializeToString(),
                                         audit_id=auditid.AUDIT_ID.get()))
        try:
            frame = await asyncio.wait_for(fut, timeout) if timeout else await fut
        except asyncio.TimeoutError:
            raise Timeout(f"the server was unable to return a response in the time allotted ({self.peer})",
                          headers={"Retry-After": "1"}) from None
        finally:
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
                                  audit_id=auditid.AUDIT_ID.get()))
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
                        queue.put_nowait(pb.Frame(id=fid, credit=taken))
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


Handler = Callable[[Any, grpc.aio.ServicerContext], Awaitable[Any]]


def _error_pb(e: Exception, method: str) -> pb.Status:
    if isinstance(e, APIError):
        return e.to_pb()
    log.exception("mux call %s failed", method, exc_info=e)
    return InternalError(f"{type(e).__name__}: {e}").to_pb()


async def serve_mux(requests: AsyncIterator[pb.Frames], context: grpc.aio.ServicerContext,
                    methods: dict[str, tuple[type, Handler]]) -> AsyncIterator[pb.Frames]:
    """Server side of a Calls stream: run each frame's method concurrently, answer in completion order
    (whole answers first, answers in parts in turn: _Scheduler).

    methods maps a method name to (request class, the undecorated unary implementation). An
    implementation may return bytes: the response already serialized, sent as they are.
    """
    sched = _Scheduler()
    tasks: dict[int, asyncio.Task[None]] = {}
    outgoing: dict[int, _Outgoing] = {}
    requests_ended = False

    async def send_parts(frame: pb.Frame, resp: Streamed) -> None:
        out = outgoing[frame.id] = _Outgoing(frame.id, 0 if requests_ended else frame.window)
        parts = aiter(resp)
        sent = 0
        try:
            prev: bytes | None = None
            try:
                async for part in parts:
                    if prev is not None:
                        await out.room()
                        sched.part(out, (frame.id, prev, None, True))
                        sent += len(prev)
                        await pacing.next_part()  # small calls in flight go first (bounded)
                        await asyncio.sleep(0)  # the next part waits for what else is ready
                    prev = part
            except Exception as e:  # noqa: BLE001 - the error goes after the parts made before it
                if prev is not None:
                    await out.room()
                    sched.part(out, (frame.id, prev, None, True))
                sched.part(out, (frame.id, b"", _error_pb(e, frame.method), False))
                return
            await out.room()
            sched.part(out, (frame.id, prev or b"", None, False))
        except asyncio.CancelledError:
            sched.drop(out)
            raise
        finally:
            del outgoing[frame.id]
            await parts.aclose()  # type: ignore[attr-defined]
            await resp.aclose()
            after_large_answer(sent)

    async def run(frame: pb.Frame) -> None:
        GRPC_STARTED.labels(frame.method).inc()  # a call on the stream counts as a call
        if frame.audit_id:  # this task's own context: log lines of the call carry it
            auditid.AUDIT_ID.set(frame.audit_id)
            if log.isEnabledFor(logging.DEBUG):
                log.debug("call %s", frame.method)
        small = pacing.begin()  # until its answer is queued, or it turns out to come in parts
        try:
            entry = methods.get(frame.method)
            if entry is None:
                raise InternalError(f"unknown method {frame.method!r}")
            req_cls, fn = entry
            resp = await fn(req_cls.FromString(frame.payload), context)
            if isinstance(resp, Streamed):
                small.end()
                await send_parts(frame, resp)
                return
            payload = resp if type(resp) is bytes else resp.SerializeToString()
            sched.answer((frame.id, payload, None, False))
        except asyncio.CancelledError:
            raise
        except Exception as e:  # noqa: BLE001 - a failing call is a 500 for that call only
            sched.answer((frame.id, b"", _error_pb(e, frame.method), False))
        finally:
            small.end()
            tasks.pop(frame.id, None)

    async def pump() -> None:
        nonlocal requests_ended
        try:
            async for batch in requests:
                for frame in batch.frames:
                    if not frame.method:  # flow control of an answer in parts
                        if frame.cancel:
                            if (t := tasks.get(frame.id)) is not None:
                                t.cancel()
                        elif (o := outgoing.get(frame.id)) is not None:
                            o.grant(frame.credit)
                        continue
                    tasks[frame.id] = asyncio.create_task(run(frame))
        finally:
            requests_ended = True
            for o in outgoing.values():  # no credit can come any more: finish without flow control
                o.credit = None
                o.wake.set()
            if tasks:
                await asyncio.gather(*tasks.values(), return_exceptions=True)
            sched.close()

    reader = asyncio.create_task(pump())
    try:
        async for batch in sched.batches():
            yield batch
    finally:
        reader.cancel()
        for t in list(tasks.values()):
            t.cancel()


def unary_methods(servicer: Any, names: dict[str, type]) -> dict[str, tuple[type, Handler]]:
    """{name: (request class, the servicer's method without its gRPC error wrapper)} for serve_mux."""
    out: dict[str, tuple[type, Handler]] = {}
    for name, req_cls in names.items():
        fn = getattr(type(servicer), name)
        fn = getattr(fn, "__wrapped__", fn)
        out[name] = (req_cls, fn.__get__(servicer))
    return out
