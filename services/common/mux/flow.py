"""Flow control and sharing of the server's side of a Calls stream: each answer in parts queues at most
QUEUED_PARTS and waits for the caller's credit (Outgoing); whole answers go first, then one part of each
answer in parts in turn, each stream message about PART_BYTES (Scheduler). A part may grow to
QUIET_PART_BYTES while no small call waits on any hop (part_bytes)."""
from __future__ import annotations

import asyncio
import contextvars
from collections import deque
from collections.abc import AsyncIterator

from apiary_pb import envelope_pb2 as pb

from .. import pacing
from ..protowire import varint

# What one stream message carries at most when answers come in parts (Streamed): small enough that
# sender, receiver and the process after them work on different parts at the same time, and that
# a process busy with a part keeps other calls waiting little (a GET during a large LIST waited
# about 1.5x longer with 256 KiB parts; 64 KiB made the LIST slower for nothing).
PART_BYTES = 128 << 10
# Parts of one answer that may be on their way to a call_stream caller: no hop holds more than
# about 0.25 MiB of one answer. The caller grants the window again once it has taken all of it, one
# credit message per WINDOW parts: each flow-control message costs a gRPC message on both sides
# (about a third of a LIST's CPU per hop when every part was credited on its own), and a hop's
# producer then waits while its consumer works through the window, so that a LIST gives way to the
# small calls in flight (pacing.py) within a window. A GET beside a 208 MB LIST: 1.7x its idle
# latency, against 2.0-2.3x with a credit per part and 3x without flow control (tools/bench_fairness).
WINDOW = 2
# Parts of one answer a server queues for its writer beyond the one being written (without flow
# control from the caller this alone bounds what the server holds).
QUEUED_PARTS = 2
# What a part may hold while no small call waits on its way, neither in this process nor on the
# caller's side (Frame.quiet, carried hop by hop with the credit): each part costs every hop a
# stream message and a credit's share, which is most of a LIST's CPU at 128 KiB a part. Taken where
# the small call waits, the signal makes the parts small again within a window of its arrival.
QUIET_PART_BYTES = 1 << 20


class Caller:
    """What the caller of an answer in parts said with its call and its last credit."""

    __slots__ = ("quiet",)

    def __init__(self, quiet: bool) -> None:
        self.quiet = quiet


# The caller of the answer in parts the current task makes (set by the mux server for its calls).
CALLER: contextvars.ContextVar[Caller | None] = contextvars.ContextVar("mux_caller", default=None)


def quiet() -> bool:
    """No small call waits in this process nor, for the answer the current task makes, on its
    caller's side: what this process says with its calls and credits (Frame.quiet)."""
    caller = CALLER.get()
    return (caller is None or caller.quiet) and pacing.quiet()


def part_bytes() -> int:
    """How large the current task's next part of an answer may grow."""
    return QUIET_PART_BYTES if quiet() else PART_BYTES

Answer = tuple[int, bytes, "pb.Status | None", bool]


class Outgoing:
    """The parts of one answer in parts that wait to be written, and what its producer waits for:
    room in this queue and, when the caller asked for flow control, credit."""

    __slots__ = ("fid", "queue", "credit", "wake")

    def __init__(self, fid: int, window: int) -> None:
        self.fid = fid
        self.queue: deque[Answer] = deque()
        self.credit: int | None = window or None  # None: the caller did not ask for flow control
        self.wake = asyncio.Event()

    def may_send(self) -> bool:
        return len(self.queue) < QUEUED_PARTS and (self.credit is None or self.credit > 0)

    def grant(self, n: int) -> None:
        if self.credit is not None:
            self.credit += n
            self.wake.set()

    async def room(self) -> None:
        """Until one more part may be queued (then it is counted against the credit)."""
        while not self.may_send():
            self.wake.clear()
            await self.wake.wait()
        if self.credit is not None:
            self.credit -= 1


class Scheduler:
    """The server's outgoing answers: whole answers first, then one part of each answer in parts in
    turn; each message stops growing past PART_BYTES (and holds at least one part when one waits)."""

    def __init__(self) -> None:
        self.whole: deque[Answer] = deque()
        self.turns: dict[int, Outgoing] = {}  # answers with parts waiting, in their turn's order
        self.wake = asyncio.Event()
        self.closed = False

    def answer(self, item: Answer) -> None:
        self.whole.append(item)
        self.wake.set()

    def part(self, out: Outgoing, item: Answer) -> None:
        out.queue.append(item)
        if out.fid not in self.turns:
            self.turns[out.fid] = out
        self.wake.set()

    def drop(self, out: Outgoing) -> None:
        """Forget the parts of an answer nobody wants any more."""
        out.queue.clear()
        self.turns.pop(out.fid, None)

    def close(self) -> None:
        self.closed = True
        self.wake.set()

    async def batches(self) -> AsyncIterator[bytes]:
        """Each stream message, serialized (encode)."""
        whole, turns = self.whole, self.turns
        while True:
            while not whole and not turns:
                if self.closed:
                    return
                self.wake.clear()
                await self.wake.wait()
            batch: list[Answer] = []
            size = 0
            while whole and size < PART_BYTES:
                answer = whole.popleft()
                batch.append(answer)
                size += len(answer[1])
            first = True
            while turns and (first or size < PART_BYTES):
                first = False
                fid = next(iter(turns))
                out = turns.pop(fid)
                answer = out.queue.popleft()
                batch.append(answer)
                size += len(answer[1])
                if out.queue:
                    turns[fid] = out  # its next part waits for its next turn
                out.wake.set()
            yield encode(batch, size)


# A stream message carrying this many bytes of payloads is serialized by hand (encode).
LARGE = 64 << 10
_MORE = b"\x28\x01"  # Frame.more = true


def encode(batch: list[Answer], size: int) -> bytes:
    """The Frames message of these answers (size: their payloads' bytes), serialized. A large one by
    hand, its payloads copied once: the protobuf library copies a payload into the Frame, then again
    as its encoder's buffer grows and into the bytes it returns (about 0.25 ms a MiB, against 0.03).
    A small one through pb.Frames, faster for a few small frames."""
    if size < LARGE:
        message = pb.Frames()
        add = message.frames.add
        for fid, payload, error, more in batch:
            if error is None:
                add(id=fid, payload=payload, more=more)
            else:
                add(id=fid, error=error)
        return message.SerializeToString()
    out: list[bytes] = []
    for fid, payload, error, more in batch:
        if error is not None:
            frame = b"\x08" + varint(fid) + b"\x22" + varint(error.ByteSize()) + error.SerializeToString()
            out += (b"\x0a", varint(len(frame)), frame)
            continue
        head = b"\x08" + varint(fid) + (b"\x1a" + varint(len(payload)) if payload else b"")
        out += (b"\x0a", varint(len(head) + len(payload) + (2 if more else 0)), head, payload)
        if more:
            out.append(_MORE)
    return b"".join(out)
