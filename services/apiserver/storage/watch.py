"""Client watches fed by the watch cache (kube's Cacher.Watch and cacheWatcher.processInterval).

One loop serves every watch, whether it is a Storage.Watch server stream of its own or one of the
watches of a multiplexed Watches stream: after the initial events, the live events, and a bookmark
whenever the watch allows them and its interval passes. On a Watch stream the live events are
taken from the cache watcher's buffer by the loop; on a Watches stream they are handed to the
stream's sink by the cache as it applies them (no task switch per event), and the loop only adds
the initial events and the bookmarks.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable

from apiary_pb import envelope_pb2 as pb
from apiary_pb import storage_pb2 as spb
from services.common.errors import Gone, Timeout
from services.common.selectors import SelectionPredicate

from . import metrics
from .cache_watcher import CacheWatcher
from .cacher import Cacher, Cachers
from .etcd import Etcd
from .etcd3 import Store, parse_rv, storage_key
from .keys import resource_prefix
from .watch_cache import ADDED, BOOKMARK, ERROR
from .wire import watch_event

INITIAL_EVENTS_END = "k8s.io/initial-events-end"
# How long a read or a watch from "" waits for the cache to reach etcd's revision (kube 1.31's
# consistent reads from cache) before it is served from etcd instead.
CONSISTENT_READ_WAIT = 3.0

# What a watch starts from: its cache, its cache watcher, and the objects to send first.
Begun = tuple[Cacher, CacheWatcher, list[pb.Object] | list[bytes]]


BOOKMARK_BEFORE_DEADLINE = 2.0


def bookmark(rv: int, initial_events_end: bool = False) -> pb.WatchEvent:
    ev = pb.WatchEvent(type=BOOKMARK)
    ev.object.metadata.resource_version = str(rv)
    if initial_events_end:
        ev.object.metadata.annotations[INITIAL_EVENTS_END] = "true"
    return ev


async def caught_up(etcd: Etcd, cacher: Cacher, prefix: str) -> bool:
    """Whether the cache under prefix reached etcd's current revision within CONSISTENT_READ_WAIT."""
    try:
        await cacher.wait_fresh(prefix, await etcd.current_revision(cacher.resource), CONSISTENT_READ_WAIT)
    except Timeout:
        return False
    return True


