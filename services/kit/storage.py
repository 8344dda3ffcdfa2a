"""The kit's one door to apiary's storage: the storage backend of the library (etcd store, watch
cache, codec, compactor) run in this process, called directly as the storage service calls it.

Every import of services.apiserver.storage lives in this module, so a reshaping of the storage
package touches the kit here only. The contract used is the apiary.Storage protocol
(storage.proto), the same one the registry speaks over gRPC: keys, resourceVersion semantics, the
watch cache with consistent reads, bookmarks and 410 Gone are therefore exactly the storage
service's.
"""
from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

from apiary_pb import envelope_pb2 as pb
from apiary_pb import storage_pb2 as spb
from services.apiserver.resource import ResourceInfo
from services.apiserver.storage.backend import Backend
from services.apiserver.storage.cacher import Cachers
from services.apiserver.storage.codec import Codec
from services.apiserver.storage.compactor import Compactor
from services.apiserver.storage.errors import interpret
from services.apiserver.storage.etcd import Etcd
from services.apiserver.storage.keys import resource_prefix
from services.apiserver.storage.watch import CONSISTENT_READ_WAIT
from services.common import errors, mux, tracing
from services.common.errors import APIError, InternalError

log = logging.getLogger(__name__)
T = TypeVar("T")


def _object(answer: pb.Object | bytes) -> pb.Object:
    return pb.Object.FromString(answer) if isinstance(answer, bytes) else answer


class Storage:
    """etcd under one prefix, with the watch cache; methods raise APIError as the service would."""

    def __init__(self, etcd_servers: str, *, request_timeout: float = 10.0, bookmark_interval: float = 60.0,
                 compaction_interval: float = 0.0, history_seconds: float = 75.0) -> None:
        self.etcd = Etcd(etcd_servers, request_timeout)
        self.cachers = Cachers(self.etcd, Codec(), history_seconds=history_seconds)
        self.backend = Backend(self.etcd, self.cachers, bookmark_interval)
        self.compactor = Compactor(self.etcd, compaction_interval) if compaction_interval > 0 else None

    async def start(self) -> None:
        await self.etcd.connect()
        if self.compactor is not None:
            self.compactor.start()

    async def stop(self) -> None:
        if self.compactor is not None:
            await self.compactor.stop()
        await self.cachers.stop()
        await self.etcd.close()

    async def ping(self) -> bool:
        return await self.etcd.ping()

    async def fresh_revision(self, prefix: str) -> int:
        """The revision of the last change under prefix sent to its watches, once its watch cache holds
        the state at etcd's current revision (an informer holding it has read every earlier write)."""
        cacher = await self.cachers.get(resource_prefix(prefix))
        await cacher.wait_fresh(prefix, await self.etcd.current_revision(cacher.resource), CONSISTENT_READ_WAIT)
        return cacher.watch_cache.rev

    async def create(self, key: str, obj: pb.Object) -> pb.Object:
        return _object(await self.backend.create(spb.CreateRequest(key=key, object=obj)))

    async def get(self, key: str, resource_version: str = "") -> pb.Object:
        return _object(await self.backend.get(spb.GetRequest(key=key, resource_version=resource_version)))

    async def update(self, key: str, obj: pb.Object, expected_resource_version: str = "") -> pb.Object:
        req = spb.UpdateRequest(key=key, object=obj, expected_resource_version=expected_resource_version)
        return _object(await self.backend.update(req))

    async def delete(self, key: str, precondition_uid: str = "", precondition_resource_version: str = "") -> pb.Object:
        req = spb.DeleteRequest(key=key, precondition_uid=precondition_uid,
                                precondition_resource_version=precondition_resource_version)
        return _object(await self.backend.delete(req))

    async def list(self, prefix: str, *, resource_version: str = "", resource_version_match: str = "",
                   limit: int = 0, continue_: str = "", label_selector: str = "",
                   field_selector: str = "") -> tuple[list[pb.Object], str, str, int | None]:
        """(items, resourceVersion, continue, remainingItemCount)."""
        req = spb.ListRequest(prefix=prefix, resource_version=resource_version,
                              resource_version_match=resource_version_match, limit=limit,
                              label_selector=label_selector, field_selector=field_selector)
        setattr(req, "continue", continue_)
        answer = await self.backend.list(req)
        if isinstance(answer, bytes):
            raw = spb.RawListResponse.FromString(answer)
            items = [pb.Object.FromString(b) for b in raw.items]
            resp: Any = raw
        else:
            items, resp = list(answer.items), answer
        remaining = resp.remaining_item_count if resp.HasField("remaining_item_count") else None
        return items, resp.resource_version, getattr(resp, "continue"), remaining

    async def watch(self, prefix: str, *, resource_version: str = "", label_selector: str = "",
                    field_selector: str = "", allow_bookmarks: bool = False,
                    send_initial_events: bool = False) -> AsyncIterator[pb.WatchEvent]:
        """WatchEvents (ERROR ones carry the Status, as on the gRPC stream)."""
        req = spb.WatchRequest(prefix=prefix, resource_version=resource_version, label_selector=label_selector,
                               field_selector=field_selector, allow_bookmarks=allow_bookmarks,
                               send_initial_events=send_initial_events)
        stream = self.backend.watch(req)
        try:
            async for ev in stream:
                yield pb.WatchEvent.FromString(ev)
        except APIError as e:
            yield pb.WatchEvent(type="ERROR", status=e.to_pb())
        except Exception as e:  # noqa: BLE001 - a 500 Status, as the storage service sends it
            log.exception("Watch failed")
            yield pb.WatchEvent(type="ERROR", status=InternalError(f"{type(e).__name__}: {e}").to_pb())
        finally:
            await stream.aclose()


