"""The watch cache: one etcd watch per resource prefix, its current state, a window of recent
events, and the fan-out to every client watch (kube's Cacher, watchCache and cacheWatcher).

Everything that changes the cache runs synchronously on the event loop, so a client watch can
take a snapshot or a slice of history and register itself in one step without missing an event.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Iterable

from apiary_pb import envelope_pb2 as pb
from services.common.errors import APIError, Gone, Timeout
from services.common.selectors import SelectionPredicate

from . import metrics
from .codec import STALE_FIELD, Codec
from .etcd import Compacted, Etcd, FutureRevision
from .keys import resource_label

log = logging.getLogger(__name__)

PUT, DELETE = 0, 1
ADDED, MODIFIED, DELETED, BOOKMARK, ERROR = "ADDED", "MODIFIED", "DELETED", "BOOKMARK", "ERROR"


class CacheEvent:
    """One change seen by the cache, with the state before it (for selector transitions)."""

    __slots__ = ("type", "key", "rev", "obj", "prev", "time", "_out")

    def __init__(self, type_: str, key: str, rev: int, obj: pb.Object, prev: pb.Object | None) -> None:
        self.type, self.key, self.rev, self.obj, self.prev = type_, key, rev, obj, prev
        self.time = time.monotonic()
        self._out: dict[str, pb.WatchEvent] = {}

    def watch_event(self, type_: str) -> pb.WatchEvent:
        """The event as clients see it; built once and shared by every watcher."""
        ev = self._out.get(type_)
        if ev is None:
            if type_ == DELETED and self.type != DELETED:
                # An object leaving the selection: its previous state at this event's revision.
                assert self.prev is not None
                ev = pb.WatchEvent(type=DELETED, object=self.prev)
                ev.object.metadata.resource_version = str(self.rev)
            else:
                ev = pb.WatchEvent(type=type_, object=self.obj)
            self._out[type_] = ev
        return ev


def too_old(rv: int, oldest: int) -> Gone:
    return Gone(f"too old resource version: {rv} ({oldest})", reason="Expired")


class CacheWatcher:
    """One client watch: filters the cache's events through its key range and selectors."""

    def __init__(self, prefix: str, pred: SelectionPredicate, since: int, capacity: int) -> None:
        self.prefix = prefix
        self.exact = not prefix.endswith("/")
        self.pred = pred
        self.since = since
        self.capacity = capacity
        self.buf: deque[tuple[int, pb.WatchEvent]] = deque()
        self.wake = asyncio.Event()
        self.closed = False
        self.overflowed = False

    def wants(self, key: str) -> bool:
        return key == self.prefix if self.exact else key.startswith(self.prefix)

    def matches(self, key: str, obj: pb.Object) -> bool:
        return self.wants(key) and (self.pred.empty or self.pred.matches(obj))

    def push(self, ev: CacheEvent, replay: bool = False) -> None:
        if ev.rev <= self.since or self.closed or not self.wants(ev.key):
            return
        pred = self.pred
        if pred.empty:
            out = ev.type
        else:
            cur = ev.type != DELETED and pred.matches(ev.obj)
            old = ev.prev is not None and pred.matches(ev.prev)
            if cur:
                out = MODIFIED if old else ADDED
            elif old:
                out = DELETED
            else:
                return
        if not replay and len(self.buf) >= self.capacity:
            # A client that cannot keep up is cut off, as kube does; it resumes from its last rv.
            self.overflowed = True
            self.close()
            return
        self.buf.append((ev.rev, ev.watch_event(out)))
        self.wake.set()

    def advance(self, rev: int) -> None:
        """Start after rev: drop what was buffered at or before it (used after a fresh list)."""
        self.since = rev
        while self.buf and self.buf[0][0] <= rev:
            self.buf.popleft()

    def close(self) -> None:
        self.closed = True
        self.wake.set()


