"""Helpers for the long-running asyncio tasks services own (informers, loops, streams)."""
from __future__ import annotations

import asyncio


async def cancel_and_wait(task: asyncio.Task[None] | None) -> None:
    """Cancel a background task and wait until it has ended, whatever it raised on the way out."""
    if task is None:
        return
    task.cancel()
    try:
        await task
    except (asyncio.CancelledError, Exception):  # noqa: BLE001 - it is being torn down
        pass
