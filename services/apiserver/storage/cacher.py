"""The watch cache: one etcd watch per resource prefix, its current state, a window of recent
events, and the fan-out to every client watch (kube's Cacher, watchCache and cacheWatcher).

Everything that changes the cache runs synchronously on the event loop, so a client watch can
take a snapshot or a slice of history and register itself in one step without missing an event.

Representation (memory and CPU): each cached object is kept only as its serialized apiary.Object
bytes, resourceVersion included, so that Get, List and Watch answers are spliced from those bytes
without decoding or encoding anything (see wire.py). A value is decoded once, when it enters the
cache, to check it and to extract what selectors need: its labels and selectable fields are kept
(in `selection`) only when the key does not already tell them, i.e. when the object has labels or
fields beyond metadata.name/metadata.namespace. Watch events are serialized once per event and
output type, and the same bytes go to every watcher.

Lists answered as JSON (ListRequest.json) use each object's JSON as clients see it, rendered once
and kept beside its bytes until the object changes (kube's cachingObject keeps an object's
serializations the same way), within a byte budget shared by every cache of the process
(JSONBudget): a LIST from the cache is then one join, with no per-object decoding.
"""

from __future__ import annotations

import asyncio
import logging
import time
from bisect import bisect_left, insort
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable, Iterator, Mapping

from apiary_pb import envelope_pb2 as pb
from services.common import envelope
from services.common.background import cancel_and_wait
from services.common.backoff import Backoff
from services.common.errors import APIError, Gone, Timeout
from services.common.selectors import SelectionPredicate, object_fields

from . import metrics
from .codec import Codec
from .etcd import Compacted, Etcd, FutureRevision
from .keys import range_end, resource_label
from .wire import STALE_SUFFIX, watch_event

log = logging.getLogger(__name__)

PUT, DELETE = 0, 1
ADDED, MODIFIED, DELETED, BOOKMARK, ERROR = "ADDED", "MODIFIED", "DELETED", "BOOKMARK", "ERROR"

# (labels, selectable fields or None when the key tells them) of an object; None: the key says it all.
Selection = tuple[Mapping[str, str], Mapping[str, str] | None]
_NO_LABELS: Mapping[str, str] = {}


def key_fields(key: str) -> dict[str, str]:
    """metadata.name and metadata.namespace as the key spells them (keys.py's layout:
    /registry/[<group>/]<resource>/[<namespace>/]<name>, a group recognised by its dot)."""
    parts = key.split("/")
    depth = 4 if len(parts) > 2 and "." in parts[2] else 3  # parts: "", "registry", [group,] resource
    return {"metadata.name": parts[-1], "metadata.namespace": parts[-2] if len(parts) > depth + 1 else ""}


def selection_of(key: str, obj: pb.Object) -> Selection | None:
    """What a selector needs of obj, or None when its key says it all (no labels, no other fields)."""
    labels = obj.metadata.labels
    fields = object_fields(obj)
    derived = key_fields(key)
    # (item by item: copying a protobuf map into a dict iterates it in Python)
    trivial = (len(fields) == 2 and fields.get("metadata.name") == derived["metadata.name"]
               and fields.get("metadata.namespace") == derived["metadata.namespace"])
    if not labels and trivial:
        return None
    return (dict(labels) if labels else _NO_LABELS), (None if trivial else dict(fields))


def matches(pred: SelectionPredicate, key: str, sel: Selection | None) -> bool:
    """pred against a cached object, given its key and its selection entry."""
    if sel is None:
        if not pred.label.empty and not pred.label.matches(_NO_LABELS):
            return False
        return pred.field.empty or pred.field.matches(key_fields(key))
    labels, fields = sel
    if not pred.label.empty and not pred.label.matches(labels):
        return False
    return pred.field.empty or pred.field.matches(key_fields(key) if fields is None else fields)


