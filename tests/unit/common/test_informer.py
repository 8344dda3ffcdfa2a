"""The informer's read-your-writes wait (wait_fresh) over a ListWatch fed by the test."""
from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from services.common.informer import Informer


class Feed:
    """A ListWatch whose list is empty at revision 5 and whose watch yields what the test puts."""

    def __init__(self) -> None:
        self.events: asyncio.Queue[tuple[str, dict[str, Any]]] = asyncio.Queue()

    async def list(self) -> tuple[list[dict[str, Any]], str]:
        return [], "5"

    async def watch(self, resource_version: str) -> AsyncIterator[tuple[str, dict[str, Any]]]:
        while True:
            yield await self.events.get()


def topping(name: str, rv: int) -> dict[str, Any]:
    return {"metadata": {"name": name, "resourceVersion": str(rv)}}


async def test_wait_fresh_returns_once_the_store_holds_the_revision() -> None:
    feed = Feed()
    informer = Informer.over(feed, "restaurant", "v1", "toppings")
    informer.start()
    try:
        await informer.synced.wait()
        assert await informer.wait_fresh(5)  # the list's revision: nothing to wait for
        waiting = asyncio.ensure_future(informer.wait_fresh(8))
        await feed.events.put(("ADDED", topping("ham", 7)))
        await feed.events.put(("BOOKMARK", {"metadata": {"resourceVersion": "8"}}))
        assert await waiting
        assert "ham" in informer.store
        await feed.events.put(("ADDED", topping("tomato", 9)))
        assert await informer.wait_fresh(9) and "tomato" in informer.store
    finally:
        await informer.stop()


async def test_wait_fresh_is_false_when_the_revision_never_comes() -> None:
    feed = Feed()
    informer = Informer.over(feed, "restaurant", "v1", "toppings")
    informer.start()
    try:
        await informer.synced.wait()
        await feed.events.put(("ADDED", topping("ham", 7)))
        assert not await informer.wait_fresh(20, timeout=0.2)
        assert "ham" in informer.store
    finally:
        await informer.stop()