async def _timed(call: Awaitable[T], timing: dict[str, float] | None, info: ResourceInfo, method: str,
                 key: str) -> T:
    """The call's answer; its time added to the request's storage stage (Server-Timing), and a span of
    the request's trace when it is recorded ("storage <Method>", as the registry's storage calls)."""
    t0 = time.perf_counter()
    try:
        if tracing.ENABLED and tracing.recording():
            with tracing.span(f"storage {method}", {"resource": info.plural, "key": key}):
                return await call
        return await call
    finally:
        if timing is not None:
            timing["storage"] = timing.get("storage", 0.0) + (time.perf_counter() - t0) * 1000


class ResourceStorage:
    """The library's storage of a resource's Store and verbs (endpoints.handlers.ListStorage) over the
    in-process backend: objects in the request's version, stored in the kind's storage version."""

    def __init__(self, storage: Storage) -> None:
        self.backend = storage.backend

    async def get(self, info: ResourceInfo, namespace: str, name: str, resource_version: str = "",
                  timing: dict[str, float] | None = None) -> pb.Object:
        req = spb.GetRequest(key=info.key(namespace, name), resource_version=resource_version)
        try:
            return info.served(_object(await _timed(self.backend.get(req), timing, info, "Get", req.key)))
        except APIError as e:
            raise interpret(e, info, name) from None

    async def create(self, info: ResourceInfo, obj: pb.Object, timing: dict[str, float] | None = None) -> pb.Object:
        m = obj.metadata
        req = spb.CreateRequest(key=info.key(m.namespace, m.name), object=info.stored(obj))
        try:
            return info.served(_object(await _timed(self.backend.create(req), timing, info, "Create", req.key)))
        except APIError as e:
            if e.code == 409:
                raise errors.already_exists(info.plural, info.group, m.name) from None
            raise

    async def update(self, info: ResourceInfo, obj: pb.Object, expected_resource_version: str,
                     timing: dict[str, float] | None = None) -> pb.Object:
        m = obj.metadata
        req = spb.UpdateRequest(key=info.key(m.namespace, m.name), object=info.stored(obj),
                                expected_resource_version=expected_resource_version)
        try:
            return info.served(_object(await _timed(self.backend.update(req), timing, info, "Update", req.key)))
        except APIError as e:
            raise interpret(e, info, m.name) from None

    async def delete(self, info: ResourceInfo, namespace: str, name: str, uid: str = "",
                     resource_version: str = "", timing: dict[str, float] | None = None) -> pb.Object:
        req = spb.DeleteRequest(key=info.key(namespace, name), precondition_uid=uid,
                                precondition_resource_version=resource_version)
        try:
            return info.served(_object(await _timed(self.backend.delete(req), timing, info, "Delete", req.key)))
        except APIError as e:
            raise interpret(e, info, name) from None

    async def list(self, info: ResourceInfo, req: spb.ListRequest,
                   timing: dict[str, float] | None = None) -> spb.ListResponse:
        """The items in info's version."""
        answer = await _timed(self.backend.list(req), timing, info, "List", req.prefix)
        if isinstance(answer, mux.Streamed):
            raise InternalError("a chunked list has no whole answer")
        resp = spb.ListResponse.FromString(answer) if isinstance(answer, bytes) else answer
        items = [info.served(e) for e in resp.items]
        del resp.items[:]
        resp.items.extend(items)
        return resp

    async def list_raw(self, info: ResourceInfo, req: spb.ListRequest,
                       timing: dict[str, float] | None = None) -> spb.RawListResponse:
        answer = await _timed(self.backend.list(req), timing, info, "List", req.prefix)
        if isinstance(answer, bytes):
            return spb.RawListResponse.FromString(answer)
        if isinstance(answer, mux.Streamed):
            raise InternalError("a chunked list has no whole answer")
        return spb.RawListResponse.FromString(answer.SerializeToString())

    async def list_parts(self, info: ResourceInfo, req: spb.ListRequest,
                         timing: dict[str, float] | None = None) -> AsyncIterator[bytes]:
        """A chunked list's parts as the backend renders them (wire.ListParts: a serialized
        RawListResponse, then the items' JSON itself)."""
        answer = await self.backend.list(req)
        if not isinstance(answer, mux.Streamed):
            yield answer if isinstance(answer, bytes) else answer.SerializeToString()
            return
        async for part in answer:
            yield part


class StorageListWatch:
    """The informer's ListWatch (services.common.informer) over one kind's objects in this storage, each
    decoded by `decode` (to the kit's hub form)."""

    def __init__(self, storage: Storage, prefix: str, decode: Callable[[pb.Object], dict[str, Any]]) -> None:
        self.storage, self.prefix, self.decode = storage, prefix, decode

    async def fresh_revision(self) -> int:
        return await self.storage.fresh_revision(self.prefix)

    async def list(self) -> tuple[list[dict[str, Any]], str]:
        items, rv, _, _ = await self.storage.list(self.prefix)
        return [self.decode(o) for o in items], rv

    async def watch(self, resource_version: str) -> AsyncIterator[tuple[str, dict[str, Any]]]:
        async for ev in self.storage.watch(self.prefix, resource_version=resource_version, allow_bookmarks=True):
            if ev.type == "ERROR":
                raise APIError.from_pb(ev.status)
            if ev.type == "BOOKMARK":
                yield ev.type, {"metadata": {"resourceVersion": ev.object.metadata.resource_version}}
                continue
            yield ev.type, self.decode(ev.object)