class CacheEvent:
    """One change seen by the cache, with the state before it (for selector transitions).

    data is the object as the event reports it (for DELETED: its last state at the event's
    revision); prev the state before, for an object leaving a watcher's selection."""

    __slots__ = ("type", "key", "rev", "data", "sel", "prev", "prev_sel", "kind", "time", "_out")

    def __init__(self, type_: str, key: str, rev: int, data: bytes, sel: Selection | None,
                 prev: bytes | None, prev_sel: Selection | None, kind: str) -> None:
        self.type, self.key, self.rev, self.data, self.sel = type_, key, rev, data, sel
        self.prev, self.prev_sel, self.kind = prev, prev_sel, kind
        self.time = time.monotonic()
        self._out: dict[str, bytes] = {}

    def watch_event(self, type_: str) -> bytes:
        """The serialized WatchEvent as clients see it; built once and shared by every watcher."""
        out = self._out.get(type_)
        if out is None:
            if type_ == DELETED and self.type != DELETED:
                # An object leaving the selection: its previous state at this event's revision.
                assert self.prev is not None
                out = watch_event(DELETED, with_resource_version(self.prev, self.rev))
            else:
                out = watch_event(type_, self.data)
            self._out[type_] = out
        return out


def with_resource_version(data: bytes, rev: int) -> bytes:
    obj = pb.Object.FromString(data)
    obj.metadata.resource_version = str(rev)
    return obj.SerializeToString()


def fill_kind(obj: pb.Object, kind: str, api_version: str) -> bool:
    """Give an object stored without kind and apiVersion the request's; whether it had to."""
    if obj.kind:
        return False
    obj.kind, obj.api_version = kind, api_version
    return True


def too_old(rv: int, oldest: int) -> Gone:
    return Gone(f"too old resource version: {rv} ({oldest})", reason="Expired")


class CacheWatcher:
    """One client watch: filters the cache's events through its key range and selectors.

    buf holds (revision, serialized WatchEvent) until the watch's stream takes them; once `attach`ed
    to a deliver function (a multiplexed stream's Sink.send), events go straight to it instead."""

    def __init__(self, prefix: str, pred: SelectionPredicate, since: int, capacity: int) -> None:
        self.prefix = prefix
        self.exact = not prefix.endswith("/")
        self.pred = pred
        self.since = since
        self.capacity = capacity
        self.buf: deque[tuple[int, bytes]] = deque()
        self.wake = asyncio.Event()
        self.closed = False
        self.overflowed = False
        self.kind = ""  # of the last event pushed (metrics)
        self.deliver: Callable[[bytes], bool] | None = None

    def wants(self, key: str) -> bool:
        return key == self.prefix if self.exact else key.startswith(self.prefix)

    def push(self, ev: CacheEvent, replay: bool = False) -> bool:
        """Queue (or deliver) ev if it concerns this watch; True when it was delivered straight away."""
        if ev.rev <= self.since or self.closed or not self.wants(ev.key):
            return False
        pred = self.pred
        if pred.empty:
            out = ev.type
        else:
            cur = ev.type != DELETED and matches(pred, ev.key, ev.sel)
            old = ev.prev is not None and matches(pred, ev.key, ev.prev_sel)
            if cur:
                out = MODIFIED if old else ADDED
            elif old:
                out = DELETED
            else:
                return False
        self.kind = ev.kind
        deliver = self.deliver
        if deliver is not None:
            if deliver(ev.watch_event(out)):
                return True
            self.overflowed = True  # its stream cannot keep up: cut off, as below
            self.close()
            return False
        if not replay and len(self.buf) >= self.capacity:
            # A client that cannot keep up is cut off, as kube does; it resumes from its last rv.
            self.overflowed = True
            self.close()
            return False
        self.buf.append((ev.rev, ev.watch_event(out)))
        self.wake.set()
        return False

    def attach(self, deliver: Callable[[bytes], bool]) -> int:
        """From now on, hand events to deliver as they happen (after what is buffered); the number
        of buffered events handed over. A refused event cuts the watch off, as in push."""
        n = 0
        while self.buf:
            if not deliver(self.buf.popleft()[1]):
                self.overflowed = True
                self.close()
                return n
            n += 1
        self.deliver = deliver
        return n

    def advance(self, rev: int) -> None:
        """Start after rev: drop what was buffered at or before it (used after a fresh list)."""
        self.since = rev
        while self.buf and self.buf[0][0] <= rev:
            self.buf.popleft()

    def close(self) -> None:
        self.closed = True
        self.wake.set()


