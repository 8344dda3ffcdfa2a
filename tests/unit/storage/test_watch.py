"""The one watch loop (services/apiserver/storage/watch.py) behind both the Watch and the Watches RPCs."""
from __future__ import annotations

import asyncio

from aetcd import rpc

from apiary_pb import envelope_pb2 as pb
from apiary_pb import storage_pb2 as spb
from services.apiserver.storage import codec
from services.apiserver.storage.cacher import Cacher
from services.apiserver.storage.watch import INITIAL_EVENTS_END, Watches
from services.common.selectors import SelectionPredicate

PREFIX = "/registry/pods/"


def obj(name: str) -> pb.Object:
    o = pb.Object(api_version="v1", kind="Pod")
    o.metadata.name, o.metadata.namespace = name, "ns"
    return o


def put(rev: int, name: str) -> rpc.WatchResponse:
    kv = rpc.KeyValue(key=f"{PREFIX}ns/{name}".encode(), value=codec.encode(obj(name)), mod_revision=rev)
    return rpc.WatchResponse(header=rpc.ResponseHeader(revision=rev), events=[rpc.Event(type=rpc.Event.PUT, kv=kv)])


def cache() -> Cacher:
    c = Cacher(etcd=None, prefix=PREFIX)  # type: ignore[arg-type]
    c.watch_cache.rev = c.watch_cache.complete_since = 10
    return c


def decoded(raw: bytes) -> tuple[str, str, str]:
    ev = pb.WatchEvent.FromString(raw)
    return ev.type, ev.object.metadata.name, ev.object.metadata.resource_version



async def ends_when_closed(w, waiting) -> None:
    """The watch's pending next event ends the loop once the watch is closed, yielding nothing."""
    w.close()
    try:
        await waiting
        raise AssertionError("the loop yielded after the watch was closed")
    except StopAsyncIteration:
        pass

async def test_initial_events_then_live_events_then_bookmarks() -> None:
    c = cache()
    c._apply(put(11, "a"))
    w = c.watch(PREFIX, SelectionPredicate(), c.watch_cache.rev)
    watches = Watches(None, None, None, bookmark_interval=0.01)  # type: ignore[arg-type]
    request = spb.WatchRequest(prefix=PREFIX, send_initial_events=True, allow_bookmarks=True)
    begun = (c, w, c.watch_cache.snapshot(PREFIX, SelectionPredicate()))
    first, end = watches.initial(request, begun)
    assert decoded(first) == ("ADDED", "a", "11")
    assert pb.WatchEvent.FromString(end).object.metadata.annotations[INITIAL_EVENTS_END] == "true"
    events = watches.live(request, begun)
    c._apply(put(12, "b"))
    assert decoded(await anext(events)) == ("ADDED", "b", "12")
    mark = await anext(events)  # nothing more happens: a bookmark at the cache's revision
    assert decoded(mark) == ("BOOKMARK", "", "12")
    w.close()
    assert [e async for e in events] == []


async def test_with_deliver_live_events_bypass_the_loop() -> None:
    c = cache()
    w = c.watch(PREFIX, SelectionPredicate(), c.watch_cache.rev)
    c._apply(put(11, "a"))  # buffered before the watch is attached: handed over by attach
    delivered: list[bytes] = []
    watches = Watches(None, None, None, bookmark_interval=3600)  # type: ignore[arg-type]
    events = watches.live(spb.WatchRequest(prefix=PREFIX, allow_bookmarks=True), (c, w, []),
                          lambda e: delivered.append(e) is None)
    waiting = asyncio.ensure_future(anext(events))
    await asyncio.sleep(0)
    c._apply(put(12, "b"))  # delivered by the cache's dispatch, not through the loop
    assert [decoded(e) for e in delivered] == [("ADDED", "a", "11"), ("ADDED", "b", "12")]
    assert not waiting.done()
    await ends_when_closed(w, waiting)


