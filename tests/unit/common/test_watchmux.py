"""services/common/watchmux.py: grouping, ordering, capacity, ends and failures, without gRPC."""
from __future__ import annotations

import asyncio

import pytest

from apiary_pb import envelope_pb2 as pb
from services.common import watchmux
from services.common.errors import APIError, Gone, ServiceUnavailable
from tests.waiting import until


def test_an_event_goes_once_with_every_watch_it_reaches():
    sink = watchmux.Sink()
    e1, e2 = b"one", b"two"
    for wid in (1, 2, 3):
        assert sink.send(wid, e1)
    sink.send(2, e2)
    sink.send(1, e2)
    batch = asyncio.run(sink.next_batch())
    assert [(d.event, list(d.ids)) for d in batch.deliveries] == [(b"one", [1, 2, 3]), (b"two", [2, 1])]


def test_a_watch_keeps_its_order_when_it_lags_behind_others():
    """Watch 2 receives e1 after e2 was queued for watch 1: e1 must still come first for watch 2,
    and e2 for watch 2 must not join the earlier delivery of e2."""
    sink = watchmux.Sink()
    e1, e2 = b"e1", b"e2"
    sink.send(1, e1)
    sink.send(1, e2)
    sink.send(2, e2)   # joins e2's delivery (after nothing else of watch 2)
    sink.send(3, e2)
    sink.send(3, e1)   # watch 3 is past e1's delivery: a new one
    batch = asyncio.run(sink.next_batch())
    got = [(d.event, list(d.ids)) for d in batch.deliveries]
    assert got == [(b"e1", [1]), (b"e2", [1, 2, 3]), (b"e1", [3])]
    # per watch, the order it was sent in
    per: dict[int, list[bytes]] = {}
    for event, ids in got:
        for i in ids:
            per.setdefault(i, []).append(event)
    assert per == {1: [b"e1", b"e2"], 2: [b"e2"], 3: [b"e2", b"e1"]}


def test_capacity_refuses_a_watch_that_does_not_drain():
    sink = watchmux.Sink(capacity=2)
    assert sink.send(1, b"a") and sink.send(1, b"b")
    assert not sink.send(1, b"c")
    assert sink.send(2, b"c")          # other watches are unaffected
    assert sink.send(1, b"d", force=True)
    asyncio.run(sink.next_batch())
    assert sink.send(1, b"e")          # drained: room again
    # a watch's initial events (forced) do not use up its room for live ones, and say so
    fresh = watchmux.Sink(capacity=2)
    for i in range(5):
        assert fresh.send(7, bytes([i]), force=True)
    assert fresh.send(7, b"live1") and fresh.send(7, b"live2") and not fresh.send(7, b"live3")
    batch = asyncio.run(fresh.next_batch())
    assert [d.initial for d in batch.deliveries] == [True] * 5 + [False, False]


async def _client_and_server(start):
    """A WatchMuxClient talking to watchmux.serve in-process (the stream is a pair of queues)."""

    class Call:
        """Batches from the server through a queue; cancel() breaks the stream as gRPC would."""

        def __init__(self, controls):
            self.out: asyncio.Queue = asyncio.Queue()
            self.task = asyncio.get_running_loop().create_task(self._pump(watchmux.serve(controls, start)))

        async def _pump(self, it):
            try:
                async for batch in it:
                    self.out.put_nowait(batch)
            finally:
                await it.aclose()
                self.out.put_nowait(None)

        def __aiter__(self):
            return self

        async def __anext__(self):
            batch = await self.out.get()
            if batch is None:
                raise asyncio.CancelledError()
            return batch

        def cancel(self):
            self.task.cancel()

    return watchmux.WatchMuxClient(Call, "peer")


async def test_watches_on_one_stream_end_cancel_and_fail():
    live: dict[int, watchmux.Sink] = {}
    cancelled: list[int] = []

    async def start(wid, raw, sink):
        req = pb.WatchOpen.FromString(raw)  # any message will do as the request
        if req.request == b"gone":
            raise Gone("too old resource version: 1 (5)")
        sink.send(wid, b"hello " + req.request, force=True)
        if req.request == b"short":
            return
        live[wid] = sink
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.append(wid)
            raise

    client = await _client_and_server(start)

    async def collect(name, n=None):
        out = []
        async for ev in client.watch(pb.WatchOpen(request=name)):
            out.append(ev)
            if n is not None and len(out) == n:
                break
        return out

    assert await collect(b"short") == [b"hello short"]
    with pytest.raises(APIError) as e:
        await collect(b"gone")
    assert e.value.code == 410

    # two long watches: an event sent once reaches both; breaking off one cancels it on the server
    a = asyncio.create_task(collect(b"a", 3))
    b = asyncio.create_task(collect(b"b", 2))
    await until(lambda: len(live) >= 2)
    shared = b"shared"
    for wid, sink in live.items():
        sink.send(wid, shared)
    wb = max(live)
    (wa, sa), = [(w, s) for w, s in live.items() if w != wb]
    assert await b == [b"hello b", b"shared"]
    await until(lambda: cancelled)
    assert cancelled == [wb]
    sa.send(wa, b"last")
    assert await a == [b"hello a", b"shared", b"last"]

    # a broken stream ends every watch on it with the failure, and the next watch opens a new one
    c = asyncio.create_task(collect(b"c"))
    await until(lambda: any(w for w in live if w not in (wa, wb)))
    client._stream.call.cancel()
    with pytest.raises(ServiceUnavailable):
        await c
    assert await collect(b"short") == [b"hello short"]