class Cacher:
    """The cache of one resource prefix, fed by a single etcd watch."""

    def __init__(
        self,
        etcd: Etcd,
        prefix: str,
        *,
        history_seconds: float = 75.0,
        min_history: int = 100,
        max_history: int = 102_400,
        watcher_capacity: int = 10_000,
        codec: Codec | None = None,
    ) -> None:
        self.etcd = etcd
        self.codec = codec or Codec()
        self.prefix = prefix
        self.resource = resource_label(prefix)
        self.history_seconds, self.min_history, self.max_history = history_seconds, min_history, max_history
        self.watcher_capacity = watcher_capacity
        self.store: dict[str, pb.Object] = {}
        self.stale: set[str] = set()  # keys whose values need re-encryption (codec.STALE_FIELD)
        self.broken: dict[str, APIError] = {}  # undecodable values: reads of them are 500s, never 404s
        self.history: deque[CacheEvent] = deque()
        self.rev = 0  # every change up to this revision has been applied
        self.complete_since = 0  # every event after this revision is in history
        self.watchers: set[CacheWatcher] = set()
        self._rev_changed = asyncio.Event()
        self._progress = asyncio.Event()  # set: ask etcd for a progress notification
        self._task: asyncio.Task[None] | None = None

    async def start(self, at_revision: int = 0) -> None:
        """Fill the cache (at at_revision when etcd still has it, so a watch from it can be served)."""
        await self._list(at_revision)
        self._task = asyncio.create_task(self._run(), name=f"cacher {self.prefix}")

    async def stop(self) -> None:
        if self._task:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
        self._terminate_all()

    async def _list(self, at_revision: int) -> None:
        key = self.prefix.encode()
        resp, rev = None, at_revision
        if at_revision:
            try:
                resp = await self.etcd.range_prefix(key, revision=at_revision, resource=self.resource)
            except (Compacted, FutureRevision):
                resp = None
        if resp is None:
            resp = await self.etcd.range_prefix(key, resource=self.resource)
            rev = resp.header.revision
        store: dict[str, pb.Object] = {}
        stale: set[str] = set()
        broken: dict[str, APIError] = {}
        codec = self.codec
        encrypted = codec.encryption is not None
        for kv in resp.kvs:
            try:
                if encrypted:
                    await codec.prepare(kv.value, kv.key)
                    if codec.is_stale(kv.key, kv.value):
                        stale.add(kv.key.decode())
                store[kv.key.decode()] = codec.decode(kv.value, kv.mod_revision, kv.key)
            except APIError as e:
                log.error("watch cache %s: skipping %s", self.prefix, e.message)
                broken[kv.key.decode()] = e
        self.store, self.stale, self.broken = store, stale, broken
        self.history.clear()
        self.rev = self.complete_since = rev
        self._bump()
        metrics.STORAGE_OBJECTS.labels(self.resource).set(len(store))

    async def _run(self) -> None:
        backoff, relist = 0.1, False
        while True:
            try:
                if relist:
                    await self._list(0)
                    relist = False
                    # Events between the old and the new state are lost: watchers must start over.
                    self._terminate_all()
                async for resp in self.etcd.watch(self.prefix.encode(), self.rev + 1, self._progress):
                    backoff = 0.1
                    if self.codec.encryption is not None:
                        for e in resp.events:
                            await self.codec.prepare(e.kv.value, e.kv.key)
                    self._apply(resp)
            except asyncio.CancelledError:
                raise
            except Compacted:
                log.warning("watch cache %s: revision %d compacted, relisting", self.prefix, self.rev + 1)
                relist = True
            except Exception as e:  # noqa: BLE001 - keep the cache alive; resume where it stopped
                log.warning(
                    "watch cache %s: etcd watch broke (%s); resuming from %d in %.1fs",
                    self.prefix,
                    e,
                    self.rev + 1,
                    backoff,
                )
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 5.0)

    def _bump(self) -> None:
        self._rev_changed.set()
        self._rev_changed = asyncio.Event()

    def _apply(self, resp) -> None:  # resp: etcd WatchResponse
        if not resp.events:
            # A progress notification: nothing up to the header's revision is still on its way.
            if resp.header.revision > self.rev:
                self.rev = resp.header.revision
                self._bump()
            return
        for e in resp.events:
            key = e.kv.key.decode()
            rev = e.kv.mod_revision
            if e.type == PUT:
                try:
                    obj = self.codec.decode(e.kv.value, rev, e.kv.key)
                except APIError as err:
                    log.error("watch cache %s: skipping event: %s", self.prefix, err.message)
                    self.broken[key] = err
                    self.store.pop(key, None)
                    continue
                self.broken.pop(key, None)
                prev = self.store.get(key)
                ev = CacheEvent(MODIFIED if prev is not None else ADDED, key, rev, obj, prev)
                self.store[key] = obj
                if self.codec.encryption is not None:
                    if self.codec.is_stale(key, e.kv.value):
                        self.stale.add(key)
                    else:
                        self.stale.discard(key)
            else:
                prev = self.store.pop(key, None)
                self.stale.discard(key)
                self.broken.pop(key, None)
                if prev is None:
                    if not e.prev_kv.key:
                        continue
                    try:
                        prev = self.codec.decode(e.prev_kv.value, e.prev_kv.mod_revision, key)
                    except Exception:  # noqa: BLE001 - an undecodable old state: nothing to report
                        continue
                last = pb.Object()
                last.CopyFrom(prev)
                last.metadata.resource_version = str(rev)
                ev = CacheEvent(DELETED, key, rev, last, prev)
            self.rev = max(self.rev, rev)
            self.history.append(ev)
            metrics.WATCH_CACHE_EVENTS.labels(self.resource).inc()
            for w in tuple(self.watchers):
                w.push(ev)
                if w.overflowed:
                    metrics.TERMINATED_WATCHERS.labels(self.resource).inc()
                    self.remove(w)
        self._evict()
        self._bump()
        metrics.STORAGE_OBJECTS.labels(self.resource).set(len(self.store))

    def _evict(self) -> None:
        h, now = self.history, time.monotonic()
        while len(h) > self.max_history or (
            len(h) > self.min_history and now - h[0].time > self.history_seconds
        ):
            self.complete_since = h.popleft().rev

    def _terminate_all(self) -> None:
        for w in tuple(self.watchers):
            self.remove(w)
            w.close()

    # Client side -------------------------------------------------------------------------------

    def get(self, key: str) -> pb.Object | None:
        obj = self.store.get(key)
        if obj is None and key in self.broken:
            raise self.broken[key]
        if obj is not None and key in self.stale:
            marked = pb.Object()
            marked.CopyFrom(obj)
            marked.fields[STALE_FIELD] = "true"
            return marked
        return obj

    def snapshot(self, prefix: str, pred: SelectionPredicate) -> list[pb.Object]:
        """The current objects under prefix (or the one key) that match, sorted by key."""
        if self.broken:
            for k, err in self.broken.items():
                if k == prefix or (prefix.endswith("/") and k.startswith(prefix)):
                    raise err
        if not prefix.endswith("/"):
            obj = self.store.get(prefix)
            return [obj] if obj is not None and (pred.empty or pred.matches(obj)) else []
        items = [
            (k, o) for k, o in self.store.items() if k.startswith(prefix) and (pred.empty or pred.matches(o))
        ]
        items.sort(key=lambda kv: kv[0])
        return [o for _, o in items]

    def watch(self, prefix: str, pred: SelectionPredicate, since: int) -> CacheWatcher:
        """A watcher receiving every matching event after since, starting with those in history."""
        if since < self.complete_since:
            raise too_old(since, self.complete_since)
        w = CacheWatcher(prefix, pred, since, self.watcher_capacity)
        for ev in self._events_after(since):
            w.push(ev, replay=True)
        self.watchers.add(w)
        metrics.REGISTERED_WATCHERS.labels(self.resource).set(len(self.watchers))
        return w

    def _events_after(self, rev: int) -> Iterable[CacheEvent]:
        h = self.history
        n = 0
        for ev in reversed(h):
            if ev.rev <= rev:
                break
            n += 1
        return [h[i] for i in range(len(h) - n, len(h))] if n else []

    def remove(self, w: CacheWatcher) -> None:
        self.watchers.discard(w)
        metrics.REGISTERED_WATCHERS.labels(self.resource).set(len(self.watchers))

    async def wait_for(self, rev: int, timeout: float = 3.0) -> None:
        """Wait until the cache has seen rev, as kube's consistent reads from cache do.

        When it is behind, etcd is asked for a progress notification: the revision may have
        moved through writes to other resources, which this cache's watch never sees.
        """
        deadline = time.monotonic() + timeout
        while self.rev < rev:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise too_large(rev, self.rev)
            self._progress.set()
            try:
                await asyncio.wait_for(self._rev_changed.wait(), min(remaining, 0.25))
            except TimeoutError:
                continue


