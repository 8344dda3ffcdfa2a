"""kube's storage/etcd3 store: objects under their keys in etcd, resourceVersion = etcd revision.

Writes are transactions on the key's revision; an update of an encrypted resource compares plain
values and rewrites a value an older provider or key wrote (key rotation). Reads here always go to
etcd (backend.py decides when the watch cache can answer instead). Lists are read page by page at
the first page's revision, so that a list, and a list in parts, is one consistent snapshot.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from aetcd import rpc

from apiary_pb import envelope_pb2 as pb
from apiary_pb import storage_pb2 as spb
from services.common import envelope, errors, mux
from services.common.errors import BadRequest, Gone, RequestEntityTooLarge
from services.common.selectors import SelectionPredicate

from . import metrics
from .codec import STALE_FIELD, Codec
from .codec import encode as codec_encode
from .encryption import NeedsDEK
from .errors import too_large
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
from .json_cache import fill_kind
from .keys import encode_continue, key_info, range_end, resource_prefix
from .wire import ListParts, field

EXPIRED_CONTINUE = (
    "The provided continue parameter is too old to display a consistent list result. You can start a "
    "new list without the continue parameter, or use the continue token in this response to retrieve "
    "the remainder of the results. Continuing with the provided token results in an inconsistent list "
    "- objects that were created, modified, or deleted between the time the first chunk was returned "
    "and now may show up in the list."
)
EXPIRED_LIST = "The resourceVersion for the provided list is too old."
MAX_FETCH = 10_000
# Objects read from etcd at a time for a JSON list in parts (a page of 10 KiB objects is ~2.5 MB).
LIST_PAGE = 256
DELETE_RETRIES = 16
UPDATE_RETRIES = 16
# etcd's default --max-request-bytes; kube-apiserver's objects cannot be larger either.
MAX_OBJECT_BYTES = 1536 * 1024


def check_size(value: bytes) -> None:
    """Refuse an object etcd would refuse, before anything is written."""
    if len(value) > MAX_OBJECT_BYTES:
        raise RequestEntityTooLarge(
            f"etcdserver: request is too large: the object is {len(value)} bytes encoded, "
            f"the limit is {MAX_OBJECT_BYTES} bytes"
        )


def parse_rv(value: str, what: str = "resourceVersion") -> int:
    try:
        rv = int(value)
    except ValueError:
        raise BadRequest(f'{what}: Invalid value: "{value}": must be a valid resource version') from None
    if not 0 <= rv < 2**63:  # etcd revisions are int64
        raise BadRequest(f'{what}: Invalid value: "{value}": must be a valid resource version')
    return rv


def storage_key(key: str) -> bytes:
    """The etcd key of a storage key (every key is absolute: /registry/...)."""
    if not key.startswith("/"):
        raise BadRequest(f"invalid storage key {key!r}")
    return key.encode()


class Store:
    """The etcd3 store over one etcd client and the codec of the values (encryption included)."""

    def __init__(self, etcd: Etcd, codec: Codec) -> None:
        self.etcd = etcd
        self.codec = codec

    async def create(self, request: spb.CreateRequest) -> pb.Object:
        """Create the object at its key unless one is there (kube's store.Create)."""
        key = storage_key(request.key)
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

    async def update(self, request: spb.UpdateRequest) -> pb.Object:
        """Write the object over the one at its key, if it is at the expected revision when one is given
        (kube's GuaranteedUpdate, the retry loop being the registry's)."""
        key = storage_key(request.key)
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

    async def delete(self, request: spb.DeleteRequest) -> pb.Object:
        """Delete the object under its preconditions; the object as it was, at the deletion's revision."""
        key = storage_key(request.key)
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

    async def get(self, key: str) -> pb.Object:
        """The object as etcd holds it now (fields[STALE_FIELD] when its value needs re-encryption)."""
        raw = storage_key(key)
        info = key_info(key)
        resp = await self.etcd.range(raw, op="get", resource=info.qualified)
        if not resp.kvs:
            raise errors.not_found(info.resource, info.group, info.name)
        kv = resp.kvs[0]
        obj = await self.codec.decode_async(kv.value, kv.mod_revision, key)
        if self.codec.is_stale(raw, kv.value):
            obj.fields[STALE_FIELD] = "true"
        return obj

    async def get_list(self, prefix: str, start: str, revision: int, minimum: int, limit: int,
                   pred: SelectionPredicate, resource: str, *, continuing: bool = False, json: bool = False,
                   chunked: bool = False, kind: str = "", api_version: str = "") -> spb.ListResponse | mux.Streamed:
        """A page of the objects under prefix from start (all of them without a limit), at revision
        (0: the current one, at least minimum): kube's GetList. As JSON items when json is set, and
        then in parts (a Streamed of RawListResponses) when chunked is set too and there is no limit.
        Compacted revisions are 410 Expired; a token continuing past one gets a fresh token."""
        try:
            if json and chunked and not limit:
                return await self._list_json_parts(prefix, start, revision, minimum, pred, resource, kind,
                                                   api_version)
            out = await self._list_page(prefix, start, revision, minimum, limit, pred, resource)
            if json:
                for o in out.items:
                    fill_kind(o, kind, api_version)
                out.json_items = b",".join(envelope.to_json(o) for o in out.items)
                del out.items[:]
            return out
        except Compacted:
            if continuing:
                # As kube: a fresh token continuing from the same key at the latest revision.
                raise Gone(EXPIRED_CONTINUE, reason="Expired",
                           list_continue=encode_continue(start, prefix, -1)) from None
            raise Gone(EXPIRED_LIST, reason="Expired") from None
        except FutureRevision:
            raise too_large(revision, 0) from None

    async def _list_page(
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
                for part in out.extend(items):
                    yield part
            if (part := out.end()) is not None:
                yield part

        return mux.Streamed(parts())

    async def list_all(
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
