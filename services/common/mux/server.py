"""The server side of a Calls stream: serve_mux runs each frame's method concurrently and answers through
the stream's Scheduler (flow.py); a method answers in parts by returning Streamed."""
from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc

from apiary_pb import envelope_pb2 as pb

from .. import auditid, pacing, tracing
from ..errors import APIError, InternalError
from ..grpcutil import GRPC_STARTED
from ..runtime import after_large_answer
from .flow import CALLER, Caller, Outgoing, Scheduler

log = logging.getLogger(__name__)


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


Handler = Callable[[Any, grpc.aio.ServicerContext], Awaitable[Any]]


def _error_pb(e: Exception, method: str) -> pb.Status:
    if isinstance(e, APIError):
        return e.to_pb()
    log.exception("mux call %s failed", method, exc_info=e)
    return InternalError(f"{type(e).__name__}: {e}").to_pb()


async def serve_mux(requests: AsyncIterator[pb.Frames], context: grpc.aio.ServicerContext,
                    methods: dict[str, tuple[type, Handler]]) -> AsyncIterator[bytes]:
    """Server side of a Calls stream: run each frame's method concurrently, answer in completion order
    (whole answers first, answers in parts in turn: Scheduler), each stream message serialized
    already (the servicer is registered with add_servicer).

    methods maps a method name to (request class, the undecorated unary implementation). An
    implementation may return bytes: the response already serialized, sent as they are.
    """
    sched = Scheduler()
    started = {method: GRPC_STARTED.labels(method) for method in methods}  # not labels() per call
    tasks: dict[int, asyncio.Task[None]] = {}
    outgoing: dict[int, Outgoing] = {}
    callers: dict[int, Caller] = {}  # calls with a window: what their caller said last (Frame.quiet)
    requests_ended = False

    async def send_parts(frame: pb.Frame, resp: Streamed) -> None:
        out = outgoing[frame.id] = Outgoing(frame.id, 0 if requests_ended else frame.window)
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
        counter = started.get(frame.method)
        (counter or GRPC_STARTED.labels(frame.method)).inc()  # a call on the stream counts as a call
        if frame.audit_id:  # this task's own context: log lines of the call carry it
            auditid.AUDIT_ID.set(frame.audit_id)
            if log.isEnabledFor(logging.DEBUG):
                log.debug("call %s", frame.method)
        if frame.traceparent:
            tracing.attach(frame.traceparent)
        small = pacing.begin()  # until its answer is queued, or it turns out to come in parts
        if frame.window:
            caller = callers[frame.id] = Caller(frame.quiet)
            CALLER.set(caller)
        try:
            entry = methods.get(frame.method)
            if entry is None:
                raise InternalError(f"unknown method {frame.method!r}")
            req_cls, fn = entry
            resp = await fn(req_cls.FromString(frame.payload), context)
            if isinstance(resp, Streamed):
                small.large()
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
            callers.pop(frame.id, None)

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
                            if (c := callers.get(frame.id)) is not None:
                                c.quiet = frame.quiet
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


def passthrough(message: Any) -> bytes:
    """A response serializer for messages that may come serialized already (serve_mux's)."""
    return message if type(message) is bytes else message.SerializeToString()


class _Recorder:
    """Stands in for a gRPC server while a generated add_<Service>Servicer_to_server registers its methods."""

    def __init__(self) -> None:
        self.handlers: dict[str, dict[str, Any]] = {}

    def add_generic_rpc_handlers(self, handlers: Any) -> None:
        pass  # made again from the registered methods

    def add_registered_method_handlers(self, service: str, handlers: dict[str, Any]) -> None:
        self.handlers[service] = handlers


def add_servicer(add: Callable[[Any, Any], None], servicer: Any, server: Any) -> None:
    """add(servicer, server), a generated add_<Service>Servicer_to_server, with the Calls stream's
    messages sent as serve_mux serialized them."""
    recorder = _Recorder()
    add(servicer, recorder)
    for service, handlers in recorder.handlers.items():
        calls = handlers.get("Calls")
        if calls is not None:
            handlers = {**handlers, "Calls": calls._replace(response_serializer=passthrough)}
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(service, handlers),))
        if hasattr(server, "add_registered_method_handlers"):
            server.add_registered_method_handlers(service, handlers)
