"""Sharing a Calls stream (services/common/mux/): a small call is not held behind a large answer
in parts, answers in parts progress together, and a caller that stops reading stops the sender.

The client and the server side run in one event loop, the client reading the server's messages
directly (no gRPC in between), and every assertion is on order or counts, never on time."""
from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from typing import Any

from apiary_pb import envelope_pb2 as pb
from apiary_pb import registry_pb2 as rpb
from services.common import mux
from services.common.mux.client import _Parts
from services.common.mux.flow import QUEUED_PARTS
from tests.waiting import until


class Server:
    """serve_mux with a method answering `parts-N` in N parts (each PART_BYTES) and anything else
    at once; it counts the parts taken from each answer's iterator and logs every frame sent."""

    def __init__(self) -> None:
        self.produced: dict[str, int] = {}
        self.closed: set[str] = set()
        self.sent: list[tuple[int, bool]] = []  # (id, more) of each frame, in the order sent
        self.credits: list[int] = []  # each Frame.credit received, in order

    async def handle(self, request: rpb.APIRequest, context: Any) -> Any:
        name = request.name
        if not name.startswith("parts-"):
            return rpb.APIResponse(code=200, body=name.encode())
        n = int(name.split("-")[1])

        def parts() -> Iterator[bytes]:
            # Made faster than they are sent (as storage makes a list's parts from its cache).
            try:
                for i in range(n):
                    self.produced[name] = i + 1
                    yield bytes([65 + i % 26]) * mux.PART_BYTES
            finally:
                self.closed.add(name)
        self.produced[name] = 0
        return mux.Streamed(parts())

    async def open(self, requests: AsyncIterator[pb.Frames]) -> AsyncIterator[pb.Frames]:
        async def counted() -> AsyncIterator[pb.Frames]:
            async for batch in requests:
                self.credits.extend(f.credit for f in batch.frames if f.credit)
                yield batch

        async for batch in mux.serve_mux(counted(), None, {"Handle": (rpb.APIRequest, self.handle)}):
            for f in pb.Frames.FromString(batch).frames:
                self.sent.append((f.id, f.more))
            yield batch


def client(server: Server) -> mux.MuxClient:
    return mux.MuxClient(server.open, "fake", {"Handle": rpb.APIResponse})


async def settle(rounds: int = 200) -> None:
    for _ in range(rounds):
        await asyncio.sleep(0)


async def test_small_call_overtakes_a_large_answer():
    server = Server()
    c = client(server)
    big = c.call_stream("Handle", rpb.APIRequest(name="parts-60"))
    first, more = await anext(big)
    assert more and len(first) == mux.PART_BYTES
    small = await c.call("Handle", rpb.APIRequest(name="small"))
    assert small.body == b"small"
    # The small answer was sent while most of the large one was still to be made ...
    assert server.produced["parts-60"] <= mux.WINDOW + QUEUED_PARTS + 2
    # ... and so is one sharing the large answer's own stream (whole answers go first).
    assert c._parts_client is not None
    same = await c._parts_client.call("Handle", rpb.APIRequest(name="same-stream"))
    assert same.body == b"same-stream"
    assert server.produced["parts-60"] <= mux.WINDOW + QUEUED_PARTS + 2
    rest = [p async for p, _ in big]
    assert len(rest) == 59 and rest[-1] == bytes([65 + 59 % 26]) * mux.PART_BYTES


async def test_answers_in_parts_progress_together():
    server = Server()
    c = client(server)

    async def read(name: str) -> int:
        return len([p async for p, _ in c.call_stream("Handle", rpb.APIRequest(name=name))])

    assert await asyncio.gather(read("parts-20"), read("parts-30"), read("parts-25")) == [20, 30, 25]
    firsts: dict[int, int] = {}
    lasts: dict[int, int] = {}
    for i, (fid, more) in enumerate(server.sent):
        firsts.setdefault(fid, i)
        if not more:
            lasts[fid] = i
    assert len(firsts) == 3
    # Every answer had started before any of them ended ...
    assert max(firsts.values()) < min(lasts.values())
    # ... and no answer sent more than a window's worth in a row while the others were still going.
    run, longest, prev = 0, 0, None
    for fid, _ in server.sent[:min(lasts.values())]:
        run = run + 1 if fid == prev else 1
        longest, prev = max(longest, run), fid
    assert longest <= mux.WINDOW + QUEUED_PARTS


async def test_a_caller_that_stops_reading_stops_the_sender():
    server = Server()
    c = client(server)
    parts = c.call_stream("Handle", rpb.APIRequest(name="parts-100"))
    await anext(parts)
    await settle()
    # Parts made: the one taken, the window, what the server queues and the one it looks ahead.
    held = server.produced["parts-100"]
    assert held <= 1 + mux.WINDOW + QUEUED_PARTS + 1
    pending = [e for e in c._parts_client._pending.values() if isinstance(e, _Parts)]
    assert len(pending) == 1 and len(pending[0].frames) <= mux.WINDOW
    await settle()
    assert server.produced["parts-100"] == held
    # Taking parts lets it go on, part for part.
    for _ in range(10):
        await anext(parts)
    await settle()
    assert held < server.produced["parts-100"] <= held + 10
    # Giving up cancels the answer on the server, which closes its iterator.
    await parts.aclose()
    await until(lambda: "parts-100" in server.closed, what="the answer's iterator closed")
    assert "parts-100" in server.closed
    assert server.produced["parts-100"] < 100
    # The stream is still good for other calls.
    assert (await c.call("Handle", rpb.APIRequest(name="after"))).body == b"after"


async def test_the_window_is_granted_again_once_taken():
    """One credit message per window of parts taken (each costs a gRPC message on both sides), none
    after the last part; and never more than a window on its way."""
    server = Server()
    c = client(server)
    n = 8 * mux.WINDOW + 1
    parts = c.call_stream("Handle", rpb.APIRequest(name=f"parts-{n}"))
    got = 0
    async for _ in parts:
        got += 1
        await settle()
        waiting = [len(e.frames) for e in c._parts_client._pending.values() if isinstance(e, _Parts)]
        assert all(w <= mux.WINDOW for w in waiting), waiting
    assert got == n
    assert server.credits == [mux.WINDOW] * ((n - 1) // mux.WINDOW)


async def test_a_caller_without_flow_control_gets_everything():
    """window=0 (a caller that does not grant credit) is answered without waiting for any."""
    server = Server()
    c = client(server)
    got = [p async for p, _ in c.call_stream("Handle", rpb.APIRequest(name="parts-12"), window=0)]
    assert len(got) == 12
    assert server.credits == []  # nor does it send any
