"""Pacing of large answers (services/common/pacing.py) on a Calls stream (mux/): while a small call
is in flight in the process, the producer of an answer in parts takes no next part (up to
pacing.MAX_DEFER), then moves on; the answer's own call never counts as small. Parts grow to
QUIET_PART_BYTES only while no small call waits, here or on the caller's side (Frame.quiet).

Client and server run in one event loop without gRPC between them (as test_mux_fair); assertions
are on counts and order, and every wait is on a condition with a generous bound."""
from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from apiary_pb import envelope_pb2 as pb
from apiary_pb import registry_pb2 as rpb
from services.common import mux, pacing
from services.common.mux.flow import QUIET_PART_BYTES


class Server:
    """`parts-N`: N parts of PART_BYTES, made faster than they are sent; `hold`: a small call that
    stays in flight until `release` is set; anything else: answered at once."""

    def __init__(self) -> None:
        self.produced: dict[str, int] = {}
        self.entered = asyncio.Event()
        self.release = asyncio.Event()
        self.small_seen: list[int] = []  # pacing.in_flight() as each part was made

    async def handle(self, request: rpb.APIRequest, context: Any) -> Any:
        name = request.name
        if name == "hold":
            self.entered.set()
            await self.release.wait()
            return rpb.APIResponse(code=200, body=b"held")
        if not name.startswith("parts-"):
            return rpb.APIResponse(code=200, body=name.encode())
        n = int(name.split("-")[1])

        def parts() -> Iterator[bytes]:
            for i in range(n):
                self.produced[name] = i + 1
                self.small_seen.append(pacing.in_flight())
                yield bytes([65 + i % 26]) * mux.PART_BYTES
        self.produced[name] = 0
        return mux.Streamed(parts())

    async def open(self, requests: AsyncIterator[pb.Frames]) -> AsyncIterator[pb.Frames]:
        async for batch in mux.serve_mux(requests, None, {"Handle": (rpb.APIRequest, self.handle)}):
            yield batch


async def settle(rounds: int = 300) -> None:
    for _ in range(rounds):
        await asyncio.sleep(0)


