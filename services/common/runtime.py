"""Process bootstrap shared by every service: logging, uvloop, signals, health port."""
from __future__ import annotations

import asyncio
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


def run(main: Callable[[asyncio.Event], Awaitable[None]]) -> None:
    """Run main(stop_event) on uvloop; SIGTERM/SIGINT set the event."""
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
