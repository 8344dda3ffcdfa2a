"""grpcutil.batches: the writing side of the long-lived Calls, Watches and Seats streams."""
from __future__ import annotations

import asyncio

from services.common.grpcutil import batches


async def test_everything_queued_since_the_last_write_is_one_message() -> None:
    queue: asyncio.Queue[int | None] = asyncio.Queue()
    out = batches(queue, tuple)
    queue.put_nowait(1)
    queue.put_nowait(2)
    assert await anext(out) == (1, 2)
    queue.put_nowait(3)
    assert await anext(out) == (3,)
    waiting = asyncio.ensure_future(anext(out))
    await asyncio.sleep(0)
    assert not waiting.done()  # nothing queued: no empty message
    queue.put_nowait(4)
    assert await waiting == (4,)


async def test_none_ends_the_stream_after_what_was_queued_before_it() -> None:
    queue: asyncio.Queue[int | None] = asyncio.Queue()
    for item in (1, 2, None, 3):
        queue.put_nowait(item)
    assert [m async for m in batches(queue, list)] == [[1, 2]]
    queue.put_nowait(None)
    assert [m async for m in batches(queue, list)] == [[3]]


async def test_one_turn_takes_what_the_other_tasks_of_that_turn_queue() -> None:
    """Items queued by tasks that run in the same event-loop turn as the first go in its write."""
    for one_turn, expected in ((False, [(1,), (2, 3)]), (True, [(1, 2, 3)])):
        queue: asyncio.Queue[int | None] = asyncio.Queue()
        out = batches(queue, tuple, one_turn=one_turn)
        writer = asyncio.ensure_future(anext(out))
        await asyncio.sleep(0)  # the writer waits on the empty queue

        async def put(item: int) -> None:
            queue.put_nowait(item)

        queue.put_nowait(1)
        others = [asyncio.ensure_future(put(i)) for i in (2, 3)]  # they run in the writer's next turn
        got = [await writer]
        await asyncio.gather(*others)
        if not one_turn:
            got.append(await anext(out))
        assert got == expected, one_turn