async def test_parts_wait_for_a_small_call_in_flight(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(pacing, "MAX_DEFER", 3600.0)  # only the small call's end lets the parts go on
    server = Server()
    c = mux.MuxClient(server.open, "fake", {"Handle": rpb.APIResponse})
    big = c.call_stream("Handle", rpb.APIRequest(name="parts-40"), window=40)  # credit is no limit
    first, more = await anext(big)
    assert more and len(first) == mux.PART_BYTES
    held = asyncio.create_task(c.call("Handle", rpb.APIRequest(name="hold")))
    try:
        await asyncio.wait_for(server.entered.wait(), 30)
        assert pacing.in_flight() == 1
        at_start = server.produced["parts-40"]
        await settle()
        # The part being taken when the call came may be made; no part after it.
        assert server.produced["parts-40"] <= at_start + 1 < 40
        # Another small call is answered meanwhile (it is not held behind the large answer).
        other = await asyncio.wait_for(c.call("Handle", rpb.APIRequest(name="other")), 30)
        assert other.body == b"other"
        assert server.produced["parts-40"] <= at_start + 1
    finally:
        server.release.set()
    assert (await asyncio.wait_for(held, 30)).body == b"held"
    rest = await asyncio.wait_for(_read_all(big), 30)
    assert len(rest) == 39 and rest[-1] == bytes([65 + 39 % 26]) * mux.PART_BYTES
    assert pacing.in_flight() == 0


async def test_parts_move_on_under_small_calls_that_never_end(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(pacing, "MAX_DEFER", 0.001)  # each part waits at most this long
    server = Server()
    c = mux.MuxClient(server.open, "fake", {"Handle": rpb.APIResponse})
    held = asyncio.create_task(c.call("Handle", rpb.APIRequest(name="hold")))
    try:
        await asyncio.wait_for(server.entered.wait(), 30)
        parts = await asyncio.wait_for(_read_all(c.call_stream("Handle", rpb.APIRequest(name="parts-12"))), 30)
        assert len(parts) == 12
        assert not held.done() and pacing.in_flight() == 1  # all of it made while the call was in flight
    finally:
        server.release.set()
    await asyncio.wait_for(held, 30)
    assert pacing.in_flight() == 0


async def test_an_answer_in_parts_is_not_a_small_call():
    server = Server()
    c = mux.MuxClient(server.open, "fake", {"Handle": rpb.APIResponse})
    parts = await asyncio.wait_for(_read_all(c.call_stream("Handle", rpb.APIRequest(name="parts-8"))), 30)
    assert len(parts) == 8
    assert server.small_seen == [0] * 8  # its own call stopped counting once it answered in parts
    assert pacing.in_flight() == 0


def test_a_call_is_counted_once():
    async def main() -> None:
        call = pacing.begin()
        assert pacing.in_flight() == 1
        pacing.large()  # this task's call answers in parts
        assert pacing.in_flight() == 0
        call.end()  # ending it again changes nothing
        pacing.large()
        assert pacing.in_flight() == 0
        await pacing.next_part()  # nothing in flight: no wait

    asyncio.run(main())


def test_quiet_while_no_other_small_call_is_in_flight_or_recent(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(pacing, "_last_end", float("-inf"))

    async def main() -> None:
        assert pacing.quiet()
        own = pacing.begin()
        assert pacing.quiet()  # the current task's own call aside
        other = asyncio.get_running_loop().create_future()

        async def small_call() -> None:
            call = pacing.begin()
            await other
            call.end()
        task = asyncio.create_task(small_call())
        await settle(5)
        assert not pacing.quiet()  # another small call in flight
        other.set_result(None)
        await task
        assert not pacing.quiet()  # one ended within QUIET_HOLD
        monkeypatch.setattr(pacing, "QUIET_HOLD", 0.0)
        assert pacing.quiet()
        monkeypatch.setattr(pacing, "QUIET_HOLD", 3600.0)
        monkeypatch.setattr(pacing, "_last_end", float("-inf"))
        pacing.large()  # a call that answers in parts is no small call that ended
        own.end()
        assert pacing.quiet()

    asyncio.run(main())


async def test_parts_grow_only_while_the_caller_and_this_process_are_quiet(monkeypatch: pytest.MonkeyPatch):
    """The call's Frame.quiet and each credit's say how large the parts made after them may be;
    a small call in flight in the server's process keeps them small too."""
    monkeypatch.setattr(pacing, "_last_end", float("-inf"))
    sizes: list[int] = []

    async def handle(request: rpb.APIRequest, context: Any) -> Any:
        def parts() -> Iterator[bytes]:
            for _ in range(int(request.name)):
                sizes.append(mux.part_bytes())
                yield b"x"
        return mux.Streamed(parts())

    requests: asyncio.Queue[pb.Frames] = asyncio.Queue()

    async def incoming() -> AsyncIterator[pb.Frames]:
        while True:
            yield await requests.get()

    sent = mux.serve_mux(incoming(), None, {"Handle": (rpb.APIRequest, handle)})

    async def take(n: int) -> None:
        got = 0
        while got < n:
            got += len(pb.Frames.FromString(await asyncio.wait_for(anext(sent), 30)).frames)

    # (the server makes each part before it may send it: one part ahead of the credit)
    call = rpb.APIRequest(name="8").SerializeToString()
    requests.put_nowait(pb.Frames(frames=[pb.Frame(id=1, method="Handle", payload=call, window=2, quiet=False)]))
    await take(2)
    await settle()
    assert sizes == [mux.PART_BYTES] * len(sizes)
    before = len(sizes)
    requests.put_nowait(pb.Frames(frames=[pb.Frame(id=1, credit=2, quiet=True)]))
    await take(2)
    await settle()
    assert len(sizes) > before and sizes[before:] == [QUIET_PART_BYTES] * (len(sizes) - before)
    before = len(sizes)
    held = pacing.begin()  # a small call in flight here
    requests.put_nowait(pb.Frames(frames=[pb.Frame(id=1, credit=2, quiet=True)]))
    await take(2)
    await settle()
    held.large()
    assert len(sizes) > before and sizes[before:] == [mux.PART_BYTES] * (len(sizes) - before)
    await sent.aclose()


async def _read_all(parts: AsyncIterator[tuple[bytes, bool]]) -> list[bytes]:
    return [p async for p, _ in parts]
