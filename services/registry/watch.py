"""Watch: storage WatchEvents to {"type":...,"object":...} frames, without decoding object bodies."""
from __future__ import annotations

from collections.abc import AsyncIterator

import orjson

from apiary_pb import envelope_pb2 as pb
from apiary_pb import registry_pb2 as rpb
from apiary_pb import storage_pb2 as spb
from services.apiserver import printers
from services.apiserver.endpoints.handlers import Handlers
from services.apiserver.endpoints.request import check_list_options
from services.common import envelope, errors

from .storage_client import StorageClient

_TYPES = {t: f'{{"type":"{t}","object":'.encode() for t in ("ADDED", "MODIFIED", "DELETED", "BOOKMARK", "ERROR")}


def error_frame(err: errors.APIError) -> bytes:
    return _TYPES["ERROR"] + orjson.dumps(err.status()) + b"}"


class SharedFrames:
    """The JSON frame of an event, built once for every watch it goes to: the storage stream hands
    each of them the same bytes object, so the last few events are remembered by identity (the
    entry holds the bytes, so their id cannot be reused while it is remembered)."""

    def __init__(self, size: int = 256) -> None:
        self.size = size
        self._frames: dict[tuple[int, str, str], tuple[bytes, bytes]] = {}

    def get(self, raw: bytes, kind: str, api_version: str) -> bytes | None:
        e = self._frames.get((id(raw), kind, api_version))
        return e[1] if e is not None and e[0] is raw else None

    def put(self, raw: bytes, kind: str, api_version: str, frame: bytes) -> None:
        frames = self._frames
        if len(frames) >= self.size:
            del frames[next(iter(frames))]
        frames[(id(raw), kind, api_version)] = (raw, frame)


SHARED = SharedFrames()


def _true(value: str) -> bool:
    return value.lower() in ("true", "1")


def _timeout(value: str) -> float:
    # checked by the proxy (a 400 before the watch starts), which also sets it when the client did not
    try:
        return max(float(int(value)), 0.0) if value else 0.0
    except ValueError:
        return 0.0


class Plan:
    """One client watch as the registry serves it: the storage watch, and how its events become
    frames. APIErrors of the request itself (unknown resource, bad options) are raised here."""

    def __init__(self, handlers: Handlers[StorageClient], req: rpb.APIRequest) -> None:
        r = handlers.request(req, "watch")
        check_list_options(r, watch=True)
        info, q = r.info, req.query
        prefix = info.key(r.namespace, req.name) if req.name else info.collection_prefix(r.namespace)
        self.storage_request = spb.WatchRequest(
            prefix=prefix, resource_version=q.get("resourceVersion", ""),
            label_selector=q.get("labelSelector", ""), field_selector=r.field_selector,
            allow_bookmarks=_true(q.get("allowWatchBookmarks", "")),
            send_initial_events=_true(q.get("sendInitialEvents", "")),
            timeout_seconds=_timeout(q.get("timeoutSeconds", "")),
        )
        self.info, self.table = info, req.table
        self.convertor = handlers.catalogue.convertor(info.group, info.plural)
        self.include = q.get("includeObject", "Metadata")
        self.kind, self.api_version = info.kind, info.api_version
        self._first_table = True

    def frame(self, raw: bytes) -> tuple[bytes | None, bool]:
        """(the frame for a serialized storage WatchEvent or None to skip it, whether it ends the
        watch); a frame is built once for every watch the same event goes to."""
        if not self.table:
            frame = SHARED.get(raw, self.kind, self.api_version)
            if frame is not None:
                return frame, False
        ev = pb.WatchEvent.FromString(raw)
        if ev.type == "ERROR":
            return error_frame(errors.APIError.from_pb(ev.status)), True
        if ev.type not in _TYPES:
            return None, False
        # in this version (converted from the storage version); a bookmark only carries a resourceVersion
        return self._frame(raw, ev, ev.object if ev.type == "BOOKMARK" else self.info.served(ev.object)), False

    async def frame_remotely(self, raw: bytes) -> tuple[bytes | None, bool]:
        """frame() for a kind whose objects convert through a call out (info.converts_remotely): each event's
        object converted on its own, as kube converts a watch's events."""
        if not self.table:
            frame = SHARED.get(raw, self.kind, self.api_version)
            if frame is not None:
                return frame, False
        ev = pb.WatchEvent.FromString(raw)
        if ev.type in ("ERROR", "BOOKMARK") or ev.type not in _TYPES:
            return self.frame(raw)
        return self._frame(raw, ev, (await self.info.served_remotely([ev.object]))[0]), False

    def _frame(self, raw: bytes, ev: pb.WatchEvent, obj: pb.Object) -> bytes:
        head = _TYPES[ev.type]
        if not obj.kind:
            obj.kind, obj.api_version = self.kind, self.api_version
        if self.table and ev.type != "BOOKMARK":
            t = printers.table(self.convertor, [obj], {"resourceVersion": obj.metadata.resource_version},
                               self.include, with_columns=self._first_table)
            self._first_table = False
            return head + orjson.dumps(t) + b"}"
        frame = head + envelope.to_json(obj) + b"}"
        if not self.table:
            SHARED.put(raw, self.kind, self.api_version, frame)
        return frame


async def frames(handlers: Handlers[StorageClient], req: rpb.APIRequest,
                 plan: Plan | None = None) -> AsyncIterator[bytes]:
    """The watch stream; failures after it started (410, a conversion webhook's and the like) are ERROR frames,
    then the end."""
    plan = plan or Plan(handlers, req)
    remote = plan.info.converts_remotely
    try:
        async for raw in handlers.store.watch_raw(plan.storage_request):
            frame, last = await plan.frame_remotely(raw) if remote else plan.frame(raw)
            if frame is not None:
                yield frame
            if last:
                return
    except errors.APIError as e:
        yield error_frame(e)
