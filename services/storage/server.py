"""apiary.Storage, the gRPC face of the store: each call goes to the watch cache (cacher.py) or to
etcd (etcd3.py), as kube's Cacher decides between its cache and the etcd3 store; watches are served
by watch.py. The unary methods also run on the registry's long-lived Calls stream
(services/common/mux.py), and the watches on its Watches stream (services/common/watchmux.py).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import grpc

from apiary_pb import envelope_pb2 as pb
from apiary_pb import storage_pb2 as spb
from apiary_pb import storage_pb2_grpc as sgrpc
from services.common import errors, mux, watchmux
from services.common.errors import Timeout
from services.common.grpcutil import api_method, api_stream
from services.common.protowire import bytes_field
from services.common.selectors import SelectionPredicate

from services.apiserver.storage import metrics
from services.apiserver.storage.cacher import Cacher, Cachers
from services.apiserver.storage.codec import Codec
from services.apiserver.storage.etcd import Etcd
from services.apiserver.storage.etcd3 import Store, parse_rv, storage_key
from services.apiserver.storage.keys import decode_continue, key_info, resource_label, resource_prefix
from services.apiserver.storage.watch import CONSISTENT_READ_WAIT, Watches
from services.apiserver.storage.wire import field, json_parts, serialize

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
        cause["message"] = f"resourceVersionMatch: {cause['message']}"
        raise errors.invalid("ListOptions", "meta.k8s.io", "", [cause])


def add_to_server(servicer: StorageServicer, server: grpc.aio.Server) -> None:
    """sgrpc.add_StorageServicer_to_server, except that every response serializer passes bytes through:
    Get, List and Watch answer from the watch cache with already-serialized messages (wire.py)."""
    async def list_unary(request: spb.ListRequest, context: grpc.aio.ServicerContext) -> Any:
        request.chunked = False  # an answer in parts exists only on the Calls stream
        return await servicer.List(request, context)

    handlers = {
        name: grpc.unary_unary_rpc_method_handler(
            list_unary if name == "List" else getattr(servicer, name),
            request_deserializer=req.FromString, response_serializer=serialize,
        )
        for name, req in (
            ("Create", spb.CreateRequest), ("Get", spb.GetRequest), ("List", spb.ListRequest),
            ("Update", spb.UpdateRequest), ("Delete", spb.DeleteRequest),
        )
    }
    handlers["Watch"] = grpc.unary_stream_rpc_method_handler(
        servicer.Watch, request_deserializer=spb.WatchRequest.FromString, response_serializer=serialize
    )
    handlers["Watches"] = grpc.stream_stream_rpc_method_handler(
        servicer.Watches,
        request_deserializer=pb.WatchControl.FromString,
        response_serializer=pb.WatchBatch.SerializeToString,
    )
    handlers["Calls"] = grpc.stream_stream_rpc_method_handler(
        servicer.Calls,
        request_deserializer=pb.Frames.FromString,
        response_serializer=pb.Frames.SerializeToString,
    )
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("apiary.Storage", handlers),))
    if hasattr(server, "add_registered_method_handlers"):
        server.add_registered_method_handlers("apiary.Storage", handlers)


class StorageServicer(sgrpc.StorageServicer):
    def __init__(
        self, etcd: Etcd, cachers: Cachers, bookmark_interval: float = 60.0, codec: Codec | None = None
    ) -> None:
        self.etcd = etcd
        self.cachers = cachers
        self.codec = codec or cachers.codec
        self.store = Store(etcd, self.codec)
        self.watches = Watches(etcd, cachers, self.store, bookmark_interval)
        self._mux_methods = mux.unary_methods(self, {
            "Create": spb.CreateRequest, "Get": spb.GetRequest, "List": spb.ListRequest,
            "Update": spb.UpdateRequest, "Delete": spb.DeleteRequest,
        })

    async def Calls(self, request_iterator: AsyncIterator[pb.Frames],
                    context: grpc.aio.ServicerContext) -> AsyncIterator[pb.Frames]:
        """The unary methods on the registry's long-lived stream (services/common/mux.py)."""
        async for frame in mux.serve_mux(request_iterator, context, self._mux_methods):
            yield frame

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

    @api_method
    async def Create(self, request: spb.CreateRequest, context: grpc.aio.ServicerContext) -> pb.Object:
        return await self.store.create(request)

    @api_method
    async def Update(self, request: spb.UpdateRequest, context: grpc.aio.ServicerContext) -> pb.Object:
        return await self.store.update(request)

    @api_method
    async def Delete(self, request: spb.DeleteRequest, context: grpc.aio.ServicerContext) -> pb.Object:
        return await self.store.delete(request)

    # Reads: the cache when it may answer, etcd otherwise -----------------------------------------

    @api_method
    async def Get(self, request: spb.GetRequest, context: grpc.aio.ServicerContext) -> pb.Object | bytes:
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
            data = cacher.get(request.key)
            if data is None:
                raise errors.not_found(info.resource, info.group, info.name)
            return data
        return await self.store.get(request.key)

    @api_method
    async def List(
        self, request: spb.ListRequest, context: grpc.aio.ServicerContext
    ) -> spb.ListResponse | bytes:
        """A ListResponse; from the watch cache, a serialized RawListResponse (the same wire format)."""
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
                at = cacher.rev
            elif not revision and not limit:
                # kube 1.31 (ConsistentListFromCache): unpaginated lists at "" or NotOlderThan come
                # from the cache once it has caught up; paginated and Exact ones go to etcd.
                fresh = await self._fresh_cacher(prefix, minimum)
                if fresh is not None:
                    cacher, at = fresh
            if cacher is not None:
                if request.json:
                    items = cacher.snapshot_json_items(prefix, pred, request.kind, request.api_version)
                    rv = field(2, str(at).encode())
                    if request.chunked:  # rendered part by part as the caller takes them
                        return mux.Streamed(json_parts(rv, items))
                    js = b",".join(items)
                    # RawListResponse{resource_version, json_items} by hand: one copy of a large answer
                    return b"".join((rv, *bytes_field(5, js)))
                items = cacher.snapshot(prefix, pred)
                if prefix == cacher.prefix and pred.empty:
                    metrics.STORAGE_OBJECTS.labels(resource).set(len(items))
                return spb.RawListResponse(items=items, resource_version=str(at)).SerializeToString()
        return await self.store.get_list(prefix, start, revision, minimum, limit, pred, resource,
                                         continuing=bool(token), json=request.json, chunked=request.chunked,
                                         kind=request.kind, api_version=request.api_version)

    # Watch ---------------------------------------------------------------------------------------

    @api_stream
    async def Watch(self, request: spb.WatchRequest, context: grpc.aio.ServicerContext) -> AsyncIterator[bytes]:
        """Serialized WatchEvents (those from the watch cache are shared by every watcher)."""
        begun = await self.watches.begin(request)
        if isinstance(begun, pb.WatchEvent):
            yield begun.SerializeToString()
            return
        cacher, w, _ = begun
        try:
            for event in self.watches.initial(request, begun):
                yield event
            async for event in self.watches.live(request, begun):
                yield event
        finally:
            cacher.remove(w)

    async def Watches(self, request_iterator: AsyncIterator[pb.WatchControl],
                      context: grpc.aio.ServicerContext) -> AsyncIterator[pb.WatchBatch]:
        """Watch, multiplexed: every watch a peer holds on one stream, each event sent once per
        stream with the ids of the watches it goes to (services/common/watchmux.py)."""
        async for batch in watchmux.serve(request_iterator, self._mux_watch):
            yield batch

    async def _mux_watch(self, wid: int, raw: bytes, sink: watchmux.Sink) -> None:
        """One watch of a Watches stream: live events go from the cache straight to the sink."""
        request = spb.WatchRequest.FromString(raw)
        begun = await self.watches.begin(request)
        if isinstance(begun, pb.WatchEvent):
            sink.send(wid, begun.SerializeToString(), force=True)
            return
        cacher, w, _ = begun
        try:
            for event in self.watches.initial(request, begun):
                sink.send(wid, event, force=True)
            async for event in self.watches.live(request, begun, lambda event: sink.send(wid, event)):
                sink.send(wid, event)
        finally:
            cacher.remove(w)
