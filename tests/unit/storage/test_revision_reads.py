"""RevisionReads: readers of one moment share one etcd read, and every read began after its readers."""
from __future__ import annotations

import asyncio

import pytest

from services.apiserver.storage.etcd import RevisionReads


class FakeEtcd:
    """Reads that answer when told; each answers the revision etcd is at when it is sent."""

    def __init__(self) -> None:
        self.revision = 10
        self.sent: list[asyncio.Future[None]] = []
        self.fail: Exception | None = None

    async def read(self) -> int:
        at = self.revision  # a read sees every write done before it was sent
        gate = asyncio.get_running_loop().create_future()
        self.sent.append(gate)
        await gate
        if self.fail is not None:
            raise self.fail
        return at


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def test_readers_of_one_moment_share_one_read() -> None:
    etcd = FakeEtcd()
    reads = RevisionReads(etcd.read)
    readers = [asyncio.create_task(reads.current()) for _ in range(8)]
    await settle()
    assert len(etcd.sent) == 1
    etcd.sent[0].set_result(None)
    assert await asyncio.gather(*readers) == [10] * 8


async def test_a_reader_arriving_during_a_read_gets_a_later_read() -> None:
    etcd = FakeEtcd()
    reads = RevisionReads(etcd.read)
    first = asyncio.create_task(reads.current())
    await settle()
    etcd.revision = 11  # a write the next reader may have seen, done after the first read was sent
    late = [asyncio.create_task(reads.current()) for _ in range(3)]
    await settle()
    assert len(etcd.sent) == 1  # the late readers wait for the next read, not this one
    etcd.sent[0].set_result(None)
    assert await first == 10
    await settle()
    assert len(etcd.sent) == 2
    etcd.sent[1].set_result(None)
    assert await asyncio.gather(*late) == [11] * 3


async def test_a_failed_read_fails_its_readers_and_the_next_read_is_sent() -> None:
    etcd = FakeEtcd()
    reads = RevisionReads(etcd.read)
    etcd.fail = RuntimeError("etcd is unavailable")
    readers = [asyncio.create_task(reads.current()) for _ in range(2)]
    await settle()
    etcd.sent[0].set_result(None)
    for r in readers:
        with pytest.raises(RuntimeError, match="unavailable"):
            await r
    etcd.fail = None
    again = asyncio.create_task(reads.current())
    await settle()
    assert len(etcd.sent) == 2
    etcd.sent[1].set_result(None)
    assert await again == 10


async def test_a_reader_that_gives_up_leaves_the_others_their_answer() -> None:
    etcd = FakeEtcd()
    reads = RevisionReads(etcd.read)
    quitter = asyncio.create_task(reads.current())
    stayer = asyncio.create_task(reads.current())
    await settle()
    quitter.cancel()
    await settle()
    etcd.sent[0].set_result(None)
    assert await stayer == 10
    assert quitter.cancelled()
