"""Process bootstrap shared by every service: logging, uvloop, signals, health port."""
from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import logging
import signal
import sys
from collections.abc import Awaitable, Callable

log = logging.getLogger(__name__)


def setup_logging(service: str, verbosity: int = 0) -> None:
    logging.basicConfig(
        level=logging.DEBUG if verbosity >= 4 else logging.INFO,
        format=f"%(asctime)s {service} %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    logging.getLogger("aetcd").setLevel(logging.WARNING)


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


# A large answer (bytes sent) after which the C heap is trimmed, and how long after the last one.
TRIM_AFTER_BYTES = 16 << 20
TRIM_DELAY = 1.0
_trim: asyncio.TimerHandle | None = None


def _malloc_trim() -> None:
    global _trim
    _trim = None
    name = ctypes.util.find_library("c")
    if name:
        try:
            ctypes.CDLL(name).malloc_trim(0)
        except (OSError, AttributeError):
            pass


def after_large_answer(nbytes: int) -> None:
    """Give the memory a large answer used back to the system soon after it is sent: its buffers
    were freed in the middle of the heap (and in gRPC's threads' arenas), which glibc only returns
    on malloc_trim. Once per TRIM_DELAY at most, so that back-to-back LISTs pay for one."""
    global _trim
    if nbytes < TRIM_AFTER_BYTES or _trim is not None:
        return
    try:
        _trim = asyncio.get_running_loop().call_later(TRIM_DELAY, _malloc_trim)
    except RuntimeError:
        pass


def run(main: Callable[[asyncio.Event], Awaitable[None]]) -> None:
    """Run main(stop_event) on uvloop; SIGTERM/SIGINT set the event."""
    if not tune_malloc():
        log.info("mallopt unavailable: large buffers keep the C library's default allocation")
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