async def test_relay_hands_events_to_callbacks():
    """relay(): events straight to on_event as each batch is read; on_event returning False stops
    the watch on the server; on_end gets the end (None, or the error); cancel() stops it quietly."""
    sinks: dict[bytes, tuple[int, watchmux.Sink]] = {}
    cancelled: list[bytes] = []

    async def start(wid, raw, sink):
        name = pb.WatchOpen.FromString(raw).request
        if name == b"bad":
            raise Gone("too old resource version: 1 (5)")
        sinks[name] = (wid, sink)
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.append(name)
            raise

    client = await _client_and_server(start)
    got: dict[str, list] = {"a": [], "b": [], "c": []}
    ends: dict[str, list] = {"a": [], "b": [], "bad": [], "c": []}

    def relay(name: str, stop_after: int = 0):
        def on_event(ev: bytes, initial: bool) -> bool:
            got[name].append(ev)
            assert not initial
            return not stop_after or len(got[name]) < stop_after
        return client.relay(pb.WatchOpen(request=name.encode()), on_event, ends[name].append)

    relay("a")
    relay("b", stop_after=2)
    relay("bad")
    c = relay("c")
    await until(lambda: len(sinks) >= 3)
    assert isinstance(ends["bad"][0], Gone)
    shared = b"shared"
    for name in (b"a", b"b"):
        wid, sink = sinks[name]
        sink.send(wid, shared)
        sink.send(wid, b"second")
    await until(lambda: len(got["a"]) == 2 and ends["b"], what="both events at a, b stopped")
    assert got["a"] == [b"shared", b"second"] and got["a"][0] is got["b"][0]
    assert ends["b"] == [None]  # stopped by its callback, and cancelled on the server
    await until(lambda: b"b" in cancelled)
    c.cancel()
    await until(lambda: b"c" in cancelled)
    assert ends["c"] == []
    wid, sink = sinks[b"a"]
    sink.end(wid)
    await until(lambda: ends["a"], what="the end of a")
    assert ends["a"] == [None]
    # a stream failure reaches every relay still open
    d_end: list = []
    client.relay(pb.WatchOpen(request=b"d"), lambda ev, initial: True, d_end.append)
    await until(lambda: b"d" in sinks)
    client._stream.call.cancel()
    await until(lambda: d_end)
    assert isinstance(d_end[0], ServiceUnavailable)


async def test_initial_events_beyond_the_capacity_reach_the_client():
    """A watch whose initial events outnumber the capacity is not cut off on the way: initial
    events are marked, and neither the server's sink nor the client's buffer holds them against it."""
    n = 50

    async def start(wid, raw, sink):
        for i in range(n):
            sink.send(wid, b"init-%d" % i, force=True)
        for i in range(3):
            assert sink.send(wid, b"live-%d" % i)
            await asyncio.sleep(0)

    client = await _client_and_server(start)
    client.capacity = 5
    got = []
    async for ev in client.watch(pb.WatchOpen(request=b"x")):
        got.append(ev)
        await asyncio.sleep(0)  # a slow reader
    assert got == [b"init-%d" % i for i in range(n)] + [b"live-%d" % i for i in range(3)]
    relayed: list[tuple[bytes, bool]] = []
    ended: list = []
    client.relay(pb.WatchOpen(request=b"y"), lambda ev, initial: relayed.append((ev, initial)) or True, ended.append)
    await until(lambda: ended)
    assert [i for _, i in relayed] == [True] * n + [False] * 3 and ended == [None]


async def test_watch_batches_hands_over_everything_received():
    got: list[list[bytes]] = []

    async def start(wid, raw, sink):
        for i in range(3):
            sink.send(wid, b"e%d" % i)
        await until(lambda: got, what="the first batch handed over")
        sink.send(wid, b"e3")

    client = await _client_and_server(start)
    async for batch in client.watch_batches(pb.WatchOpen(request=b"x")):
        got.append(batch)
    assert got == [[b"e0", b"e1", b"e2"], [b"e3"]]
