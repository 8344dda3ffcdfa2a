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
from services.common import errors, mux, tracing
from services.common.errors import Timeout
from services.common.protowire import bytes_field
from services.common.selectors import SelectionPredicate

from . import metrics
from .cacher import Cacher, Cachers
from .codec import Codec
from .etcd import Etcd
from .etcd3 import Store, parse_rv, storage_key
from .keys import decode_continue, key_info, resource_label, resource_prefix
from .watch import CONSISTENT_READ_WAIT, Begun, Watches
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
        if tracing.ENABLED and tracing.recording():
            return await self._get_traced(request)
        # _cacher_for_get inline: the hottest path of all has no frame to spare
        rv = request.resource_version
        if rv == "0":
            return self._cached(await self.cachers.get(resource_prefix(request.key)), request.key)
        fresh = await self._fresh_cacher(request.key, parse_rv(rv) if rv else 0)
        if fresh is not None:
            return self._cached(fresh[0], request.key)
        return await self.store.get(request.key)

    async def _get_traced(self, request: spb.GetRequest) -> pb.Object | bytes:
        """get, the watch cache's part a "cacher.Get" event of the call's span (the revision it answered
        at); an answer from etcd is the etcd call's event after it."""
        # the key (and so the resource) is the call's span's: each attribute costs the exporter microseconds
        with tracing.step("cacher.Get", {"resource-version": request.resource_version}
                          if request.resource_version else None) as span:
            cached = await self._cacher_for_get(request)
            if cached is not None:
                span.set_attribute("revision", cached[1])
                return self._cached(cached[0], request.key)
            span.set_attribute("fresh", False)
        return await self.store.get(request.key)

    async def _cacher_for_get(self, request: spb.GetRequest) -> tuple[Cacher, int] | None:
        """The watch cache that may answer a GET and the revision it answers at, or None (etcd answers):
        at "0" whatever the cache holds; at "" and N the cache once it is at least that fresh."""
        rv = request.resource_version
        if rv == "0":
            cacher = await self.cachers.get(resource_prefix(request.key))
            return cacher, cacher.watch_cache.rev
        return await self._fresh_cacher(request.key, parse_rv(rv) if rv else 0)

    @staticmethod
    def _cached(cacher: Cacher, key: str) -> bytes:
        data = cacher.watch_cache.get(key)
        if data is None:
            info = key_info(key)
            raise errors.not_found(info.resource, info.group, info.name)
        return data

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
            if rv == "0" or (not revision and not limit):
                # "0": as kube, served whole from the cache, limit ignored. kube 1.31
                # (ConsistentListFromCache): unpaginated lists at "" or NotOlderThan come from the
                # cache once it has caught up; paginated and Exact ones go to etcd.
                if tracing.ENABLED and tracing.recording():
                    answer = await self._list_cached_traced(request, prefix, pred, resource, minimum)
                else:
                    answer = await self._list_cached(request, prefix, pred, resource, minimum)
                if answer is not None:
                    return answer[0]
        return await self.store.get_list(prefix, start, revision, minimum, limit, pred, resource,
                                         continuing=bool(token), json=request.json, chunked=request.chunked,
                                         kind=request.kind, api_version=request.api_version)

    async def _list_cached(self, request: spb.ListRequest, prefix: str, pred: SelectionPredicate, resource: str,
                           minimum: int) -> tuple[bytes | mux.Streamed, int] | None:
        """The list from the watch cache and the revision it is at, or None when the cache does not catch
        up with a consistent read in time (etcd answers)."""
        if request.resource_version == "0":
            cacher = await self.cachers.get(resource_prefix(prefix))
            at = cacher.watch_cache.rev
        else:
            fresh = await self._fresh_cacher(prefix, minimum)
            if fresh is None:
                return None
            cacher, at = fresh
        return self._cached_list(request, prefix, pred, resource, cacher, at), at

    async def _list_cached_traced(self, request: spb.ListRequest, prefix: str, pred: SelectionPredicate,
                                  resource: str, minimum: int) -> tuple[bytes | mux.Streamed, int] | None:
        """_list_cached as kube's "cacher list" step: an event of the call's span."""
        with tracing.step("cacher list", {"key": prefix, "resource": resource,
                                          "resource-version": request.resource_version}) as span:
            answer = await self._list_cached(request, prefix, pred, resource, minimum)
            span.set_attributes({"revision": answer[1]} if answer is not None else {"fresh": False})
            return answer

    @staticmethod
    def _cached_list(request: spb.ListRequest, prefix: str, pred: SelectionPredicate, resource: str,
                     cacher: Cacher, at: int) -> bytes | mux.Streamed:
        """The list from the watch cache, as it is at revision `at`."""
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
        begun = await self._begin(request)
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

    async def _begin(self, request: spb.WatchRequest) -> Begun | pb.WatchEvent:
        """Watches.begin; for a sampled request in kube's "cacher.Watch" span (the storage service's one span
        of a watch: no server span is around it): a watch's trace covers its setup (the cache catching up, an
        initial list from etcd, events of it), not the events that follow."""
        if not (tracing.ENABLED and tracing.recording()):
            return await self.watches.begin(request)
        with tracing.span("cacher.Watch", {"key": request.prefix,
                                           "resource-version": request.resource_version}) as span:
            begun = await self.watches.begin(request)
            if isinstance(begun, pb.WatchEvent):
                span.set_attribute("error", begun.status.reason)
            else:
                span.set_attributes({"resource": begun[0].resource, "initial": len(begun[2])})
            return begun

    async def watch_into(self, request: spb.WatchRequest, send: Callable[..., bool]) -> None:
        """watch's events handed to send(event, force) instead (a multiplexed stream's sink): the
        initial ones forced, the live ones straight from the cache as it applies them."""
        begun = await self._begin(request)
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
