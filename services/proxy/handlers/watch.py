"""Watches: the registry's frames answered as chunked JSON, one event per line (or in the
negotiated form: encoding.encode_event).

Every client watch is a watch on the proxy's one Registry.Watches stream (services/common/watchmux.py),
relayed: the stream's reader hands each event to every watch it goes to, with no task switch per
watch. An event is encoded once for every watch of one form (kube's cachingObject); the events that
reach a connection within COALESCE go out in one write, straight to its transport (one TLS record
and one send for them all); and a connection that does not drain is cut off once BUFFER_BYTES wait
on it (kube ends a watcher whose buffer is full), so that it never holds back the others: its client
watches again from its last resourceVersion."""
from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Callable

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
# Events that reach a connection within this go out in one write (at most this much later): at 100
# events a second, 10 ms against 5 ms: proxy CPU per delivery 8.6–9.3 µs against 11.5–12.2 (docs/benchmarks.md).
COALESCE = 0.010
# Bytes waiting on a connection past which its watch is cut off (on top of its initial events).
BUFFER_BYTES = 4 << 20
# How long a cut-off client has to take the end of its answer before its connection is closed.
CUT_OFF_GRACE = 10.0


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


class EncodedEvents:
    """Each event in one output form, encoded once for every watch of that form (kube's
    cachingObject): the registry stream hands every watch of an event the same bytes object, one
    event to all its watches before the next, so the last few are remembered by identity (an entry
    holds the bytes, so their id is not reused while it is remembered)."""

    def __init__(self, output: Output, size: int = 16) -> None:
        self.output = output
        self.size = size
        self._lines: dict[int, tuple[bytes, bytes]] = {}

    def get(self, event: bytes) -> bytes:
        e = self._lines.get(id(event))
        if e is not None and e[0] is event:
            return e[1]
        line = encode_event(event, self.output)
        lines = self._lines
        if len(lines) >= self.size:
            del lines[next(iter(lines))]
        lines[id(event)] = (event, line)
        return line


class Coalescer:
    """Writes each connection that has events waiting `delay` after the first of them arrived: the
    events of those few milliseconds go out in one write (one TLS record, one send), with one timer
    for every watch of the process."""

    def __init__(self, delay: float = COALESCE) -> None:
        self.delay = delay
        self._due: list[ClientWatch] = []
        self._timer: asyncio.TimerHandle | None = None

    def add(self, w: ClientWatch) -> None:
        self._due.append(w)
        if self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(self.delay, self._flush)

    def _flush(self) -> None:
        self._timer = None
        due, self._due = self._due, []
        for w in due:
            w.flush()


class ClientWatch:
    """One client's watch as the registry stream's reader hands it events (WatchMuxClient.relay): the
    encoded lines wait here until the 200 is out and then until the coalescer writes them."""

    __slots__ = ("ctx", "output", "encoded", "coalescer", "lines", "waiting", "allowance", "streaming",
                 "transport", "writing", "first", "done", "error", "cut_off", "closed")

    def __init__(self, ctx: Context, output: Output, encoded: EncodedEvents, coalescer: Coalescer) -> None:
        self.ctx, self.output, self.encoded, self.coalescer = ctx, output, encoded, coalescer
        self.lines: list[bytes] = []
        self.waiting = 0  # bytes in lines
        self.allowance = 0  # bytes of initial events: room on top of BUFFER_BYTES
        self.streaming = False  # the 200 is out: lines go to the connection
        self.transport: asyncio.WriteTransport | None = None  # written straight to, when the server allows
        self.writing: asyncio.Future[None] | None = None  # an ASGI write in flight (no transport)
        loop = asyncio.get_running_loop()
        self.first: asyncio.Future[None] = loop.create_future()  # an event or the end has come
        self.done: asyncio.Future[None] = loop.create_future()   # ended: by the registry or cut off
        self.error: APIError | None = None  # ended with this before anything came: an error response
        self.cut_off = False
        self.closed = False

    def on_event(self, event: bytes, initial: bool) -> bool:
        if self.done.done():
            return False
        try:
            line = self.encoded.get(event)
        except APIError as e:  # an event this form cannot carry: the watch ends with it
            self.on_end(e)
            return False
        except Exception:  # noqa: BLE001 - only this watch ends; the stream's reader goes on
            log.warning("watch event not encoded as %s", self.output.content_type, exc_info=True)
            self.on_end(None)
            return False
        if initial:
            self.allowance += len(line)
        self.waiting += len(line)
        if self.waiting > BUFFER_BYTES + self.allowance:
            self.cut()
            return False
        if not self.lines and self.streaming:
            self.coalescer.add(self)
        self.lines.append(line)
        if not self.first.done():
            self.first.set_result(None)
        return True

    def on_end(self, error: APIError | None) -> None:
        if error is not None:
            if self.streaming or self.lines:  # after the start, a failure is an ERROR event
                self.lines.append(encode_event(_error_event(error), self.output))
            else:
                self.error = error
        if not self.first.done():
            self.first.set_result(None)
        if not self.done.done():
            self.done.set_result(None)

    def cut(self) -> None:
        """A client that cannot keep up is cut off, as kube ends a watcher whose buffer is full; it
        watches again from its last resourceVersion."""
        self.cut_off = True
        if not self.done.done():
            self.done.set_result(None)

    def stream(self) -> None:
        """The 200 is out: what has come goes now, what comes next with the coalescer."""
        self.streaming = True
        self.transport = self.ctx.chunk_transport()
        self.flush()

    def flush(self) -> None:
        if not self.lines or self.writing is not None or self.closed:
            return  # (a write in flight takes what is waiting once it is done)
        lines, self.lines, self.waiting = self.lines, [], 0
        body = lines[0] if len(lines) == 1 else b"".join(lines)
        t = self.transport
        if t is None:
            self.writing = asyncio.ensure_future(self.ctx.write(body))
            self.writing.add_done_callback(self._written)
        elif t.is_closing():
            self.cut()
        else:
            t.write(b"%x\r\n%b\r\n" % (len(body), body))
            if t.get_write_buffer_size() > BUFFER_BYTES + self.allowance:
                self.cut()

    def _written(self, f: asyncio.Future[None]) -> None:
        self.writing = None
        if f.cancelled() or f.exception() is not None:
            self.cut()
        elif self.lines and self.streaming:
            self.flush()

    async def drain(self) -> None:
        """Write what is waiting (and wait for a write in flight); nothing is written after it."""
        while not self.closed:
            if self.writing is not None:
                try:
                    await self.writing
                except Exception:  # noqa: BLE001 - the client is gone: nothing more to write
                    break
            elif self.lines:
                self.flush()
            else:
                break
        self.closed = True

    def close(self) -> None:
        self.closed = True
        if self.writing is not None:
            self.writing.cancel()


