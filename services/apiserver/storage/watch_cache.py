"""The watch cache's state (kube's watchCache): the current objects of one resource prefix, a
window of recent events, and the revision every change up to which has been applied.

Everything that changes the state runs synchronously on the event loop, so a client watch can
take a snapshot or a slice of history and register itself in one step without missing an event.

Representation (memory and CPU): each cached object is kept only as its serialized apiary.Object
bytes, resourceVersion included, so that Get, List and Watch answers are spliced from those bytes
without decoding or encoding anything (see wire.py). A value is decoded once, when it enters the
cache, to check it and to extract what selectors need: its labels and selectable fields are kept
(in `selection`) only when the key does not already tell them, i.e. when the object has labels or
fields beyond metadata.name/metadata.namespace; when those two are its only selectable fields, the
bytes leave them out (object_fields reads them from the metadata). Watch events are serialized once per event and
output type, and the same bytes go to every watcher; the window keeps its events column-wise and
their serializations only while they are among the latest (EventWindow), so that it costs less
than the objects it refers to.

Lists answered as JSON use each object's JSON as clients see it, rendered once and kept beside its
bytes until the object changes, within the process's budget (json_cache.py).
"""

from __future__ import annotations

import asyncio
import logging
import time
from array import array
from bisect import bisect_left, bisect_right, insort
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from itertools import islice
from typing import TypeVar

from aetcd import rpc

from apiary_pb import envelope_pb2 as pb
from services.common import envelope
from services.common.errors import APIError
from services.common.selectors import SelectionPredicate, object_fields

from . import metrics
from .codec import Codec
from .errors import too_old
from .json_cache import JSONBudget, RenderedJSON, fill_kind
from .keys import resource_label
from .wire import STALE_SUFFIX, watch_event

log = logging.getLogger(__name__)

PUT, DELETE = 0, 1
# How many of a cache's latest events are kept as CacheEvents, with their serialized WatchEvents:
# the fan-out of an event is over long before this many more are applied.
RENDERED_EVENTS = 256
ADDED, MODIFIED, DELETED, BOOKMARK, ERROR = "ADDED", "MODIFIED", "DELETED", "BOOKMARK", "ERROR"

# (labels, selectable fields or None when the key tells them) of an object; None: the key says it all.
Selection = tuple[Mapping[str, str], Mapping[str, str] | None]
_NO_LABELS: Mapping[str, str] = {}
T = TypeVar("T")


def key_fields(key: str) -> dict[str, str]:
    """metadata.name and metadata.namespace as the key spells them (keys.py's layout:
    /registry/[<group>/]<resource>/[<namespace>/]<name>, a group recognised by its dot)."""
    parts = key.split("/")
    depth = 4 if len(parts) > 2 and "." in parts[2] else 3  # parts: "", "registry", [group,] resource
    return {"metadata.name": parts[-1], "metadata.namespace": parts[-2] if len(parts) > depth + 1 else ""}