class Watches:
    """Starts client watches on the caches and runs each one (live(), below); clock times the
    bookmarks."""

    def __init__(self, etcd: Etcd, cachers: Cachers, store: Store, bookmark_interval: float = 60.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.etcd = etcd
        self.cachers = cachers
        self.store = store
        self.bookmark_interval = bookmark_interval
        self.clock = clock

    async def begin(self, request: spb.WatchRequest) -> Begun | pb.WatchEvent:
        """A registered cache watcher and the initial objects to send first, or the ERROR event
        (410 too old resource version) to send instead."""
        prefix = request.prefix
        storage_key(prefix)
        pred = SelectionPredicate.parse(request.label_selector, request.field_selector)
        rv = parse_rv(request.resource_version) if request.resource_version else None
        cacher = await self.cachers.get(resource_prefix(prefix), at_revision=rv or 0)
        initial: list[pb.Object] | list[bytes] = []
        if rv is None and await caught_up(self.etcd, cacher, prefix):
            rv = 0  # the cache under prefix is the current state: start from its snapshot (no await between)
        if rv is None:
            # Start from a fresh list; buffer what the cache sees meanwhile, keep what is newer.
            w = cacher.watch(prefix, pred, cacher.watch_cache.rev)
            try:
                initial, start_rev = await self.store.list_all(prefix, pred, cacher.resource)
            except BaseException:
                cacher.remove(w)
                raise
            if start_rev > w.since:
                w.advance(start_rev)
        elif rv == 0 or request.send_initial_events:
            if rv:
                await cacher.wait_fresh(prefix, rv)
            initial = cacher.watch_cache.snapshot(prefix, pred)
            w = cacher.watch(prefix, pred, cacher.watch_cache.rev)
        else:
            try:
                w = cacher.watch(prefix, pred, rv)
            except Gone as e:
                return pb.WatchEvent(type=ERROR, status=e.to_pb())
        return cacher, w, initial

    def initial(self, request: spb.WatchRequest, begun: Begun) -> list[bytes]:
        """The watch's first serialized WatchEvents: ADDED for each initial object, then the
        bookmark that ends them when the watch asked for initial events and allows bookmarks."""
        cacher, w, objects = begun
        out = [watch_event(ADDED, o) if type(o) is bytes else pb.WatchEvent(type=ADDED, object=o).SerializeToString()
               for o in objects]
        if request.send_initial_events and request.allow_bookmarks:
            out.append(bookmark(w.since, initial_events_end=True).SerializeToString())
        if objects:
            metrics.WATCH_EVENTS.labels(cacher.watch_cache.kind).inc(len(objects))
        return out

    async def live(self, request: spb.WatchRequest, begun: Begun,
                   deliver: Callable[[bytes], bool] | None = None) -> AsyncIterator[bytes]:
        """The watch's serialized WatchEvents after its initial ones, one by one (live_batches)."""
        async for batch in self.live_batches(request, begun, deliver):
            for event in batch:
                yield event

    async def live_batches(self, request: spb.WatchRequest, begun: Begun,
                           deliver: Callable[[bytes], bool] | None = None,
                           min_interval: float = 0.0) -> AsyncIterator[list[bytes]]:
        """The watch's serialized WatchEvents after its initial ones, until the cache ends the
        watch: the loop every client watch runs. Each batch is everything the cache watcher had
        buffered when its consumer was ready for more, so one that falls behind catches up in fewer
        steps. With deliver, the events go to it from the cache instead (CacheWatcher.attach) and
        only bookmarks come from here. The caller removes the watcher from its cache when it is
        done (finally: cacher.remove). After a batch, the next waits min_interval at least: the
        events of that time go together (an event after a quiet spell goes at once)."""
        cacher, w, _ = begun
        if deliver is not None and (sent := w.attach(deliver)):
            metrics.WATCH_EVENTS.labels(cacher.watch_cache.kind).inc(sent)
        interval = self.bookmark_interval
        clock = self.clock
        now = clock()
        # kube's cacheWatcher.nextBookmarkTime: every interval, and once 2 s before the watch's deadline
        before_deadline = now + request.timeout_seconds - BOOKMARK_BEFORE_DEADLINE \
            if request.timeout_seconds else None
        next_bookmark = now + interval
        if before_deadline is not None and before_deadline < next_bookmark:
            next_bookmark = max(before_deadline, now)
        buf = w.buf
        while True:
            if buf:
                batch = [event for _, event in buf]
                buf.clear()
                metrics.child(metrics.WATCH_EVENTS, w.kind).inc(len(batch))
                yield batch
                if min_interval:
                    await asyncio.sleep(min_interval)
                continue
            if w.closed:
                return
            w.wake.clear()
            if not request.allow_bookmarks:
                await w.wake.wait()
                continue
            remaining = next_bookmark - clock()
            if remaining > 0:
                try:
                    await asyncio.wait_for(w.wake.wait(), remaining)
                    continue
                except TimeoutError:
                    pass
            if buf:
                continue
            # Every event up to the cache's revision has been sent or handed over (the buffer is empty).
            if before_deadline is not None and next_bookmark >= before_deadline:
                before_deadline = None  # this is the deadline's one bookmark, even if its timer fired early
            yield [bookmark(max(w.since, cacher.watch_cache.rev)).SerializeToString()]
            now = clock()
            next_bookmark = now + interval
            if before_deadline is not None and now < before_deadline < next_bookmark:
                next_bookmark = before_deadline