class JSONBudget:
    """The bytes every cache of a process may spend on objects' rendered JSON (entries count their
    JSON, the key and a fixed overhead; the object's bytes are the cache's own)."""

    ENTRY_OVERHEAD = 100  # the dict slot and the JSON bytes object's header

    def __init__(self, limit: int = 128 << 20) -> None:
        self.limit = limit
        self.used = 0


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
        json_budget: JSONBudget | None = None,
    ) -> None:
        self.etcd = etcd
        self.codec = codec or Codec()
        self.prefix = prefix
        self.resource = resource_label(prefix)
        self.history_seconds, self.min_history, self.max_history = history_seconds, min_history, max_history
        self.watcher_capacity = watcher_capacity
        # key -> the serialized apiary.Object with its resourceVersion (see the module docstring)
        self.store: dict[str, bytes] = {}
        # key -> labels and fields, only for objects whose key does not tell them (selection_of)
        self.selection: dict[str, Selection] = {}
        # key -> the JSON of store[key]; an entry goes as soon as the object changes (_forget_json),
        # the oldest first when the budget is spent: an OrderedDict, whose oldest entry is found at
        # once (a dict's next(iter()) walks the slots its evictions emptied: a LIST larger than the
        # budget spent ~0.35 s of the event loop per 20,000 objects on that, growing with each)
        self.json: OrderedDict[str, bytes] = OrderedDict()
        self.json_budget = json_budget or JSONBudget()
        self._sorted: list[str] | None = None  # the store's keys in order, kept while it is in use
        self.kind = ""  # the kind of the objects last seen (metrics)
        self.stale: set[str] = set()  # keys whose values need re-encryption (codec.STALE_FIELD)
        self.broken: dict[str, APIError] = {}  # undecodable values: reads of them are 500s, never 404s
        self.history: deque[CacheEvent] = deque()
        self.rev = 0  # every change up to this revision has been applied
        self.complete_since = 0  # every event after this revision is in history
        self.watchers: set[CacheWatcher] = set()
        self._rev_changed = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        # this resource's metric series, looked up once (a labels() call costs as much as the rest
        # of a small event's bookkeeping)
        self._events_total = metrics.WATCH_CACHE_EVENTS.labels(self.resource)
        self._objects = metrics.STORAGE_OBJECTS.labels(self.resource)
        self._capacity = metrics.WATCH_CACHE_CAPACITY.labels(self.resource)
        self._rv = metrics.WATCH_CACHE_RV.labels(self.resource)

    async def start(self, at_revision: int = 0) -> None:
        """Fill the cache (at at_revision when etcd still has it, so a watch from it can be served)."""
        await self._list(at_revision)
        self._task = asyncio.create_task(self._run(), name=f"cacher {self.prefix}")

    async def stop(self) -> None:
        await cancel_and_wait(self._task)
        self._terminate_all()
        self._clear_json()

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
        store: dict[str, bytes] = {}
        selection: dict[str, Selection] = {}
        stale: set[str] = set()
        broken: dict[str, APIError] = {}
        codec = self.codec
        encrypted = codec.encryption is not None
        kind = self.kind
        for kv in resp.kvs:
            key = kv.key.decode()
            try:
                if encrypted:
                    await codec.prepare(kv.value, kv.key)
                    if codec.is_stale(kv.key, kv.value):
                        stale.add(key)
                obj = codec.decode(kv.value, kv.mod_revision, kv.key)
            except APIError as e:
                log.error("watch cache %s: skipping %s", self.prefix, e.message)
                broken[key] = e
                continue
            store[key] = obj.SerializeToString()
            sel = selection_of(key, obj)
            if sel is not None:
                selection[key] = sel
            kind = obj.kind
        del resp
        self.store, self.selection, self.stale, self.broken = store, selection, stale, broken
        self._clear_json()
        self._sorted = None
        self.kind = kind
        self.history.clear()
        self.rev = self.complete_since = rev
        self._bump()
        self._objects.set(len(store))
        self._capacity.set(0)
        self._rv.set(rev)

    async def _run(self) -> None:
        backoff, relist, failures = Backoff(), False, 0
        while True:
            try:
                if relist:
                    await self._list(0)
                    relist = False
                    # Events between the old and the new state are lost: watchers must start over.
                    self._terminate_all()
                async for resp in self.etcd.watch(self.prefix.encode(), self.rev + 1):
                    if failures:
                        log.info("watch cache %s: etcd watch resumed after %d tries", self.prefix, failures)
                        failures = 0
                    backoff.reset()
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
                if not failures:  # once per outage, not at every try
                    log.warning("watch cache %s: etcd watch broke (%s); resuming from %d",
                                self.prefix, e, self.rev + 1)
                failures += 1
                await asyncio.sleep(backoff.delay())

    def _bump(self) -> None:
        self._rev_changed.set()
        self._rev_changed = asyncio.Event()

    def _apply(self, resp) -> None:  # resp: etcd WatchResponse
        if not resp.events:
            # A progress notification. Not taken as proof that nothing up to its revision is still
            # on its way: before etcd 3.5.8 one can overtake the events it covers (etcd issue
            # 15220), and this etcd is 3.5.1. wait_for checks with etcd instead.
            return
        store, selection = self.store, self.selection
        for e in resp.events:
            key = e.kv.key.decode()
            rev = e.kv.mod_revision
            if e.type == PUT:
                try:
                    obj = self.codec.decode(e.kv.value, rev, e.kv.key)
                except APIError as err:
                    log.error("watch cache %s: skipping event: %s", self.prefix, err.message)
                    self.broken[key] = err
                    self._discard(key)
                    continue
                self.broken.pop(key, None)
                self.kind = obj.kind
                data, sel = obj.SerializeToString(), selection_of(key, obj)
                prev = store.get(key)
                prev_sel = selection.get(key)
                ev = CacheEvent(MODIFIED if prev is not None else ADDED, key, rev, data, sel, prev, prev_sel,
                                obj.kind)
                if prev is None and self._sorted is not None:
                    insort(self._sorted, key)
                elif prev is not None:
                    self._forget_json(key)
                store[key] = data
                if sel is None:
                    if prev_sel is not None:
                        del selection[key]
                else:
                    selection[key] = sel
                if self.codec.encryption is not None:
                    if self.codec.is_stale(key, e.kv.value):
                        self.stale.add(key)
                    else:
                        self.stale.discard(key)
            else:
                prev = store.get(key)
                prev_sel = selection.get(key)
                self._discard(key)
                self.stale.discard(key)
                self.broken.pop(key, None)
                if prev is None:
                    if not e.prev_kv.key:
                        continue
                    try:
                        old = self.codec.decode(e.prev_kv.value, e.prev_kv.mod_revision, key)
                    except Exception:  # noqa: BLE001 - an undecodable old state: nothing to report
                        continue
                    prev, prev_sel = old.SerializeToString(), selection_of(key, old)
                last = pb.Object.FromString(prev)
                last.metadata.resource_version = str(rev)
                ev = CacheEvent(
                    DELETED, key, rev, last.SerializeToString(), prev_sel, prev, prev_sel, last.kind
                )
            self.rev = max(self.rev, rev)
            self.history.append(ev)
            self._events_total.inc()
            delivered = 0
            for w in tuple(self.watchers):
                if w.push(ev):
                    delivered += 1
                elif w.overflowed:
                    metrics.TERMINATED_WATCHERS.labels(self.resource).inc()
                    self.remove(w)
            if delivered:
                metrics.WATCH_EVENTS.labels(ev.kind).inc(delivered)
        self._evict()
        self._bump()
        self._objects.set(len(self.store))
        self._capacity.set(len(self.history))
        self._rv.set(self.rev)

    def _discard(self, key: str) -> None:
        self._forget_json(key)
        if self.store.pop(key, None) is not None and self._sorted is not None:
            i = bisect_left(self._sorted, key)
            if i < len(self._sorted) and self._sorted[i] == key:
                del self._sorted[i]
        self.selection.pop(key, None)

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

    def get(self, key: str) -> bytes | None:
        """The serialized object (with fields[STALE_FIELD] when its value needs re-encryption)."""
        data = self.store.get(key)
        if data is None and key in self.broken:
            raise self.broken[key]
        if data is not None and key in self.stale:
            return data + STALE_SUFFIX
        return data

    def snapshot(self, prefix: str, pred: SelectionPredicate) -> list[bytes]:
        """The current objects (serialized) under prefix (or the one key) that match, sorted by key."""
        store = self.store
        return [store[k] for k in self._matching(prefix, pred)]

    def _matching(self, prefix: str, pred: SelectionPredicate) -> list[str]:
        """The keys of the objects under prefix (or the one key) that match pred, in order."""
        self._check_broken(prefix)
        keys = self._keys(prefix)
        if pred.empty and prefix.endswith("/"):
            return keys
        store, selection = self.store, self.selection
        return [k for k in keys if k in store and (pred.empty or matches(pred, k, selection.get(k)))]

    def _check_broken(self, prefix: str) -> None:
        if self.broken:
            for k, err in self.broken.items():
                if k == prefix or (prefix.endswith("/") and k.startswith(prefix)):
                    raise err

    def _keys(self, prefix: str) -> list[str]:
        """The keys under prefix (ending in "/") in order, or [prefix] for one object's key."""
        if not prefix.endswith("/"):
            return [prefix]
        keys = self._sorted
        if keys is None:
            keys = self._sorted = sorted(self.store)
        # Every key starting with prefix (which ends in "/") sorts in [prefix, prefix[:-1] + "0").
        lo = bisect_left(keys, prefix)
        hi = bisect_left(keys, prefix[:-1] + "0", lo)
        return keys[lo:hi]

    def snapshot_json_items(self, prefix: str, pred: SelectionPredicate, kind: str,
                            api_version: str) -> Iterator[bytes]:
        """snapshot's objects as their JSON, one item each (kind and api_version fill in an object
        stored without them; such JSON is not kept). The snapshot is taken at once (the objects'
        bytes and what is already rendered: references only); the rest is rendered as the items
        are read, so a large list is never rendered whole before it is sent."""
        keys = self._matching(prefix, pred)
        store, get = self.store, self.json.get
        data = [store[k] for k in keys]
        done = [get(k) for k in keys]
        # Scan resistance: a list whose objects outweigh half the budget would only push out what
        # smaller reads keep rendered, and leave the process holding its own renderings after it
        # (a 208 MB LIST kept the whole 128 MiB budget: issue 9's "memory back a minute after").
        keep = sum(map(len, data)) <= self.json_budget.limit // 2

        def items() -> Iterator[bytes]:
            for key, d, js in zip(keys, data, done):
                yield js if js is not None else self._render(key, d, kind, api_version, keep)
        return items()

    def _render(self, key: str, data: bytes, kind: str, api_version: str, keep: bool = True) -> bytes:
        obj = pb.Object.FromString(data)
        if fill_kind(obj, kind, api_version):
            return envelope.to_json(obj)  # not kept: it depends on the request
        js = envelope.to_json(obj)
        if not keep or self.store.get(key) is not data:
            return js  # a scan's, or the object changed since the snapshot this rendering is for
        budget = self.json_budget
        cost = len(js) + len(key) + JSONBudget.ENTRY_OVERHEAD
        self._forget_json(key)
        # Oldest renderings of this cache go first; a cache with nothing left to give keeps none.
        cache = self.json
        while budget.used + cost > budget.limit and cache:
            k, old = cache.popitem(last=False)
            budget.used -= len(old) + len(k) + JSONBudget.ENTRY_OVERHEAD
        if budget.used + cost <= budget.limit:
            cache[key] = js
            budget.used += cost
        return js

    def _forget_json(self, key: str) -> None:
        js = self.json.pop(key, None)
        if js is not None:
            self.json_budget.used -= len(js) + len(key) + JSONBudget.ENTRY_OVERHEAD

    def _clear_json(self) -> None:
        budget = self.json_budget
        for k, js in self.json.items():
            budget.used -= len(js) + len(k) + JSONBudget.ENTRY_OVERHEAD
        self.json = OrderedDict()

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

    async def wait_fresh(self, prefix: str, rev: int, timeout: float = 3.0) -> int:
        """Wait until the cache's objects under prefix (or the one key) are the state at rev or
        later, as kube's consistent reads from cache do; the revision they are the state at. The
        caller reads the cache right away (no await in between), while that still holds.

        The cache's watch sees only this resource's changes, while etcd's revision also moves on
        through writes to other resources. So when the cache is behind rev, etcd is asked whether
        anything under prefix changed after the cache's revision, as of rev (no key modified
        since, and as many keys as the cache holds there); if nothing did, the cache is the state
        at rev. Otherwise the changes are on their way on the watch and the question is asked
        again once they arrive (or shortly). kube asks etcd for a progress notification instead;
        the etcd here (3.5.1) can send one ahead of the events it covers (etcd issue 15220, fixed
        in 3.5.8), which would let a read miss them."""
        deadline = time.monotonic() + timeout
        while self.rev < rev:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise too_large(rev, self.rev)
            base = self.rev
            if await self._unchanged(prefix, base, rev) and self.rev == base:
                return rev
            if self.rev >= rev:
                break
            try:
                await asyncio.wait_for(self._rev_changed.wait(), min(remaining, 0.05))
            except TimeoutError:
                continue
        return self.rev

    async def _unchanged(self, prefix: str, base: int, rev: int) -> bool:
        """Whether etcd, as of rev, holds under prefix what the cache holds (at base): no key there
        modified after base and as many keys. False when etcd cannot say (rev in its future, an
        error). etcd counts a range without its filters, so the keys themselves are read."""
        key = prefix.encode()
        end = range_end(key) if prefix.endswith("/") else None
        try:
            resp = await self.etcd.range(key, end, revision=rev, keys_only=True, min_mod_revision=base + 1,
                                         op="list", resource=self.resource)
        except (APIError, Compacted, FutureRevision):
            return False
        if resp.kvs:
            return False
        held = len(self._keys(prefix)) if prefix.endswith("/") else int(prefix in self.store)
        held += sum(1 for k in self.broken if k == prefix or (prefix.endswith("/") and k.startswith(prefix)))
        return resp.count == held


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

    def __init__(self, etcd: Etcd, codec: Codec | None = None, json_cache_bytes: int = 128 << 20,
                 **options: float) -> None:
        self.etcd = etcd
        self.codec = codec or Codec()
        self.options = options
        self.json_budget = JSONBudget(json_cache_bytes)
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
                c = Cacher(self.etcd, prefix, codec=self.codec, json_budget=self.json_budget,
                           **self.options)  # type: ignore[arg-type]
                await c.start(at_revision)
                self._cachers[prefix] = c
        return c

    async def stop(self) -> None:
        for c in list(self._cachers.values()):
            await c.stop()
        self._cachers.clear()
