"""Context.race: the client going away cancels what the request waits for, and nothing after it."""
from __future__ import annotations

import asyncio
from typing import Any

import pytest

from services.apiserver.filters import ClientDisconnected
from services.apiserver.serving import GONE_EXTENSION
from services.proxy.context import Context


def context() -> tuple[Context, asyncio.Event]:
    gone = asyncio.Event()
    sent = []

    async def receive() -> dict[str, Any]:
        if not sent:
            sent.append(1)
            return {"type": "http.request", "body": b"", "more_body": False}
        await gone.wait()
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        pass

    ctx = Context({"type": "http", "method": "GET", "path": "/x", "headers": []}, receive, send)
    return ctx, gone


async def test_an_answer_before_the_client_goes() -> None:
    ctx, gone = context()
    await ctx.read_body()
    ctx.watch_disconnect()

    async def answer() -> int:
        await asyncio.sleep(0)
        return 42

    assert await ctx.race(answer()) == 42
    gone.set()  # gone right after: what follows the race is not cancelled
    await asyncio.wait((ctx.disconnected,), timeout=5)
    assert asyncio.current_task().cancelling() == 0  # type: ignore[union-attr]
    ctx.close()


async def test_the_client_going_cancels_the_wait() -> None:
    ctx, gone = context()
    await ctx.read_body()
    ctx.watch_disconnect()
    cleaned = asyncio.Event()

    async def forever() -> None:
        try:
            gone.set()  # the client goes while the request waits
            await asyncio.sleep(3600)
        finally:
            cleaned.set()

    with pytest.raises(ClientDisconnected):
        await ctx.race(forever())
    assert cleaned.is_set()
    assert asyncio.current_task().cancelling() == 0  # type: ignore[union-attr]
    with pytest.raises(ClientDisconnected):  # already gone: not even started
        await ctx.race(forever())
    ctx.close()


async def test_another_cancellation_stays_one() -> None:
    ctx, gone = context()
    await ctx.read_body()
    ctx.watch_disconnect()

    racing = asyncio.Event()

    async def forever() -> None:
        racing.set()
        await asyncio.sleep(3600)

    async def request() -> None:
        await ctx.race(forever())

    task = asyncio.ensure_future(request())
    await racing.wait()
    task.cancel()  # the request's deadline, say
    with pytest.raises(asyncio.CancelledError):
        await task
    ctx.close()


async def test_the_connection_lost_cancels_the_wait_without_a_task() -> None:
    """Served by apiary's protocol, the request waits on its connection's future (no task of its own):
    the connection lost cancels the race, and the request's end leaves the connection's future alone."""
    gone: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    async def receive() -> dict[str, Any]:
        raise AssertionError("nothing reads the request for its disconnect")

    async def send(message: dict[str, Any]) -> None:
        pass

    scope = {"type": "http", "method": "GET", "path": "/x", "headers": [], "extensions": {GONE_EXTENSION: gone}}
    ctx = Context(scope, receive, send)
    ctx.watch_disconnect()
    assert ctx.disconnected is gone

    async def answer() -> int:
        return 42

    assert await ctx.race(answer()) == 42
    ctx.close()
    assert not gone.done()  # the connection serves its next request

    ctx = Context(scope, receive, send)
    ctx.watch_disconnect()

    async def forever() -> None:
        gone.set_result(None)  # the connection is lost while the request waits
        await asyncio.sleep(3600)

    with pytest.raises(ClientDisconnected):
        await ctx.race(forever())
    assert asyncio.current_task().cancelling() == 0  # type: ignore[union-attr]
    ctx.close()
