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
from collections.abc import AsyncIterator
from typing import Any

from apiary_pb import envelope_pb2 as pb
from apiary_pb import storage_pb2 as spb
from services.apiserver.storage.backend import Backend
from services.apiserver.storage.cacher import Cachers
from services.apiserver.storage.codec import Codec
from services.apiserver.storage.compactor import Compactor
from services.apiserver.storage.etcd import Etcd
from services.common.errors import APIError, InternalError

log = logging.getLogger(__name__)


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
