"""apiary.Storage's operations, as kube's storage.Interface behind a resource's Store: writes go to
the etcd3 store, reads and watches to the watch cache when it may answer (as kube's Cacher decides
between its cache and etcd), the rest to etcd. Errors are APIErrors; the storage service serves
these over gRPC (apiary.Storage), and the kit calls them in process.

Answers from the watch cache are already serialized (bytes of the same message), so that no
object is decoded or encoded on the way out (wire.py).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

from apiary_pb import envelope_pb2 as pb
from apiary_pb import storage_pb2 as spb
from services.common import errors, mux
from services.common.errors import Timeout
from services.common.protowire import bytes_field
from services.common.selectors import SelectionPredicate

from . import metrics
from .cacher import Cacher, Cachers
from .codec import Codec
from .etcd import Etcd
from .etcd3 import Store, parse_rv, storage_key
from .keys import decode_continue, key_info, resource_label, resource_prefix
from .watch import CONSISTENT_READ_WAIT, Watches
from .wire import field, json_parts

MATCH_VALUES = ("Exact", "NotOlderThan", "")


def check_list_options(rv: str, match: str) -> None:
    """kube's ValidateListOptions for resourceVersionMatch (a 422 on ListOptions)."""
    cause = None
    if match not in MATCH_VALUES:
        cause = {
            "reason": "FieldValueNotSupported",
            "message": f'Unsupported value: "{match}": supported values: "Exact", "NotOlderThan", ""',
        }
    elif match and not rv:
        cause = {
            "reason": "FieldValueForbidden",
            "message": "Forbidden: resourceVersionMatch is forbidden unless resourceVersion is provided",
        }
    elif match == "Exact" and rv == "0":
        cause = {
            "reason": "FieldValueForbidden",
            "message": 'Forbidden: resourceVersionMatch "exact" is forbidden for resourceVersion "0"',
        }
    if cause:
        cause["field"] = "resourceVersionMatch"
        raise errors.invalid("ListOptions", "meta.k8s.io", "", [cause])


