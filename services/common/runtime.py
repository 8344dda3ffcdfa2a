"""Process bootstrap shared by every service: logging, uvloop, signals, and the service skeleton.

Every service runs as a Service (below): its __main__ declares its flags, the clients it opens,
its components and what it listens on; the Service starts them, serves until SIGTERM/SIGINT, and
stops them in one order for all, that of kube-apiserver's graceful shutdown: /readyz fails, the
listeners stop accepting and drain what is in flight, the components stop (newest first), and
the clients close last, so that nothing still running loses a peer it needs; the process then ends
at once (main), without the interpreter's teardown.
"""
from __future__ import annotations

import argparse
import asyncio
import ctypes
import ctypes.util
import gc
import inspect
import logging
import os
import signal
import sys
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, Protocol

import grpc
from prometheus_client import Counter, Gauge

from . import auditid, config, grpcutil, tracing
from .background import cancel_and_wait
from .health import HealthServer, ReadyCheck

log = logging.getLogger(__name__)


def setup_logging(service: str, verbosity: int = 0) -> None:
    """Lines emitted while a request is handled end with its audit ID (auditid.LogFilter)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.addFilter(auditid.LogFilter())
    handler.setFormatter(logging.Formatter(f"%(asctime)s {service} %(levelname)s %(name)s: %(message)s%(audit)s"))
    logging.basicConfig(level=logging.DEBUG if verbosity >= 4 else logging.INFO, handlers=[handler])
    logging.getLogger("aetcd").setLevel(logging.WARNING)
    # grpc's own debug lines (its event loop, a stream's writer finding its call ended by a peer that
    # went away, with a traceback) say nothing about apiary's requests
    logging.getLogger("grpc").setLevel(logging.INFO)


# glibc mallopt parameters
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
MMAP_THRESHOLD = 32 << 20   # glibc's largest
TRIM_THRESHOLD = 16 << 20


def tune_malloc() -> bool:
    """Serve large buffers (a LIST of thousands of objects is a few MB, copied at every hop) from
    the heap instead of a fresh mmap each time: by default glibc maps every block over 128 KiB
    (the threshold only adapts after a free) and each new mapping is paid in page faults, which
    doubled the cost of moving a 3 MB message between services. Freed memory above 16 MiB at the
    top of the heap is still given back. False where the C library is not glibc."""
    name = ctypes.util.find_library("c")
    if not name:
        return False
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD))


# Memory given back (a large answer's buffers, closed connections' buffers) after which the C heap
# is trimmed: TRIM_DELAY after the last of a burst, and no later than TRIM_MAX_WAIT after its first.
TRIM_AFTER_BYTES = 16 << 20
TRIM_DELAY = 1.0
TRIM_MAX_WAIT = 5.0
_trim: asyncio.TimerHandle | None = None
_trim_first = 0.0
# The trim timer's clock: the running loop's when None; a test's FakeClock, counting in the loop's seconds.
trim_clock: Callable[[], float] | None = None
_freed = 0
# After a service starts serving: what its start freed (parsed schemas, the informers' first lists,
# import-time garbage) is given back once, this long after, when the first lists are in (settle).
START_TRIM_DELAY = 2.0
HEAP_TRIMS = Counter("apiary_heap_trims_total",
                     "Times freed C-heap memory (large answers, closed connections) was given back to the system.")
HEAP_TRIM_PENDING = Gauge("apiary_heap_trim_pending", "1 while a trim of the C heap is scheduled.")


def _malloc_trim() -> None:
    global _trim, _freed
    _trim, _freed = None, 0
    name = ctypes.util.find_library("c")
    if name:
        try:
            ctypes.CDLL(name).malloc_trim(0)
        except (OSError, AttributeError):
            pass
    HEAP_TRIMS.inc()
    HEAP_TRIM_PENDING.set(0)


def released(nbytes: int) -> None:
    """Count C-heap memory just freed, and give it back to the system once TRIM_AFTER_BYTES of it
    have been counted and the burst is over: glibc returns memory freed in the middle of the heap
    (and in gRPC's threads' arenas) only on malloc_trim, and with tune_malloc's mmap threshold every
    buffer below 32 MiB is on the heap. A burst (back-to-back LISTs, 2,000 connections closing)
    pays for one trim, of a few ms."""
    global _freed
    _freed += nbytes
    if _freed >= TRIM_AFTER_BYTES:
        _schedule_trim()


def postpone_trim() -> None:
    """Memory already counted (released) is still held a little longer, e.g. a closed connection's
    buffers by the request that ran on it: the pending trim, if any, waits TRIM_DELAY from now (still
    no later than TRIM_MAX_WAIT after the burst's first). Nothing is counted again."""
    if _trim is not None:
        _schedule_trim()


def _schedule_trim() -> None:
    """The trim TRIM_DELAY from now: the burst's first schedules it, the next ones move it, until
    that would put it past TRIM_MAX_WAIT after the first."""
    global _trim, _trim_first
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        return
    now = loop.time() if trim_clock is None else trim_clock()
    if _trim is None:
        _trim_first = now
    elif now + TRIM_DELAY - _trim_first > TRIM_MAX_WAIT:
        return  # a steady stream: the trim already scheduled comes first
    else:
        _trim.cancel()
    _trim = loop.call_at(now + TRIM_DELAY, _malloc_trim)
    HEAP_TRIM_PENDING.set(1)


# The cyclic collector's thresholds: a young collection after 10,000 net new container objects, not
# 700. With many requests in flight every young collection found their coroutines, frames and dicts
# alive and promoted them, so the oldest generation grew by thousands a second and was walked whole
# (the proxy: a 50 ms collection every 1.5 s under load, a seventh of its CPU with the young ones).
GC_THRESHOLDS = (10_000, 10, 10)


def settle() -> None:
    """Once a service has started: its start's garbage collected, what survives (modules, schemas,
    the informers' first lists) frozen out of the collector's walks for good (gc.freeze), and the freed
    C-heap memory given back."""
    gc.collect()
    gc.freeze()
    _malloc_trim()


def after_large_answer(nbytes: int) -> None:
    """A large answer (bytes sent) has gone out: its buffers were freed (released)."""
    if nbytes >= TRIM_AFTER_BYTES:
        released(nbytes)


def run(main: Callable[[asyncio.Event], Awaitable[None]]) -> None:
    """Run main(stop_event) on uvloop; SIGTERM/SIGINT set the event."""
    if not tune_malloc():
        log.info("mallopt unavailable: large buffers keep the C library's default allocation")
    gc.set_threshold(*GC_THRESHOLDS)
    gc.enable()  # paused while a service's modules loaded (loading.start)
    try:
        import uvloop

        uvloop.install()
    except ImportError:  # pragma: no cover - uvloop is a dependency
        pass

    async def outer() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await main(stop)

    asyncio.run(outer())
    # main stopped and closed everything in order; what is left is the interpreter's own teardown
    # (gRPC's, the collector's over the heap), most of a second of a stop that no data depends on
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


# Seconds in-flight gRPC calls get to finish once a service stops accepting new ones. The long-lived
# streams (Calls, Watches, Seats) never finish by themselves, so a stop always waits this long while
# a peer is connected: short, as a unary call takes milliseconds and every caller retries or
# re-watches on another replica or once the service is back (a test cluster stops in under a second).
GRACE = 0.3

Step = Callable[[], Any]  # a start or stop function, plain or async


async def _call(fn: Step | None) -> None:
    if fn is not None:
        result = fn()
        if inspect.isawaitable(result):
            await result


class Listener(Protocol):
    """What a service serves clients on: started last, stopped first (stop accepting, then drain)."""

    async def start(self) -> None: ...

    async def shutdown(self) -> None: ...

    async def done(self) -> None:
        """Returns when it stopped serving by itself (a listener that cannot go on ends the process)."""


class GRPCListener:
    """A grpc.aio server: shutdown refuses new calls and gives those in flight GRACE seconds."""

    def __init__(self, server: grpc.aio.Server, grace: float = GRACE) -> None:
        self.server, self.grace = server, grace
        self._stopped = asyncio.Event()

    async def start(self) -> None:
        await self.server.start()

    async def shutdown(self) -> None:
        self._stopped.set()
        await self.server.stop(grace=self.grace)

    async def done(self) -> None:
        # A grpc.aio server does not stop by itself (and waiting on its termination from a task
        # that is then cancelled would cancel its shutdown).
        await self._stopped.wait()


class Service:
    """One service process: what it declares, started and stopped in one order (module docstring).

    A __main__ builds it from its parsed flags, declares what is its own with client(), channel(),
    component(), task(), grpc_server() or listener() and check(), then hands it to main()."""

    def __init__(self, name: str, args: argparse.Namespace) -> None:
        self.name, self.args = name, args
        self.tls = config.internal_tls(args)
        self.checks: dict[str, ReadyCheck] = {}
        self._clients: list[Step] = []
        self._components: list[tuple[Step | None, Step | None]] = []
        self._listeners: list[Listener] = []
        self.stopping = False

    def client(self, close: Step) -> None:
        """Something that talks to a peer (a channel, etcd), closed after everything else stopped."""
        self._clients.append(close)

    def channel(self, address: str) -> grpc.aio.Channel:
        """A gRPC channel to a peer service (internal mTLS), closed last; over all its replicas
        when the address names several (grpcutil.target). It starts connecting now: the handshake runs
        in gRPC's own threads while the rest of the service assembles and starts, instead of after, with
        its first call."""
        try:
            ch = grpcutil.make_channel(self.tls, address)
        except ValueError as e:
            raise SystemExit(f"{self.name}: {e}") from None
        ch.get_state(try_to_connect=True)
        self.client(ch.close)
        return ch

    def component(self, start: Step | None = None, stop: Step | None = None) -> None:
        """Something that runs while the service serves (an informer, a cache, a loop): started in
        declaration order before the listeners, stopped in the reverse order after they drained."""
        self._components.append((start, stop))

    def task(self, make: Callable[[], Coroutine[Any, Any, Any]], name: str) -> None:
        """A background coroutine started with the components and cancelled with them."""
        running: list[asyncio.Task[Any]] = []

        def start() -> None:
            running.append(asyncio.create_task(make(), name=name))

        async def stop() -> None:
            while running:
                await cancel_and_wait(running.pop())

        self.component(start, stop)

    def grpc_server(self) -> grpc.aio.Server:
        """The service's gRPC server on --bind-address:--grpc-port (internal mTLS); the caller adds
        its servicers."""
        server = grpcutil.make_server(self.tls, f"{self.args.bind_address}:{self.args.grpc_port}")
        self.listener(GRPCListener(server))
        return server

    def listener(self, listener: Listener) -> None:
        self._listeners.append(listener)

    def check(self, name: str, check: ReadyCheck) -> None:
        """A /readyz check of the health port."""
        self.checks[name] = check

    async def run(self, stop: asyncio.Event, started: str = "") -> None:
        """Start everything, serve until stop is set (or a listener ends), then stop everything."""
        health = HealthServer(self.args.bind_address, self.args.health_port, self.checks)
        done: list[asyncio.Future[Any]] = []
        started_components, listening = 0, []
        try:
            for start, _ in self._components:
                await _call(start)
                started_components += 1
            for listener in self._listeners:
                await listener.start()
                listening.append(listener)
                done.append(asyncio.ensure_future(listener.done()))
            await health.start()
            asyncio.get_running_loop().call_later(START_TRIM_DELAY, settle)
            log.info("%s serving%s; health on %s:%d", self.name, f" {started}" if started else "",
                     self.args.bind_address, self.args.health_port)
            waiter = asyncio.ensure_future(stop.wait())
            await asyncio.wait([waiter, *done], return_when=asyncio.FIRST_COMPLETED)
            waiter.cancel()
        finally:
            for fut in done:
                fut.cancel()
            await self._shutdown(health, started_components, listening)

    async def _shutdown(self, health: HealthServer, started_components: int, listening: list[Listener]) -> None:
        """Stop what was started, in kube's order (the module docstring)."""
        self.stopping = True
        health.shutting_down = True  # /readyz fails from now on: load balancers send nothing new
        steps: list[tuple[str, Step]] = [("listener", listener.shutdown) for listener in listening]
        steps += [("component", stop) for _, stop in reversed(self._components[:started_components]) if stop]
        steps += [("client", close) for close in self._clients]
        steps.append(("health server", health.stop))
        for what, step in steps:
            try:
                await _call(step)
            except asyncio.CancelledError:
                raise
            except Exception:  # noqa: BLE001 - the rest must stop whatever one step did
                log.exception("%s: stopping a %s failed", self.name, what)


async def serve(name: str, args: argparse.Namespace, assemble: Callable[[Service], Awaitable[str | None]],
                stop: asyncio.Event) -> None:
    """One service in the running loop: assemble(service) declares its parts, then it runs until
    stop is set (main's process, or one of several in a test cluster's compact host)."""
    tracing.setup(name, getattr(args, "tracing_config_file", ""))
    service = Service(name, args)
    try:
        started = await assemble(service)
    except BaseException:
        for close in service._clients:
            await _call(close)
        raise
    await service.run(stop, started or "")


def main(name: str, args: argparse.Namespace, assemble: Callable[[Service], Awaitable[str | None]]) -> None:
    """A service's process: logging, then assemble(service) declares its parts (and returns what
    the "serving" log line adds), then the service runs until SIGTERM/SIGINT."""
    setup_logging(name, args.v)

    async def serve_one(stop: asyncio.Event) -> None:
        await serve(name, args, assemble, stop)

    run(serve_one)
    tracing.shutdown()  # its last spans exported before the process ends
    # Stopped cleanly: every part is closed, nothing is held that etcd (or the audit log, closed by
    # its sink's stop) does not already have. The interpreter's own teardown (every object freed,
    # gRPC's core shut down) cost a service up to a second more: a stopping process skips it.
    logging.shutdown()
    sys.stdout.flush()
    os._exit(0)