class WatchHandler:
    def __init__(self, registry: rgrpc.RegistryStub, min_timeout: float = MIN_REQUEST_TIMEOUT,
                 replicas: int = 1) -> None:
        self.registry = registry
        self.min_timeout = min_timeout
        self.watches = watchmux.WatchMuxClient(registry.Watches, "registry", replicas=replicas)
        self.coalescer = Coalescer()
        self._encodings: dict[Output, EncodedEvents] = {}  # one per output form
        # Set when the server shuts down: every watch then ends cleanly, as kube's do.
        self.closing = asyncio.Event()
        self._closing_waiter: asyncio.Future | None = None

    def close_all(self) -> None:
        self.closing.set()

    def _closing(self) -> asyncio.Future:
        if self._closing_waiter is None:
            self._closing_waiter = asyncio.ensure_future(self.closing.wait())
        return self._closing_waiter

    def _encoded(self, output: Output) -> EncodedEvents:
        e = self._encodings.get(output)
        if e is None:
            e = self._encodings[output] = EncodedEvents(output)
        return e

    async def handle(self, ctx: Context, req: rpb.APIRequest, timeout: float,
                     started: Callable[[], None], output: Output = OUTPUT_JSON) -> None:
        """Stream the watch; `started` is called once the 200 and the events received so far are out:
        the watch is initialized (its initial events come in the registry's first batch) and its APF
        seats are released, as kube releases them at its watch's initialization signal."""
        t = time.perf_counter()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        w = ClientWatch(ctx, output, self._encoded(output), self.coalescer)
        relay = self.watches.relay(req, w.on_event, w.on_end)
        try:
            waiters: set[asyncio.Future] = {w.first}
            if ctx.disconnected is not None:
                waiters.add(ctx.disconnected)
            await asyncio.wait(waiters, timeout=min(FIRST_FRAME_WAIT, timeout), return_when=asyncio.FIRST_COMPLETED)
            if ctx.disconnected is not None and ctx.disconnected.done():
                raise ClientDisconnected()
            if w.error is not None:
                raise w.error  # before anything was sent: a normal error response
            ctx.timing("registry", t)
            await ctx.start_stream(200, output.watch_content_type, [(b"cache-control", b"no-cache, private")])
            w.stream()
            started()
            waiters = {w.done, self._closing()}
            if ctx.disconnected is not None:
                waiters.add(ctx.disconnected)
            await asyncio.wait(waiters, timeout=max(deadline - loop.time(), 0), return_when=asyncio.FIRST_COMPLETED)
            if ctx.disconnected is not None and ctx.disconnected.done():
                return
            if w.cut_off:
                log.info("watch %s cut off: its client does not keep up", req.resource)
            try:
                await asyncio.wait_for(self._end(ctx, w), CUT_OFF_GRACE if w.cut_off else None)
            except TimeoutError:
                await ctx.abort()
        finally:
            relay.cancel()
            w.close()

    @staticmethod
    async def _end(ctx: Context, w: ClientWatch) -> None:
        """What is waiting, then the answer's end."""
        await w.drain()
        await ctx.end_stream()