def cached(key: str, obj: pb.Object) -> tuple[bytes, Selection | None]:
    """obj as the cache keeps it and what a selector needs of it (None when its key says it all: no
    labels, no other fields). When its selectable fields are only the name and namespace its key
    tells, the cached bytes leave them out (61 B of a small configmap's 242): object_fields takes them
    from the metadata again, and nothing else reads them."""
    labels = obj.metadata.labels
    fields = object_fields(obj)
    derived = key_fields(key)
    # (item by item: copying a protobuf map into a dict iterates it in Python)
    trivial = (len(fields) == 2 and fields.get("metadata.name") == derived["metadata.name"]
               and fields.get("metadata.namespace") == derived["metadata.namespace"])
    if trivial:
        obj.ClearField("fields")
        if not labels:
            return obj.SerializeToString(), None
    return obj.SerializeToString(), ((dict(labels) if labels else _NO_LABELS), (None if trivial else dict(fields)))


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
    revision); prev the state before, for an object leaving a watcher's selection; time when the
    cache saw it (its clock), for the window's age. Its serialized WatchEvents are kept only while
    the event is among the cache's latest (RENDERED_EVENTS): every watcher gets the same bytes
    during the fan-out, and the window does not hold a second copy of each object (kube's
    cachingObject lives for the dispatch, not in the watch cache's buffer)."""

    __slots__ = ("type", "key", "rev", "data", "sel", "prev", "prev_sel", "kind", "time", "_out")

    def __init__(self, type_: str, key: str, rev: int, data: bytes, sel: Selection | None,
                 prev: bytes | None, prev_sel: Selection | None, kind: str, time: float) -> None:
        self.type, self.key, self.rev, self.data, self.sel = type_, key, rev, data, sel
        self.prev, self.prev_sel, self.kind, self.time = prev, prev_sel, kind, time
        self._out: dict[str, bytes] | None = None  # the renderings, while the event is recent

    def watch_event(self, type_: str) -> bytes:
        """The serialized WatchEvent as clients see it; built once and shared by every watcher
        while the event is recent, built again for a watcher replaying it later."""
        kept = self._out
        out = kept.get(type_) if kept is not None else None
        if out is None:
            if type_ == DELETED and self.type != DELETED:
                # An object leaving the selection: its previous state at this event's revision.
                assert self.prev is not None
                out = watch_event(DELETED, with_resource_version(self.prev, self.rev))
            else:
                out = watch_event(type_, self.data)
            if kept is not None:
                kept[type_] = out
        return out


def with_resource_version(data: bytes, rev: int) -> bytes:
    obj = pb.Object.FromString(data)
    obj.metadata.resource_version = str(rev)
    return obj.SerializeToString()


_TYPES = (ADDED, MODIFIED, DELETED)
_TYPE_CODES = {t: i for i, t in enumerate(_TYPES)}


class _Block:
    """Up to EventWindow.BLOCK consecutive events of one kind, column by column (an array or a list
    per field). The columns that would hold only None (no previous states in a block of creations,
    no selections for objects whose key tells them) are made only when a value comes."""

    __slots__ = ("kind", "revs", "times", "types", "keys", "data", "prevs", "sels", "prev_sels")

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.revs, self.times, self.types = array("q"), array("d"), bytearray()
        self.keys: list[str | None] = []
        self.data: list[bytes | None] = []
        self.prevs: list[bytes | None] | None = None
        self.sels: list[Selection | None] | None = None
        self.prev_sels: list[Selection | None] | None = None

    def add(self, ev: CacheEvent) -> None:
        n = len(self.revs)
        self.revs.append(ev.rev)
        self.times.append(ev.time)
        self.types.append(_TYPE_CODES[ev.type])
        self.keys.append(ev.key)
        self.data.append(ev.data)
        if ev.prev is not None or self.prevs is not None:
            self.prevs = _column(self.prevs, n, ev.prev)
        if ev.sel is not None or self.sels is not None:
            self.sels = _column(self.sels, n, ev.sel)
        if ev.prev_sel is not None or self.prev_sels is not None:
            self.prev_sels = _column(self.prev_sels, n, ev.prev_sel)

    def event(self, i: int) -> CacheEvent:
        key, data = self.keys[i], self.data[i]
        assert key is not None and data is not None, "an evicted event"
        return CacheEvent(_TYPES[self.types[i]], key, self.revs[i], data, _at(self.sels, i), _at(self.prevs, i),
                          _at(self.prev_sels, i), self.kind, self.times[i])

    def drop(self, i: int) -> None:
        """Let go of event i's objects (it left the window)."""
        self.keys[i] = self.data[i] = None
        for column in (self.prevs, self.sels, self.prev_sels):
            if column is not None:
                column[i] = None


def _column(column: list[T | None] | None, n: int, value: T | None) -> list[T | None]:
    """column with value appended as its item n (made of Nones up to there when there was none)."""
    if column is None:
        column = [None] * n
    column.append(value)
    return column


def _at(column: list[T | None] | None, i: int) -> T | None:
    return None if column is None else column[i]


class EventWindow:
    """A cache's recent events, oldest first (kube's watchCache keeps them in a cyclic buffer).

    Held column-wise in blocks, 33-57 B an event besides the objects' bytes, where an object per
    event took ~150 B (its header, its slots, its revision's int): with 100,000 events in the
    window, a cache of small objects spent more on its window than on its objects. The latest
    RENDERED_EVENTS (and the whole last batch) are also kept as the CacheEvents the fan-out had, with
    their renderings, so a watch replaying them gets the bytes the others got."""

    BLOCK = 256

    def __init__(self) -> None:
        self._blocks: deque[_Block] = deque()
        self._head = 0  # how many events of the first block have left the window
        self._len = 0
        self._recent: deque[CacheEvent] = deque()

    def __len__(self) -> int:
        return self._len

    def __iter__(self) -> Iterator[CacheEvent]:
        return iter(self.since(0))

    def append(self, ev: CacheEvent) -> None:
        blocks = self._blocks
        if not blocks or len(blocks[-1].revs) == self.BLOCK or blocks[-1].kind != ev.kind:
            blocks.append(_Block(ev.kind))
        blocks[-1].add(ev)
        self._len += 1
        ev._out = {}
        self._recent.append(ev)

    def forget_renderings(self) -> None:
        """Let the events before the latest RENDERED_EVENTS go back to their columns alone, their
        renderings dropped. Called before a batch is applied, so that the previous batch kept its
        renderings through its fan-out, however many events it had."""
        recent = self._recent
        while len(recent) > RENDERED_EVENTS:
            recent.popleft()._out = None

    def oldest_time(self) -> float:
        return self._blocks[0].times[self._head]

    def popleft(self) -> int:
        """Drop the oldest event; its revision."""
        first = self._blocks[0]
        rev = first.revs[self._head]
        first.drop(self._head)
        self._head += 1
        self._len -= 1
        if self._head == len(first.revs):
            self._blocks.popleft()
            self._head = 0
        if len(self._recent) > self._len:
            self._recent.popleft()._out = None
        return rev

    def clear(self) -> None:
        for ev in self._recent:
            ev._out = None
        self._blocks.clear()
        self._recent.clear()
        self._head = self._len = 0

    def since(self, rev: int) -> list[CacheEvent]:
        """The events after rev, oldest first."""
        if not self._blocks:
            return []
        first = self._blocks[0]
        n = 0  # how many there are, counted from the newest block back
        for b in reversed(self._blocks):
            start = self._head if b is first else 0
            if b.revs[start] > rev:
                n += len(b.revs) - start
                continue
            n += len(b.revs) - bisect_right(b.revs, rev, start)
            break
        recent = self._recent
        if n <= len(recent):
            return list(islice(recent, len(recent) - n, None))
        out: list[CacheEvent] = []
        want, skip = n - len(recent), self._len - n  # from the columns; before the first wanted
        for b in self._blocks:
            start = self._head if b is first else 0
            if skip >= len(b.revs) - start:
                skip -= len(b.revs) - start
                continue
            stop = min(len(b.revs), start + skip + want - len(out))
            out.extend(b.event(i) for i in range(start + skip, stop))
            skip = 0
            if len(out) == want:
                break
        out.extend(recent)
        return out


class WatchCache:
    """The objects under one resource prefix and the window of their recent events."""

    def __init__(
        self,
        prefix: str,
        *,
        codec: Codec,
        json_budget: JSONBudget,
        history_seconds: float = 75.0,
        min_history: int = 100,
        max_history: int = 102_400,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.prefix = prefix
        self.resource = resource_label(prefix)
        self.codec = codec
        self.history_seconds, self.min_history, self.max_history = history_seconds, min_history, max_history
        self.clock = clock
        # key -> the serialized apiary.Object with its resourceVersion (see the module docstring)
        self.store: dict[str, bytes] = {}
        # key -> labels and fields, only for objects whose key does not tell them (cached)
        self.selection: dict[str, Selection] = {}
        # key -> the JSON of store[key]; an entry goes as soon as the object changes
        self.json = RenderedJSON(json_budget)
        self._sorted: list[str] | None = None  # the store's keys in order, kept while it is in use
        self.kind = ""  # the kind of the objects last seen (metrics)
        self.stale: set[str] = set()  # keys whose values need re-encryption (codec.STALE_FIELD)
        self.broken: dict[str, APIError] = {}  # undecodable values: reads of them are 500s, never 404s
        self.history = EventWindow()
        self.rev = 0  # every change up to this revision has been applied
        self.complete_since = 0  # every event after this revision is in history
        self.rev_changed = asyncio.Event()  # set (and replaced) whenever rev may have moved
        # this resource's metric series, looked up once (a labels() call costs as much as the rest
        # of a small event's bookkeeping)
        self._events_total = metrics.WATCH_CACHE_EVENTS.labels(self.resource)
        self._objects = metrics.STORAGE_OBJECTS.labels(self.resource)
        self._capacity = metrics.WATCH_CACHE_CAPACITY.labels(self.resource)
        self._rv = metrics.WATCH_CACHE_RV.labels(self.resource)

    # Changes -----------------------------------------------------------------------------------

    async def replace(self, kvs: Sequence[rpc.KeyValue], rev: int) -> None:
        """Become the state listed at rev (kube's watchCache.Replace), with an empty window. The
        new state is built aside (awaiting only a KMS plugin) and put in place in one step."""
        store: dict[str, bytes] = {}
        selection: dict[str, Selection] = {}
        stale: set[str] = set()
        broken: dict[str, APIError] = {}
        codec = self.codec
        encrypted = codec.encryption is not None
        kind = self.kind
        for kv in kvs:
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
            store[key], sel = cached(key, obj)
            if sel is not None:
                selection[key] = sel
            kind = obj.kind
        self.store, self.selection, self.stale, self.broken = store, selection, stale, broken
        self.json.clear()
        self._sorted = None
        self.kind = kind
        self.history.clear()
        self.rev = self.complete_since = rev
        self._bump()
        self._objects.set(len(store))
        self._capacity.set(0)
        self._rv.set(rev)

    def apply(self, resp: rpc.WatchResponse) -> list[CacheEvent]:
        """Apply the events of an etcd watch response (kube's watchCache.processEvent); the events
        for the watchers, in order."""
        out: list[CacheEvent] = []
        if not resp.events:
            # A progress notification. Not taken as proof that nothing up to its revision is still
            # on its way: before etcd 3.5.8 one can overtake the events it covers (etcd issue
            # 15220), and this etcd is 3.5.1. Cacher.wait_fresh checks with etcd instead.
            return out
        store, selection, now = self.store, self.selection, self.clock()
        self.history.forget_renderings()
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
                data, sel = cached(key, obj)
                prev = store.get(key)
                prev_sel = selection.get(key)
                ev = CacheEvent(MODIFIED if prev is not None else ADDED, key, rev, data, sel, prev, prev_sel,
                                self._kind(obj), now)
                if prev is None and self._sorted is not None:
                    insort(self._sorted, key)
                elif prev is not None:
                    self.json.forget(key)
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
                    prev, prev_sel = cached(key, old)
                last = pb.Object.FromString(prev)
                last.metadata.resource_version = str(rev)
                ev = CacheEvent(
                    DELETED, key, rev, last.SerializeToString(), prev_sel, prev, prev_sel, self._kind(last), now
                )
            self.rev = max(self.rev, rev)
            self.history.append(ev)
            self._events_total.inc()
            out.append(ev)
        self._evict(now)
        self._bump()
        self._objects.set(len(self.store))
        self._capacity.set(len(self.history))
        self._rv.set(self.rev)
        return out

    def _kind(self, obj: pb.Object) -> str:
        """obj's kind, as the one string object the cache already holds when it is the same (each
        event in the window would otherwise hold its own copy)."""
        kind = obj.kind
        if kind != self.kind:
            self.kind = kind
        return self.kind

    def _bump(self) -> None:
        self.rev_changed.set()
        self.rev_changed = asyncio.Event()

    def _discard(self, key: str) -> None:
        self.json.forget(key)
        if self.store.pop(key, None) is not None and self._sorted is not None:
            i = bisect_left(self._sorted, key)
            if i < len(self._sorted) and self._sorted[i] == key:
                del self._sorted[i]
        self.selection.pop(key, None)

    def _evict(self, now: float) -> None:
        h = self.history
        while len(h) > self.max_history or (
            len(h) > self.min_history and now - h.oldest_time() > self.history_seconds
        ):
            self.complete_since = h.popleft()

    # Reads -------------------------------------------------------------------------------------

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
        keys = self.keys(prefix)
        if pred.empty and prefix.endswith("/"):
            return keys
        store, selection = self.store, self.selection
        return [k for k in keys if k in store and (pred.empty or matches(pred, k, selection.get(k)))]

    def _check_broken(self, prefix: str) -> None:
        if self.broken:
            for k, err in self.broken.items():
                if k == prefix or (prefix.endswith("/") and k.startswith(prefix)):
                    raise err

    def keys(self, prefix: str) -> list[str]:
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

    def held(self, prefix: str) -> int:
        """How many keys the cache holds under prefix (or the one key), broken ones included."""
        held = len(self.keys(prefix)) if prefix.endswith("/") else int(prefix in self.store)
        return held + sum(
            1 for k in self.broken if k == prefix or (prefix.endswith("/") and k.startswith(prefix))
        )

    def snapshot_json_items(self, prefix: str, pred: SelectionPredicate, kind: str,
                            api_version: str) -> Iterable[bytes]:
        """snapshot's objects as their JSON, one item each (kind and api_version fill in an object
        stored without them; such JSON is not kept). The snapshot is taken at once (the objects'
        bytes and what is already rendered: references only); the rest is rendered as the items
        are read, so a large list is never rendered whole before it is sent. When every item is
        rendered already, the list of them (wire.json_parts cuts a list into parts without a
        Python step per item)."""
        keys = self._matching(prefix, pred)
        done = list(map(self.json.get, keys))
        if None not in done:  # every item rendered already (a hot cache)
            return done
        data = list(map(self.store.__getitem__, keys))
        # Scan resistance: a list whose objects outweigh half the budget would only push out what
        # smaller reads keep rendered, and leave the process holding its own renderings after it
        # (a 208 MB LIST kept the whole 128 MiB budget: issue 9's "memory back a minute after").
        keep = sum(map(len, data)) <= self.json.budget.limit // 2

        def items() -> Iterator[bytes]:
            for key, d, js in zip(keys, data, done):
                yield js if js is not None else self._render(key, d, kind, api_version, keep)
        return items()

    def _render(self, key: str, data: bytes, kind: str, api_version: str, keep: bool = True) -> bytes:
        obj = pb.Object.FromString(data)
        if fill_kind(obj, kind, api_version):
            return envelope.to_json(obj)  # not kept: it depends on the request
        js = envelope.to_json(obj)
        if keep and self.store.get(key) is data:  # not a scan's, and the object is still this one
            self.json.keep(key, js)
        return js

    def events_after(self, rev: int) -> list[CacheEvent]:
        """The events after rev, oldest first; 410 Gone when the window no longer holds them all."""
        if rev < self.complete_since:
            raise too_old(rev, self.complete_since)
        return self.history.since(rev)
