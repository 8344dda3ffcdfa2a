"""Watches: a Registry.Watch stream answered as chunked JSON, one event per line, each flushed at once."""
from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Callable

import grpc
import orjson

from apiary_pb import registry_pb2 as rpb
from apiary_pb import registry_pb2_grpc as rgrpc
from services.common.errors import BadRequest, error_from_rpc

from ..context import ClientDisconnected, Context
from ..negotiation import JSON

log = logging.getLogger(__name__)

# kube-apiserver's --min-request-timeout; a watch without timeoutSeconds lasts 1-2x this long.
MIN_REQUEST_TIMEOUT = 1800.0
# How long to wait for the registry's first frame before sending the 200: an error that arrives
# before it still becomes a normal error response, and a quiet watch is not held up for long.
FIRST_FRAME_WAIT = 0.25


def watch_timeout(query: dict[str, str], rng: random.Random | None = None) -> float:
    raw = query.get("timeoutSeconds")
    if raw:
        try:
            value = int(raw)
        except ValueError:
            raise BadRequest(f'invalid value for timeoutSeconds: "{raw}"') from None
        if value > 0:
            return float(value)
    return (rng or random).uniform(MIN_REQUEST_TIMEOUT, 2 * MIN_REQUEST_TIMEOUT)


def _error_event(err: Exception) -> bytes:
    api = error_from_rpc(err, "registry") if isinstance(err, grpc.aio.AioRpcError) else None
    status = api.status() if api else {"kind": "Status", "apiVersion": "v1", "metadata": {},
                                       "status": "Failure", "message": str(err), "reason": "InternalError",
                                       "code": 500}
    return orjson.dumps({"type": "ERROR", "object": status}) + b"\n"


class WatchHandler:
    def __init__(self, registry: rgrpc.RegistryStub) -> None:
        self.registry = registry
        # Set when the server shuts down: every watch then ends cleanly, as kube's do.
        self.closing = asyncio.Event()
        self._closing_waiter: asyncio.Future | None = None

    def close_all(self) -> None:
        self.closing.set()

    def _closing(self) -> asyncio.Future:
        if self._closing_waiter is None:
            self._closing_waiter = asyncio.ensure_future(self.closing.wait())
        return self._closing_waiter

    async def handle(self, ctx: Context, req: rpb.APIRequest, timeout: float,
                     started: Callable[[], None]) -> None:
        """Stream the watch; `started` is called once the 200 is out (the APF seat is then released)."""
        t = time.perf_counter()
        deadline = asyncio.get_running_loop().time() + timeout
        call = self.registry.Watch(req)
        first: asyncio.Future = asyncio.ensure_future(call.read())
        pump: asyncio.Task[None] | None = None
        try:
            waiters: set[asyncio.Future] = {first}
            if ctx.disconnected is not None:
                waiters.add(ctx.disconnected)
            await asyncio.wait(waiters, timeout=min(FIRST_FRAME_WAIT, timeout),
                               return_when=asyncio.FIRST_COMPLETED)
            if ctx.disconnected is not None and ctx.disconnected.done():
                raise ClientDisconnected()
            if first.done() and first.exception() is not None:
                exc = first.exception()
                if isinstance(exc, grpc.aio.AioRpcError):
                    raise error_from_rpc(exc, "registry")
                raise exc  # type: ignore[misc]
            ctx.timing("registry", t)
            await ctx.start_stream(200, JSON, [(b"cache-control", b"no-cache, private")])
            started()
            pump = asyncio.ensure_future(self._pump(ctx, call, first))
            waiters = {pump, self._closing()}
            if ctx.disconnected is not None:
                waiters.add(ctx.disconnected)
            remaining = deadline - asyncio.get_running_loop().time()
            await asyncio.wait(waiters, timeout=max(remaining, 0), return_when=asyncio.FIRST_COMPLETED)
            if ctx.disconnected is not None and ctx.disconnected.done():
                return
            if pump.done() and pump.exception() is not None:
                log.warning("watch %s failed: %r", req.resource, pump.exception())
            await ctx.end_stream()
        finally:
            call.cancel()
            for f in (first, pump):
                if f is not None and not f.done():
                    f.cancel()
            for f in (first, pump):
                if f is not None:
                    try:
                        await f
                    except BaseException:  # noqa: BLE001 - only reaping the cancelled reads
                        pass

    @staticmethod
    async def _pump(ctx: Context, call: grpc.aio.UnaryStreamCall, first: asyncio.Future) -> None:
        try:
            frame = await first
            while frame is not grpc.aio.EOF:
                await ctx.write(frame.data + b"\n")
                frame = await call.read()
        except grpc.aio.AioRpcError as e:
            if e.code() != grpc.StatusCode.CANCELLED:
                await ctx.write(_error_event(e))
