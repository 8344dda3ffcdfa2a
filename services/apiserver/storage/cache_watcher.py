"""One client watch on a watch cache (kube's cacheWatcher): the cache's events filtered through
its key range and selectors, buffered until its stream takes them or handed straight to a sink."""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable

from services.common.selectors import SelectionPredicate

from .watch_cache import ADDED, DELETED, MODIFIED, CacheEvent, matches


class CacheWatcher:
    """One client watch: filters the cache's events through its key range and selectors.

    buf holds (revision, serialized WatchEvent) until the watch's stream takes them; once `attach`ed
    to a deliver function (a multiplexed stream's Sink.send), events go straight to it instead."""

    def __init__(self, prefix: str, pred: SelectionPredicate, since: int, capacity: int) -> None:
        self.prefix = prefix
        self.exact = not prefix.endswith("/")
        self.pred = pred
        self.everything = pred.empty  # no selector: every event under the prefix goes as it is
        self.since = since
        self.capacity = capacity
        self.buf: deque[tuple[int, bytes]] = deque()
        self.wake = asyncio.Event()
        self.closed = False
        self.overflowed = False
        self.kind = ""  # of the last event pushed (metrics)
        self.deliver: Callable[[bytes], bool] | None = None

    def push(self, ev: CacheEvent, replay: bool = False) -> bool:
        """Queue (or deliver) ev if it concerns this watch; True when it was delivered straight away."""
        if ev.rev <= self.since or self.closed:
            return False
        key = ev.key  # (inline and without property calls: this runs once per watcher per event)
        if key != self.prefix if self.exact else not key.startswith(self.prefix):
            return False
        if self.everything:
            out = ev.type
        else:
            pred = self.pred
            cur = ev.type != DELETED and matches(pred, key, ev.sel)
            old = ev.prev is not None and matches(pred, key, ev.prev_sel)
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