async def test_a_watch_without_bookmarks_gets_none() -> None:
    c = cache()
    w = c.watch(PREFIX, SelectionPredicate(), c.watch_cache.rev)
    watches = Watches(None, None, None, bookmark_interval=0.001)  # type: ignore[arg-type]
    request = spb.WatchRequest(prefix=PREFIX)
    assert [decoded(e)[:2] for e in watches.initial(request, (c, w, [obj("x")]))] == [("ADDED", "x")]
    events = watches.live(request, (c, w, []))
    waiting = asyncio.ensure_future(anext(events))
    await asyncio.sleep(0.05)  # not a synchronisation: fifty bookmark intervals pass, and no bookmark comes
    assert not waiting.done()
    c._apply(put(11, "a"))
    assert decoded(await waiting) == ("ADDED", "a", "11")
    w.close()


async def test_a_bookmark_comes_two_seconds_before_the_deadline() -> None:
    """kube's cacheWatcher.nextBookmarkTime: whatever the interval, a watch that allows bookmarks gets
    one 2 s before its timeout, so the client resumes from a fresh resourceVersion."""
    c = cache()
    w = c.watch(PREFIX, SelectionPredicate(), c.watch_cache.rev)
    watches = Watches(None, None, None, bookmark_interval=3600)  # type: ignore[arg-type]
    request = spb.WatchRequest(prefix=PREFIX, allow_bookmarks=True, timeout_seconds=2.01)
    events = watches.live(request, (c, w, []))
    c._apply(put(11, "a"))
    assert decoded(await anext(events)) == ("ADDED", "a", "11")
    mark = await asyncio.wait_for(anext(events), 60)  # an hour's interval: only the deadline brings it
    assert decoded(mark) == ("BOOKMARK", "", "11")
    w.close()
    assert [e async for e in events] == []


async def test_one_deadline_bookmark_when_its_timer_fires_early() -> None:
    """A loop's timer may fire before time.monotonic() reaches its time (uvloop's cached clock under
    load): the deadline still brings one bookmark, not a second one a moment later (the CI failure
    of stop 18)."""
    import itertools
    clock = itertools.chain([100.0, 100.0, 100.009], itertools.repeat(100.009))
    c = cache()
    w = c.watch(PREFIX, SelectionPredicate(), c.watch_cache.rev)
    watches = Watches(None, None, None, bookmark_interval=3600,  # type: ignore[arg-type]
                      clock=lambda: next(clock))
    events = watches.live(spb.WatchRequest(prefix=PREFIX, allow_bookmarks=True, timeout_seconds=2.01), (c, w, []))
    assert decoded(await asyncio.wait_for(anext(events), 60))[0] == "BOOKMARK"
    waiting = asyncio.ensure_future(anext(events))
    await asyncio.sleep(0.05)  # not a synchronisation: fifty times the early-fire gap pass, and no bookmark comes
    assert not waiting.done()
    await ends_when_closed(w, waiting)


async def test_batches_hold_what_was_queued_and_wait_min_interval_between() -> None:
    """A stream of its own (Storage.Watch) takes everything queued as one message; after one, the
    events of the next min_interval go together."""
    c = cache()
    w = c.watch(PREFIX, SelectionPredicate(), c.watch_cache.rev)
    watches = Watches(None, None, None)  # type: ignore[arg-type]
    batches = watches.live_batches(spb.WatchRequest(prefix=PREFIX), (c, w, []), min_interval=0.05)
    c._apply(put(11, "a"))
    c._apply(put(12, "b"))
    assert [decoded(e)[1] for e in await anext(batches)] == ["a", "b"]
    later = asyncio.ensure_future(anext(batches))
    c._apply(put(13, "c"))
    await asyncio.sleep(0)
    c._apply(put(14, "d"))  # within the interval: in the same batch as c
    assert [decoded(e)[1] for e in await later] == ["c", "d"]
    await ends_when_closed(w, anext(batches))


def test_watch_events_messages_split_by_size() -> None:
    from services.storage.server import WATCH_MESSAGE_BYTES, watch_events
    events = [b"x" * (WATCH_MESSAGE_BYTES // 2 + 1)] * 3 + [b"y"]
    messages = [spb.WatchEvents.FromString(m).events for m in watch_events(events)]
    assert [len(m) for m in messages] == [2, 2] and [e for m in messages for e in m] == events