class Backend:
    """Create, get, list, update, delete and watch over one etcd client and its watch caches."""

    def __init__(
        self, etcd: Etcd, cachers: Cachers, bookmark_interval: float = 60.0, codec: Codec | None = None
    ) -> None:
        self.etcd = etcd
        self.cachers = cachers
        self.codec = codec or cachers.codec
        self.store = Store(etcd, self.codec)
        self.watches = Watches(etcd, cachers, self.store, bookmark_interval)

    async def _fresh_cacher(self, prefix: str, rv: int = 0) -> tuple[Cacher, int] | None:
        """The watch cache of prefix once what it holds under prefix is the state at rv or later (0:
        etcd's current revision), as kube 1.31's consistent reads from cache do, and the revision
        it is the state at (read the cache before any other await); None when it does not catch up
        within CONSISTENT_READ_WAIT."""
        cacher = await self.cachers.get(resource_prefix(prefix))
        target = rv or await self.etcd.current_revision(cacher.resource)
        try:
            at = await cacher.wait_fresh(prefix, target, CONSISTENT_READ_WAIT)
        except Timeout:
            if rv:
                raise
            return None
        return cacher, at

    # Writes: always etcd -----------------------------------------------------------------------

    async def create(self, request: spb.CreateRequest) -> pb.Object:
        return await self.store.create(request)

    async def update(self, request: spb.UpdateRequest) -> pb.Object:
        return await self.store.update(request)

    async def delete(self, request: spb.DeleteRequest) -> pb.Object:
        return await self.store.delete(request)

    # Reads: the cache when it may answer, etcd otherwise -----------------------------------------

    async def get(self, request: spb.GetRequest) -> pb.Object | bytes:
        """The object; from the watch cache as its serialized bytes."""
        storage_key(request.key)
        info = key_info(request.key)
        rv = request.resource_version
        minimum = parse_rv(rv) if rv else 0
        # "0": whatever the cache holds; "" and N: the cache once it is at least that fresh.
        if rv == "0":
            cacher: Cacher | None = await self.cachers.get(resource_prefix(request.key))
        else:
            fresh = await self._fresh_cacher(request.key, minimum)
            cacher = fresh[0] if fresh else None
        if cacher is not None:
            data = cacher.watch_cache.get(request.key)
            if data is None:
                raise errors.not_found(info.resource, info.group, info.name)
            return data
        return await self.store.get(request.key)

    async def list(self, request: spb.ListRequest) -> spb.ListResponse | bytes | mux.Streamed:
        """A ListResponse; from the watch cache, a serialized RawListResponse (the same wire format),
        in parts (a Streamed) when the request is chunked."""
        prefix = request.prefix if request.prefix.endswith("/") else request.prefix + "/"
        storage_key(prefix)
        pred = SelectionPredicate.parse(request.label_selector, request.field_selector)
        limit = max(0, request.limit)
        token = getattr(request, "continue")
        rv, match = request.resource_version, request.resource_version_match
        check_list_options(rv, match)
        resource = resource_label(resource_prefix(prefix))
        revision = minimum = 0
        if token:
            start, revision = decode_continue(token, prefix)
        else:
            start = prefix
            if rv:
                if match == "Exact":
                    revision = parse_rv(rv)
                else:
                    minimum = parse_rv(rv)
            cacher: Cacher | None = None
            at = 0
            if rv == "0":
                # As kube: a list at "any" version is served whole from the cache, limit ignored.
                cacher = await self.cachers.get(resource_prefix(prefix))
                at = cacher.watch_cache.rev
            elif not revision and not limit:
                # kube 1.31 (ConsistentListFromCache): unpaginated lists at "" or NotOlderThan come
                # from the cache once it has caught up; paginated and Exact ones go to etcd.
                fresh = await self._fresh_cacher(prefix, minimum)
                if fresh is not None:
                    cacher, at = fresh
            if cacher is not None:
                if request.json:
                    items = cacher.watch_cache.snapshot_json_items(prefix, pred, request.kind, request.api_version)
                    rv = field(2, str(at).encode())
                    if request.chunked:  # rendered part by part as the caller takes them
                        return mux.Streamed(json_parts(rv, items))
                    js = b",".join(items)
                    # RawListResponse{resource_version, json_items} by hand: one copy of a large answer
                    return b"".join((rv, *bytes_field(5, js)))
                items = cacher.watch_cache.snapshot(prefix, pred)
                if prefix == cacher.prefix and pred.empty:
                    metrics.STORAGE_OBJECTS.labels(resource).set(len(items))
                return spb.RawListResponse(items=items, resource_version=str(at)).SerializeToString()
        return await self.store.get_list(prefix, start, revision, minimum, limit, pred, resource,
                                         continuing=bool(token), json=request.json, chunked=request.chunked,
                                         kind=request.kind, api_version=request.api_version)

    def stats(self) -> spb.StatsResponse:
        """The object and watcher counts of every resource with a watch cache (a LIST or a watch makes one)."""
        return self.cachers.stats()

    # Watch ---------------------------------------------------------------------------------------

    async def watch(self, request: spb.WatchRequest) -> AsyncIterator[bytes]:
        """Serialized WatchEvents one by one (those from the watch cache are shared by every watcher)."""
        async for batch in self.watch_batches(request):
            for event in batch:
                yield event

    async def watch_batches(self, request: spb.WatchRequest, min_interval: float = 0.0) -> AsyncIterator[list[bytes]]:
        """watch's events in batches: the initial ones in one, then each time the consumer is
        ready (and min_interval after the previous batch), everything the cache queued for the
        watch meanwhile (a stream of its own writes one message per batch)."""
        begun = await self.watches.begin(request)
        if isinstance(begun, pb.WatchEvent):
            yield [begun.SerializeToString()]
            return
        cacher, w, _ = begun
        try:
            if initial := self.watches.initial(request, begun):
                yield initial
            async for batch in self.watches.live_batches(request, begun, min_interval=min_interval):
                yield batch
        finally:
            cacher.remove(w)

    async def watch_into(self, request: spb.WatchRequest, send: Callable[..., bool]) -> None:
        """watch's events handed to send(event, force) instead (a multiplexed stream's sink): the
        initial ones forced, the live ones straight from the cache as it applies them."""
        begun = await self.watches.begin(request)
        if isinstance(begun, pb.WatchEvent):
            send(begun.SerializeToString(), True)
            return
        cacher, w, _ = begun
        try:
            for event in self.watches.initial(request, begun):
                send(event, True)
            async for event in self.watches.live(request, begun, send):
                send(event)
        finally:
            cacher.remove(w)
