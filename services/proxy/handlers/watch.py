"""Watches: the registry's frames answered as chunked JSON, one event per line, each flushed at once
(or in the negotiated form: encoding.encode_event).

Every client watch is a watch on the proxy's one Registry.Watches stream (services/common/watchmux.py):
a frame that several clients watch crosses from the registry once."""
from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import AsyncIterator, Callable

import orjson

from apiary_pb import registry_pb2 as rpb
from apiary_pb import registry_pb2_grpc as rgrpc
from services.apiserver.filters import ClientDisconnected
from services.apiserver.filters.timeout import MIN_REQUEST_TIMEOUT
from services.apiserver.negotiation import OUTPUT_JSON, Output
from services.common import watchmux
from services.common.decoding import parse_int64
from services.common.errors import APIError, BadRequest

from ..context import Context
from ..encoding import encode_event

log = logging.getLogger(__name__)

# How long to wait for the registry's first frame before sending the 200: an error that arrives
# before it still becomes a normal error response, and a quiet watch is not held up for long.
FIRST_FRAME_WAIT = 0.25


def watch_timeout(query: dict[str, str], min_timeout: float = MIN_REQUEST_TIMEOUT,
                  rng: random.Random | None = None) -> float:
    """How long the watch lasts, from the request's options, which are checked here so that a bad
    one is a 400 before the stream starts (kube decodes them all before it opens the watch).

    As in kube's ListResource: no timeoutSeconds (or 0) means --min-request-timeout with jitter (a
    random time in [min, 2*min)); a negative one is a timer that has already fired, so the watch
    ends at once.
    """
    rv = query.get("resourceVersion", "")
    if rv and (not rv.isascii() or not rv.isdigit() or int(rv) >= 2**63):
        # the message of storage's parse_rv, which would refuse it once the stream had started
        raise BadRequest(f'resourceVersion: Invalid value: "{rv}": must be a valid resource version')
    raw = query.get("timeoutSeconds")
    if raw:
        value = parse_int64(raw)
        if value < 0:
            return 0.0
        if value > 0:
            return float(value)
    return min_timeout * (1.0 + (rng or random).random())


def _error_event(err: APIError) -> bytes:
    return orjson.dumps({"type": "ERROR", "object": err.status()})


class WatchHandler:
    def __init__(self, registry: rgrpc.RegistryStub, min_timeout: float = MIN_REQUEST_TIMEOUT,
                 replicas: int = 1) -> None:
        self.registry = registry
        self.min_timeout = min_timeout
        self.watches = watchmux.WatchMuxClient(registry.Watches, "registry", replicas=replicas)
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
                     started: Callable[[], None], output: Output = OUTPUT_JSON) -> None:
        """Stream the watch; `started` is called once the 200 is out (the APF seat is then released)."""
        t = time.perf_counter()
        deadline = asyncio.get_running_loop().time() + timeout
        frames = self.watches.watch_batches(req)
        first: asyncio.Future = asyncio.ensure_future(anext(frames, None))
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
                raise first.exception()  # type: ignore[misc] - an APIError: a normal error response
            ctx.timing("registry", t)
            await ctx.start_stream(200, output.watch_content_type, [(b"cache-control", b"no-cache, private")])
            started()
            pump = asyncio.ensure_future(self._pump(ctx, frames, first, output))
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
            for f in (first, pump):
                if f is not None and not f.done():
                    f.cancel()
            for f in (first, pump):
                if f is not None:
                    try:
                        await f
                    except BaseException:  # noqa: BLE001 - only reaping the cancelled reads
                        pass
            await frames.aclose()  # cancels the watch on the registry stream

    @staticmethod
    async def _pump(ctx: Context, frames: AsyncIterator[list[bytes]], first: asyncio.Future,
                    output: Output) -> None:
        """Each event a line (or a protobuf frame); the events that arrived while the previous write
        was going out go in one write (one HTTP chunk), so a client that falls behind costs less per
        event, not more."""
        plain = not output.transforms
        try:
            batch = await first
            while batch is not None:
                if plain:
                    await ctx.write(batch[0] + b"\n" if len(batch) == 1 else b"\n".join(batch) + b"\n")
                else:
                    await ctx.write(b"".join(encode_event(line, output) for line in batch))
                batch = await anext(frames, None)
        except APIError as e:
            await ctx.write(encode_event(_error_event(e), output))
