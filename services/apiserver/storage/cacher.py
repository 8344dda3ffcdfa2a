"""The watch cache of each resource prefix, fed by one etcd watch and fanned out to every client
watch (kube's Cacher): watch_cache.py holds its state, cache_watcher.py one client's watch, and
this module the etcd feed, the dispatch of each event to the watchers, and the consistent reads
(waiting until the cache is as fresh as a read needs).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from aetcd import rpc

from apiary_pb import storage_pb2 as spb
from services.common import tracing
from services.common.background import cancel_and_wait
from services.common.backoff import Backoff
from services.common.errors import APIError
from services.common.runtime import released
from services.common.selectors import SelectionPredicate

from . import metrics
from .cache_watcher import CacheWatcher
from .codec import Codec
from .errors import too_large
from .etcd import Compacted, Etcd, FutureRevision
from .json_cache import JSONBudget
from .keys import range_end
from .watch_cache import WatchCache

log = logging.getLogger(__name__)

# The confirmations a cache keeps at once (one per key or prefix read since the cache last moved).
PROVEN_KEYS = 4096


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
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.etcd = etcd
        self.codec = codec or Codec()
        self.prefix = prefix
        self.watch_cache = WatchCache(
            prefix, codec=self.codec, json_budget=json_budget or JSONBudget(), history_seconds=history_seconds,
            min_history=min_history, max_history=max_history, clock=clock,
        )
        self.resource = self.watch_cache.resource
        self.watcher_capacity = watcher_capacity
        self.watchers: set[CacheWatcher] = set()
        self._task: asyncio.Task[None] | None = None
        # What etcd confirmed (Cacher._unchanged): prefix -> the latest revision as of which it held
        # under prefix what the cache holds at revision _proven_base; void once the cache moves on.
        self._proven: dict[str, int] = {}
        self._proven_base = 0
        # the questions to etcd in flight, by prefix and the cache's revision: (as of, the answer)
        self._asking: dict[tuple[str, int], tuple[int, asyncio.Task[bool]]] = {}

    async def start(self, at_revision: int = 0) -> None:
        """Fill the cache (at at_revision when etcd still has it, so a watch from it can be served)."""
        await self._list(at_revision)
        # the cache's feed outlives the request that started it: in no request's trace
        self._task = asyncio.create_task(self._run(), name=f"cacher {self.prefix}", context=tracing.detached())

    async def stop(self) -> None:
        await cancel_and_wait(self._task)
        self._terminate_all()
        self.watch_cache.json.clear()

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
        await self.watch_cache.replace(resp.kvs, rev)

    async def _run(self) -> None:
        backoff, relist, failures = Backoff(), False, 0
        while True:
            try:
                if relist:
                    await self._list(0)
                    relist = False
                    # Events between the old and the new state are lost: watchers must start over.
                    self._terminate_all()
                async for resp in self.etcd.watch(self.prefix.encode(), self.watch_cache.rev + 1):
                    if failures:
                        log.info("watch cache %s: etcd watch resumed after %d tries", self.prefix, failures)
                        failures = 0
                    backoff.reset()
                    if self.codec.encryption is not None:
                        for e in resp.events:
                            await self.codec.prepare(e.kv.value, e.kv.key)
                    self._apply(resp)
                    # The response and the events' decoded objects and fan-out buffers are freed C
                    # heap: a burst of writes is given back once it is over (runtime.released).
                    released(resp.ByteSize())
            except asyncio.CancelledError:
                raise
            except Compacted:
                log.warning("watch cache %s: revision %d compacted, relisting", self.prefix,
                            self.watch_cache.rev + 1)
                relist = True
            except Exception as e:  # noqa: BLE001 - keep the cache alive; resume where it stopped
                if not failures:  # once per outage, not at every try
                    log.warning("watch cache %s: etcd watch broke (%s); resuming from %d",
                                self.prefix, e, self.watch_cache.rev + 1)
                failures += 1
                await asyncio.sleep(backoff.delay())

    def _apply(self, resp: rpc.WatchResponse) -> None:
        """Apply an etcd watch response to the cache and hand each event to every watcher."""
        for ev in self.watch_cache.apply(resp):
            delivered = 0
            for w in tuple(self.watchers):
                if w.push(ev):
                    delivered += 1
                elif w.overflowed:
                    metrics.TERMINATED_WATCHERS.labels(self.resource).inc()
                    self.remove(w)
            if delivered:
                metrics.child(metrics.WATCH_EVENTS, ev.kind).inc(delivered)

    def _terminate_all(self) -> None:
        for w in tuple(self.watchers):
            self.remove(w)
            w.close()

    # Client side -------------------------------------------------------------------------------

    def watch(self, prefix: str, pred: SelectionPredicate, since: int) -> CacheWatcher:
        """A watcher receiving every matching event after since, starting with those in history."""
        events = self.watch_cache.events_after(since)
        w = CacheWatcher(prefix, pred, since, self.watcher_capacity)
        for ev in events:
            w.push(ev, replay=True)
        self.watchers.add(w)
        metrics.REGISTERED_WATCHERS.labels(self.resource).set(len(self.watchers))
        return w

    def remove(self, w: CacheWatcher) -> None:
        self.watchers.discard(w)
        metrics.REGISTERED_WATCHERS.labels(self.resource).set(len(self.watchers))

    def stats(self) -> spb.ResourceStats:
        """The objects held and the watchers by what they watch: every object, a namespace's, or one."""
        out = spb.ResourceStats(resource=self.resource, objects=len(self.watch_cache.store))
        base = len(self.prefix)
        for w in self.watchers:
            scope = w.prefix[base:]
            if not scope:
                out.watchers += 1
            elif scope.endswith("/"):
                out.namespace_watchers[scope[:-1]] += 1
            else:
                out.object_watchers[scope] += 1
        return out

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
        cache = self.watch_cache
        deadline = time.monotonic() + timeout
        while cache.rev < rev:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise too_large(rev, cache.rev)
            base = cache.rev
            if self._proven_base == base and self._proven.get(prefix, 0) >= rev:
                return rev
            if await self._confirmed(prefix, base, rev) and cache.rev == base:
                return rev
            if cache.rev >= rev:
                break
            try:
                await asyncio.wait_for(cache.rev_changed.wait(), min(remaining, 0.05))
            except TimeoutError:
                continue
        return cache.rev

    async def _confirmed(self, prefix: str, base: int, rev: int) -> bool:
        """_unchanged(prefix, base, rev), asked once for every reader of the moment: a reader joins
        the question in flight about the same prefix and cache revision as of rev or later (nothing
        changed up to a later revision: nothing changed up to rev), and a confirmation is kept
        while the cache stays at base, so the readers that follow ask nothing until etcd's revision
        or the cache moves (the role of kube's progress notifications)."""
        asking = self._asking.get((prefix, base))
        if asking is None or asking[0] < rev:
            # a task of its own: a reader that gives up does not take the others' answer with it
            asking = self._asking[(prefix, base)] = (rev, asyncio.create_task(self._ask(prefix, base, rev)))
        return await asyncio.shield(asking[1])

    async def _ask(self, prefix: str, base: int, rev: int) -> bool:
        try:
            unchanged = await self._unchanged(prefix, base, rev)
        finally:
            asking = self._asking.get((prefix, base))
            if asking is not None and asking[1] is asyncio.current_task():
                del self._asking[(prefix, base)]
        if unchanged and self.watch_cache.rev == base:
            if self._proven_base != base or len(self._proven) >= PROVEN_KEYS:
                self._proven.clear()
                self._proven_base = base
            self._proven[prefix] = max(rev, self._proven.get(prefix, 0))
        return unchanged

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
        return resp.count == self.watch_cache.held(prefix)


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

    def stats(self) -> spb.StatsResponse:
        """Every watch cache's counts (Cacher.stats)."""
        return spb.StatsResponse(resources=[c.stats() for c in self._cachers.values()])

    async def stop(self) -> None:
        for c in list(self._cachers.values()):
            await c.stop()
        self._cachers.clear()
