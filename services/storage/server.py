"""apiary.Storage: kube's etcd3 store semantics (storage/etcd3) with watches served by the cacher."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterable, Iterator
from typing import Any

import grpc
from aetcd import rpc

from apiary_pb import envelope_pb2 as pb
from apiary_pb import storage_pb2 as spb
from apiary_pb import storage_pb2_grpc as sgrpc
from services.common import envelope, errors, mux, watchmux
from services.common.errors import BadRequest, Gone, RequestEntityTooLarge, Timeout
from services.common.grpcutil import api_method, api_stream
from services.common.protowire import bytes_field
from services.common.selectors import SelectionPredicate

from . import metrics
from .cacher import ADDED, BOOKMARK, ERROR, Cacher, Cachers, CacheWatcher, fill_kind, too_large
from .codec import STALE_FIELD, Codec
from .codec import encode as codec_encode
from .encryption import NeedsDEK
from .etcd import (
    Compacted,
    Etcd,
    FutureRevision,
    compare_mod,
    compare_value,
    compare_version,
    op_delete,
    op_get,
    op_put,
    op_txn,
)
from .keys import decode_continue, encode_continue, key_info, range_end, resource_label, resource_prefix
from .wire import field, serialize, watch_event

EXPIRED_CONTINUE = (
    "The provided continue parameter is too old to display a consistent list result. You can start a "
    "new list without the continue parameter, or use the continue token in this response to retrieve "
    "the remainder of the results. Continuing with the provided token results in an inconsistent list "
    "- objects that were created, modified, or deleted between the time the first chunk was returned "
    "and now may show up in the list."
)
EXPIRED_LIST = "The resourceVersion for the provided list is too old."
INITIAL_EVENTS_END = "k8s.io/initial-events-end"
MAX_FETCH = 10_000
# Objects read from etcd at a time for a JSON list in parts (a page of 10 KiB objects is ~2.5 MB).
LIST_PAGE = 256
DELETE_RETRIES = 16
UPDATE_RETRIES = 16
# etcd's default --max-request-bytes; kube-apiserver's objects cannot be larger either.
MAX_OBJECT_BYTES = 1536 * 1024
CONSISTENT_READ_WAIT = 3.0
MATCH_VALUES = ("Exact", "NotOlderThan", "")


def check_size(value: bytes) -> None:
    """Refuse an object etcd would refuse, before anything is written."""
    if len(value) > MAX_OBJECT_BYTES:
        raise RequestEntityTooLarge(
            f"etcdserver: request is too large: the object is {len(value)} bytes encoded, "
            f"the limit is {MAX_OBJECT_BYTES} bytes"
        )


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


def parse_rv(value: str, what: str = "resourceVersion") -> int:
    try:
        rv = int(value)
    except ValueError:
        raise BadRequest(f'{what}: Invalid value: "{value}": must be a valid resource version') from None
    if not 0 <= rv < 2**63:  # etcd revisions are int64
        raise BadRequest(f'{what}: Invalid value: "{value}": must be a valid resource version')
    return rv


class ListParts:
    """RawListResponses of about `size` bytes of items each, the first starting with head (its
    resource_version field): a LIST's answer in parts (ListRequest.chunked), each made as soon as
    its items are in."""

    def __init__(self, head: bytes, size: int = mux.PART_BYTES) -> None:
        self.head, self.size = head, size
        self.batch: list[bytes] = []
        self.n = 0
        self.first = True

    def add(self, item: bytes) -> bytes | None:
        """The next part, when this item completes one."""
        self.batch.append(item)
        self.n += len(item) + 1
        return self._part() if self.n >= self.size else None

    def end(self) -> bytes | None:
        """The last part (the only one of an empty list), unless the last item completed one."""
        return self._part() if self.batch or self.first else None

    def _part(self) -> bytes:
        out = b"".join((self.head if self.first else b"", *bytes_field(5, b",".join(self.batch))))
        self.batch, self.n, self.first = [], 0, False
        return out


def json_parts(head: bytes, items: Iterable[bytes], size: int = mux.PART_BYTES) -> Iterator[bytes]:
    """ListParts of items, each made when it is asked for."""
    parts = ListParts(head, size)
    for item in items:
        if (part := parts.add(item)) is not None:
            yield part
    if (part := parts.end()) is not None:
        yield part


def _key(key: str) -> bytes:
    if not key.startswith("/"):
        raise BadRequest(f"invalid storage key {key!r}")
    return key.encode()


def bookmark(rv: int, initial_events_end: bool = False) -> pb.WatchEvent:
    ev = pb.WatchEvent(type=BOOKMARK)
    ev.object.metadata.resource_version = str(rv)
    if initial_events_end:
        ev.object.metadata.annotations[INITIAL_EVENTS_END] = "true"
    return ev


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
        self.bookmark_interval = bookmark_interval
        self.codec = codec or cachers.codec
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
        within 3 s."""
        cacher = await self.cachers.get(resource_prefix(prefix))
        target = rv or await self.etcd.current_revision(cacher.resource)
        try:
            at = await cacher.wait_fresh(prefix, target, CONSISTENT_READ_WAIT)
        except Timeout:
            if rv:
                raise
            return None
        return cacher, at

    # Writes ------------------------------------------------------------------------------------

    @api_method
    async def Create(self, request: spb.CreateRequest, context: grpc.aio.ServicerContext) -> pb.Object:
        key = _key(request.key)
        info = key_info(request.key)
        obj = request.object
        value = await self.codec.encode(key, obj)
        check_size(value)
        resp = await self.etcd.txn(
            [compare_version(key, 0)],
            [op_put(key, value)],
            [],
            op="create",
            resource=info.qualified,
        )
        if not resp.succeeded:
            raise errors.already_exists(info.resource, info.group, info.name)
        obj.metadata.resource_version = str(resp.header.revision)
        return obj

    @api_method
    async def Update(self, request: spb.UpdateRequest, context: grpc.aio.ServicerContext) -> pb.Object:
        key = _key(request.key)
        info = key_info(request.key)
        obj = request.object
        obj.fields.pop(STALE_FIELD, None)
        if self.codec.transformer(key) is not None:
            return await self._update_encrypted(request, key, info, obj)
        value = await self.codec.encode(key, obj)
        check_size(value)
        # Writing the bytes already stored is a no-op that keeps the resourceVersion, as in kube.
        write = op_txn([compare_value(key, value)], [op_get(key)], [op_put(key, value)])
        if request.expected_resource_version:
            expected = parse_rv(request.expected_resource_version, "metadata.resourceVersion")
            resp = await self.etcd.txn(
                [compare_mod(key, expected)], [write], [op_get(key)], op="update", resource=info.qualified
            )
        else:
            resp = await self.etcd.txn(
                [compare_version(key, 0, rpc.Compare.GREATER)],
                [write],
                [],
                op="update",
                resource=info.qualified,
            )
        if not resp.succeeded:
            if request.expected_resource_version and resp.responses[0].response_range.kvs:
                raise errors.conflict(info.resource, info.group, info.name, errors.MODIFIED)
            raise errors.not_found(info.resource, info.group, info.name)
        inner = resp.responses[0].response_txn
        if inner.succeeded:
            obj.metadata.resource_version = str(inner.responses[0].response_range.kvs[0].mod_revision)
        else:
            obj.metadata.resource_version = str(resp.header.revision)
        return obj

    async def _update_encrypted(
        self, request: spb.UpdateRequest, key: bytes, info, obj: pb.Object
    ) -> pb.Object:
        """Encrypted values differ on every write, so the no-op check compares plain values; a value
        written by an older provider or key is rewritten even when unchanged (key rotation)."""
        plain = codec_encode(obj)
        expected = (
            parse_rv(request.expected_resource_version, "metadata.resourceVersion")
            if request.expected_resource_version
            else 0
        )
        for _ in range(UPDATE_RETRIES):
            kvs = (await self.etcd.range(key, op="get", resource=info.qualified)).kvs
            if not kvs:
                raise errors.not_found(info.resource, info.group, info.name)
            kv = kvs[0]
            if expected and kv.mod_revision != expected:
                raise errors.conflict(info.resource, info.group, info.name, errors.MODIFIED)
            try:
                current, stale = await self.codec.unwrap_async(kv.value, key)
            except errors.InternalError:
                current, stale = b"", True  # unreadable: overwriting it is how an admin repairs it
            if current == plain and not stale:
                obj.metadata.resource_version = str(kv.mod_revision)
                return obj
            value = await self.codec.encode(key, obj)
            check_size(value)
            resp = await self.etcd.txn(
                [compare_mod(key, kv.mod_revision)], [op_put(key, value)], [], op="update", resource=info.qualified
            )
            if resp.succeeded:
                obj.metadata.resource_version = str(resp.header.revision)
                return obj
            if expected:
                raise errors.conflict(info.resource, info.group, info.name, errors.MODIFIED)
        raise errors.conflict(info.resource, info.group, info.name, errors.MODIFIED)

    @api_method
    async def Delete(self, request: spb.DeleteRequest, context: grpc.aio.ServicerContext) -> pb.Object:
        key = _key(request.key)
        info = key_info(request.key)
        kvs = (await self.etcd.range(key, op="get", resource=info.qualified)).kvs
        for _ in range(DELETE_RETRIES):
            if not kvs:
                raise errors.not_found(info.resource, info.group, info.name)
            kv = kvs[0]
            cur = await self.codec.decode_async(kv.value, kv.mod_revision, request.key)
            if request.precondition_uid and request.precondition_uid != cur.metadata.uid:
                raise errors.conflict(
                    info.resource,
                    info.group,
                    info.name,
                    f"Precondition failed: UID in precondition: {request.precondition_uid}, "
                    f"UID in object meta: {cur.metadata.uid}",
                )
            if (
                request.precondition_resource_version
                and request.precondition_resource_version != cur.metadata.resource_version
            ):
                raise errors.conflict(
                    info.resource,
                    info.group,
                    info.name,
                    "Precondition failed: ResourceVersion in precondition: "
                    f"{request.precondition_resource_version}, ResourceVersion in object meta: "
                    f"{cur.metadata.resource_version}",
                )
            resp = await self.etcd.txn(
                [compare_mod(key, kv.mod_revision)],
                [op_delete(key)],
                [op_get(key)],
                op="delete",
                resource=info.qualified,
            )
            if resp.succeeded:
                cur.metadata.resource_version = str(resp.header.revision)
                return cur
            # Changed since it was read: check the preconditions again against the new state.
            kvs = resp.responses[0].response_range.kvs
        raise errors.conflict(info.resource, info.group, info.name, errors.MODIFIED)

    # Reads -------------------------------------------------------------------------------------

    @api_method
    async def Get(self, request: spb.GetRequest, context: grpc.aio.ServicerContext) -> pb.Object | bytes:
        """The object; from the watch cache as its serialized bytes."""
        key = _key(request.key)
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
        resp = await self.etcd.range(key, op="get", resource=info.qualified)
        if not resp.kvs:
            raise errors.not_found(info.resource, info.group, info.name)
        kv = resp.kvs[0]
        obj = await self.codec.decode_async(kv.value, kv.mod_revision, request.key)
        if self.codec.is_stale(key, kv.value):
            obj.fields[STALE_FIELD] = "true"
        return obj

    @api_method
    async def List(
        self, request: spb.ListRequest, context: grpc.aio.ServicerContext
    ) -> spb.ListResponse | bytes:
        """A ListResponse; from the watch cache, a serialized RawListResponse (the same wire format)."""
        prefix = request.prefix if request.prefix.endswith("/") else request.prefix + "/"
        _key(prefix)
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
        try:
            if request.json and request.chunked and not limit:
                return await self._list_json_parts(prefix, start, revision, minimum, pred, resource,
                                                   request.kind, request.api_version)
            out = await self._list(prefix, start, revision, minimum, limit, pred, resource)
            if request.json:
                for o in out.items:
                    fill_kind(o, request.kind, request.api_version)
                out.json_items = b",".join(envelope.to_json(o) for o in out.items)
                del out.items[:]
            return out
        except Compacted:
            if token:
                # As kube: a fresh token continuing from the same key at the latest revision.
                raise Gone(EXPIRED_CONTINUE, reason="Expired",
                           list_continue=encode_continue(start, prefix, -1)) from None
            raise Gone(EXPIRED_LIST, reason="Expired") from None
        except FutureRevision:
            raise too_large(revision, 0) from None

    async def _list(
        self,
        prefix: str,
        start: str,
        revision: int,
        minimum: int,
        limit: int,
        pred: SelectionPredicate,
        resource: str,
    ) -> spb.ListResponse:
        end = range_end(prefix.encode())
        key = start.encode()
        out = spb.ListResponse()
        items = out.items
        codec = self.codec
        fetch = limit
        total = -1
        last_key = b""
        more = False
        while True:
            resp = await self.etcd.range(
                key, end, revision=revision, limit=fetch, op="list", resource=resource
            )
            if not revision:
                # Every further page is read at the first page's revision: one consistent snapshot.
                revision = resp.header.revision
                if minimum > revision:
                    raise too_large(minimum, revision)
            if total < 0:
                total = resp.count
            kvs = resp.kvs
            seen = 0
            for kv in kvs:
                seen += 1
                last_key = kv.key
                try:
                    obj = codec.decode(kv.value, kv.mod_revision, kv.key)
                except NeedsDEK:
                    obj = await codec.decode_async(kv.value, kv.mod_revision, kv.key)
                if pred.empty or pred.matches(obj):
                    items.append(obj)
                    if limit and len(items) == limit:
                        break
            if limit and len(items) == limit:
                more = seen < len(kvs) or resp.more
                break
            if not resp.more:
                break
            key = last_key + b"\x00"
            fetch = min(fetch * 2, MAX_FETCH)
        out.resource_version = str(revision)
        if more:
            setattr(out, "continue", encode_continue((last_key + b"\x00").decode(), prefix, revision))
            if pred.empty:
                out.remaining_item_count = total - len(items)
        if start == prefix and pred.empty and prefix == resource_prefix(prefix) and not more:
            metrics.STORAGE_OBJECTS.labels(resource).set(total)
        return out

    async def _list_json_parts(self, prefix: str, start: str, revision: int, minimum: int,
                               pred: SelectionPredicate, resource: str, kind: str, api_version: str
                               ) -> mux.Streamed:
        """An unpaginated JSON list from etcd in parts, read page by page at the first page's
        revision and rendered as the caller takes the parts, so that neither the objects nor their
        JSON are ever all in memory at once. The first page is read here (its errors are the
        call's); an error on a later one ends the answer after the parts before it."""
        end = range_end(prefix.encode())
        codec = self.codec
        page = LIST_PAGE
        resp = await self.etcd.range(start.encode(), end, revision=revision, limit=page, op="list",
                                     resource=resource)
        if not revision:
            revision = resp.header.revision
            if minimum > revision:
                raise too_large(minimum, revision)
        whole = start == prefix and pred.empty and prefix == resource_prefix(prefix)

        async def objects() -> AsyncIterator[list[bytes]]:
            nonlocal resp
            total = resp.count
            while True:
                out: list[bytes] = []
                for kv in resp.kvs:
                    try:
                        obj = codec.decode(kv.value, kv.mod_revision, kv.key)
                    except NeedsDEK:
                        obj = await codec.decode_async(kv.value, kv.mod_revision, kv.key)
                    if pred.empty or pred.matches(obj):
                        fill_kind(obj, kind, api_version)
                        out.append(envelope.to_json(obj))
                yield out
                if not resp.more:
                    break
                key = resp.kvs[-1].key + b"\x00"
                try:
                    resp = await self.etcd.range(key, end, revision=revision, limit=page, op="list",
                                                 resource=resource)
                except Compacted:
                    raise Gone(EXPIRED_LIST, reason="Expired") from None
            if whole:
                metrics.STORAGE_OBJECTS.labels(resource).set(total)

        async def parts() -> AsyncIterator[bytes]:
            out = ListParts(field(2, str(revision).encode()))
            async for items in objects():
                for item in items:
                    if (part := out.add(item)) is not None:
                        yield part
            if (part := out.end()) is not None:
                yield part

        return mux.Streamed(parts())

    async def _list_all(
        self, prefix: str, pred: SelectionPredicate, resource: str
    ) -> tuple[list[pb.Object], int]:
        """A fresh, consistent read of everything a watch covers, and its revision."""
        key = prefix.encode()
        if prefix.endswith("/"):
            resp = await self.etcd.range_prefix(key, resource=resource)
        else:
            resp = await self.etcd.range(key, op="list", resource=resource)
        objs = [await self.codec.decode_async(kv.value, kv.mod_revision, kv.key) for kv in resp.kvs]
        return [o for o in objs if pred.empty or pred.matches(o)], resp.header.revision

    # Watch -------------------------------------------------------------------------------------

    @api_stream
    async def Watch(
        self, request: spb.WatchRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.WatchEvent | bytes]:
        """WatchEvents; those from the watch cache as serialized bytes, shared by every watcher."""
        begun = await self._begin(request)
        if isinstance(begun, pb.WatchEvent):
            yield begun
            return
        cacher, w, initial = begun
        try:
            async for ev in self._stream(request, cacher, w, initial):
                yield ev
        finally:
            cacher.remove(w)

    async def Watches(self, request_iterator: AsyncIterator[pb.WatchControl],
                      context: grpc.aio.ServicerContext) -> AsyncIterator[pb.WatchBatch]:
        """Watch, multiplexed: every watch a peer holds on one stream, each event sent once per
        stream with the ids of the watches it goes to (services/common/watchmux.py)."""
        async for batch in watchmux.serve(request_iterator, self._mux_watch):
            yield batch

    async def _mux_watch(self, wid: int, raw: bytes, sink: watchmux.Sink) -> None:
        """One watch of a Watches stream: its initial events, then live events handed to the sink
        by the cache as it applies them (no task switch per event), bookmarks from here."""
        request = spb.WatchRequest.FromString(raw)
        begun = await self._begin(request)
        if isinstance(begun, pb.WatchEvent):
            sink.send(wid, begun.SerializeToString(), force=True)
            return
        cacher, w, initial = begun
        try:
            for obj in initial:
                event = watch_event(ADDED, obj) if type(obj) is bytes else pb.WatchEvent(
                    type=ADDED, object=obj).SerializeToString()
                sink.send(wid, event, force=True)
            if request.send_initial_events and request.allow_bookmarks:
                sink.send(wid, bookmark(w.since, initial_events_end=True).SerializeToString(), force=True)
            sent = len(initial) + w.attach(lambda event: sink.send(wid, event))
            if sent:
                metrics.WATCH_EVENTS.labels(cacher.kind).inc(sent)
            interval = self.bookmark_interval
            while not w.closed:
                w.wake.clear()
                if not request.allow_bookmarks:
                    await w.wake.wait()
                    continue
                try:
                    await asyncio.wait_for(w.wake.wait(), interval)
                except TimeoutError:
                    # Every event up to the cache's revision has been handed over (attached).
                    sink.send(wid, bookmark(max(w.since, cacher.rev)).SerializeToString())
        finally:
            cacher.remove(w)

    async def _begin(
        self, request: spb.WatchRequest
    ) -> tuple[Cacher, CacheWatcher, list[pb.Object] | list[bytes]] | pb.WatchEvent:
        """A registered cache watcher and the initial objects to send first, or the ERROR event
        (410 too old resource version) to send instead."""
        prefix = request.prefix
        _key(prefix)
        pred = SelectionPredicate.parse(request.label_selector, request.field_selector)
        rv = parse_rv(request.resource_version) if request.resource_version else None
        cacher = await self.cachers.get(resource_prefix(prefix), at_revision=rv or 0)
        initial: list[pb.Object] | list[bytes] = []
        if rv is None and await self._caught_up(cacher, prefix):
            rv = 0  # the cache under prefix is the current state: start from its snapshot (no await between)
        if rv is None:
            # Start from a fresh list; buffer what the cache sees meanwhile, keep what is newer.
            w = cacher.watch(prefix, pred, cacher.rev)
            try:
                initial, start_rev = await self._list_all(prefix, pred, cacher.resource)
            except BaseException:
                cacher.remove(w)
                raise
            if start_rev > w.since:
                w.advance(start_rev)
        elif rv == 0 or request.send_initial_events:
            if rv:
                await cacher.wait_fresh(prefix, rv)
            initial = cacher.snapshot(prefix, pred)
            w = cacher.watch(prefix, pred, cacher.rev)
        else:
            try:
                w = cacher.watch(prefix, pred, rv)
            except Gone as e:
                return pb.WatchEvent(type=ERROR, status=e.to_pb())
        return cacher, w, initial

    async def _caught_up(self, cacher: Cacher, prefix: str) -> bool:
        """Whether the cache under prefix reached etcd's current revision within 3 s (watch from "")."""
        try:
            await cacher.wait_fresh(prefix, await self.etcd.current_revision(cacher.resource), CONSISTENT_READ_WAIT)
        except Timeout:
            return False
        return True

    async def _stream(
        self,
        request: spb.WatchRequest,
        cacher: Cacher,
        w: CacheWatcher,
        initial: list[pb.Object] | list[bytes],
    ) -> AsyncIterator[pb.WatchEvent | bytes]:
        if initial:
            metrics.WATCH_EVENTS.labels(cacher.kind).inc(len(initial))
        for obj in initial:
            yield watch_event(ADDED, obj) if type(obj) is bytes else pb.WatchEvent(type=ADDED, object=obj)
        if request.send_initial_events and request.allow_bookmarks:
            yield bookmark(w.since, initial_events_end=True)
        interval = self.bookmark_interval
        next_bookmark = time.monotonic() + interval
        buf = w.buf
        while True:
            sent = 0
            while buf:
                sent += 1
                yield buf.popleft()[1]
            if sent:
                metrics.WATCH_EVENTS.labels(w.kind).inc(sent)
            if w.closed:
                return
            w.wake.clear()
            if not request.allow_bookmarks:
                await w.wake.wait()
                continue
            remaining = next_bookmark - time.monotonic()
            if remaining > 0:
                try:
                    await asyncio.wait_for(w.wake.wait(), remaining)
                    continue
                except TimeoutError:
                    pass
            if w.buf:
                continue
            # Every event up to the cache's revision has been sent (the buffer is empty).
            yield bookmark(max(w.since, cacher.rev))
            next_bookmark = time.monotonic() + interval