def too_large(rv: int, current: int) -> Timeout:
    return Timeout(
        f"Too large resource version: {rv}, current: {current}",
        details={
            "causes": [{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}],
            "retryAfterSeconds": 1,
        },
        headers={"Retry-After": "1"},
    )


class Cachers:
    """The watch caches, one per resource prefix, started by the first watch on that resource."""

    def __init__(self, etcd: Etcd, codec: Codec | None = None, **options: float) -> None:
        self.etcd = etcd
        self.codec = codec or Codec()
        self.options = options
        self._cachers: dict[str, Cacher] = {}
        self._locks: dict[str, asyncio.Lock] = {}

    def running(self, prefix: str) -> Cacher | None:
        return self._cachers.get(prefix)

    async def get(self, prefix: str, at_revision: int = 0) -> Cacher:
        c = self._cachers.get(prefix)
        if c is not None:
            return c
        lock = self._locks.setdefault(prefix, asyncio.Lock())
        async with lock:
            c = self._cachers.get(prefix)
            if c is None:
                c = Cacher(self.etcd, prefix, codec=self.codec, **self.options)  # type: ignore[arg-type]
                await c.start(at_revision)
                self._cachers[prefix] = c
        return c

    async def stop(self) -> None:
        for c in list(self._cachers.values()):
            await c.stop()
        self._cachers.clear()
