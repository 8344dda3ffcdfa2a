"""The storage service's client: its calls behind kube's resource-specific errors, timed per request."""
from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

from prometheus_client import Histogram

from apiary_pb import envelope_pb2 as pb
from apiary_pb import storage_pb2 as spb
from apiary_pb import storage_pb2_grpc as sgrpc
from services.apiserver.resource import ResourceInfo
from services.apiserver.storage.errors import interpret
from services.common import errors, grpcutil, mux, watchmux

STORAGE_DURATION = Histogram(
    "apiary_registry_storage_call_duration_seconds", "Time the registry waits on the storage service.",
    ["operation", "resource"], buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5),
)

Timing = dict[str, float]


class StorageClient:
    """Create/Get/List/Update/Delete/Watch for one catalogue of resources, timed per request."""

    def __init__(self, stub: sgrpc.StorageStub, timeout: float = 30.0, replicas: int = 1) -> None:
        self.stub = stub
        self.timeout = timeout
        # Create/Get/List/Update/Delete share one long-lived stream (services/common/mux/).
        self.calls = mux.MuxClient(stub.Calls, "storage", {
            "Create": pb.Object, "Get": pb.Object, "Update": pb.Object, "Delete": pb.Object,
            "List": spb.ListResponse,
        }, replicas)
        # Every watch shares one Watches stream: an event crosses it once for all the watches it
        # goes to (services/common/watchmux.py).
        self.watches = watchmux.WatchMuxClient(stub.Watches, "storage", replicas=replicas)

    async def _call(self, op: str, info: ResourceInfo, method: str, req: Any, timing: Timing | None,
                    response: type | None = None) -> Any:
        # no span of its own: the storage service's span of the call is the caller's span's child directly
        t0 = time.perf_counter()  # _timed's work, inline: a generator's context manager per call costs more
        try:
            return await self.calls.call(method, req, timeout=self.timeout, response=response)
        finally:
            _observe(op, info, timing, time.perf_counter() - t0)

    async def etcd_health(self) -> list[spb.EtcdServerHealth]:
        """The storage service's etcd servers and their health (componentstatuses)."""
        resp = await grpcutil.call(self.stub.EtcdHealth(spb.EtcdHealthRequest(), timeout=self.timeout), "storage")
        return list(resp.servers)

    async def get(self, info: ResourceInfo, namespace: str, name: str, resource_version: str = "",
                  timing: Timing | None = None) -> pb.Object:
        req = spb.GetRequest(key=info.key(namespace, name), resource_version=resource_version)
        try:
            got = await self._call("get", info, "Get", req, timing)
        except errors.APIError as e:
            raise interpret(e, info, name) from None
        return await _served(info, got)

    async def create(self, info: ResourceInfo, obj: pb.Object, timing: Timing | None = None) -> pb.Object:
        m = obj.metadata
        req = spb.CreateRequest(key=info.key(m.namespace, m.name), object=await _stored(info, obj))
        try:
            created = await self._call("create", info, "Create", req, timing)
        except errors.AlreadyExists:
            # storage names the resource from the key; the registry knows its group too
            raise errors.already_exists(info.plural, info.group, m.name) from None
        return await _served(info, created)

    async def update(self, info: ResourceInfo, obj: pb.Object, expected_resource_version: str,
                     timing: Timing | None = None) -> pb.Object:
        m = obj.metadata
        req = spb.UpdateRequest(key=info.key(m.namespace, m.name), object=await _stored(info, obj),
                                expected_resource_version=expected_resource_version)
        try:
            updated = await self._call("update", info, "Update", req, timing)
        except errors.APIError as e:
            raise interpret(e, info, m.name) from None
        return await _served(info, updated)

    async def delete(self, info: ResourceInfo, namespace: str, name: str, uid: str = "",
                     resource_version: str = "", timing: Timing | None = None) -> pb.Object:
        req = spb.DeleteRequest(key=info.key(namespace, name), precondition_uid=uid,
                                precondition_resource_version=resource_version)
        try:
            deleted = await self._call("delete", info, "Delete", req, timing)
        except errors.APIError as e:
            raise interpret(e, info, name) from None
        return await _served(info, deleted)

    async def list(self, info: ResourceInfo, req: spb.ListRequest, timing: Timing | None = None) -> spb.ListResponse:
        """The items in info's version (converted from the storage version, type meta filled in)."""
        resp: spb.ListResponse = await self._call("list", info, "List", req, timing)
        if info.converts_remotely:  # one call for every item not in this version, as kube converts a list
            items = await info.served_remotely(list(resp.items), batch=True)
        else:
            items = [info.served(e) for e in resp.items]
        if info.conversion is not None:  # served() copied them
            del resp.items[:]
            resp.items.extend(items)
        return resp

    async def list_raw(self, info: ResourceInfo, req: spb.ListRequest,
                       timing: Timing | None = None) -> spb.RawListResponse:
        """list, with the items left serialized (the same answer read as a RawListResponse)."""
        return await self._call("list", info, "List", req, timing, spb.RawListResponse)

    async def list_parts(self, info: ResourceInfo, req: spb.ListRequest,
                         timing: Timing | None = None) -> AsyncIterator[bytes]:
        """list with req.chunked: the answer's parts as they arrive, as storage sends them (wire.ListParts:
        a serialized RawListResponse, then the items' JSON itself)."""
        with _timed("list", info, timing):
            parts = self.calls.call_stream("List", req, timeout=self.timeout)
            async with contextlib.aclosing(parts):
                async for payload, _ in parts:
                    yield payload

    def watch_raw(self, req: spb.WatchRequest) -> AsyncIterator[bytes]:
        """The watch's serialized WatchEvents (the same bytes object for every watch an event goes to)."""
        return self.watches.watch(req)

    async def watch(self, req: spb.WatchRequest) -> AsyncIterator[pb.WatchEvent]:
        async for raw in self.watches.watch(req):
            yield pb.WatchEvent.FromString(raw)


async def _stored(info: ResourceInfo, env: pb.Object) -> pb.Object:
    return await info.stored_remotely(env) if info.converts_remotely else info.stored(env)


async def _served(info: ResourceInfo, env: pb.Object) -> pb.Object:
    return (await info.served_remotely([env]))[0] if info.converts_remotely else info.served(env)


# (operation, resource) -> the histogram's child: labels() validates its arguments on every call
_durations: dict[tuple[str, str], Any] = {}


def _observe(op: str, info: ResourceInfo, timing: Timing | None, seconds: float) -> None:
    """A storage call's time: the duration metric, and the request's storage stage (Server-Timing)."""
    key = (op, info.plural)
    child = _durations.get(key)
    if child is None:
        child = _durations[key] = STORAGE_DURATION.labels(op, info.plural)
    child.observe(seconds)
    if timing is not None:
        timing["storage"] = timing.get("storage", 0.0) + seconds * 1000


@contextlib.contextmanager
def _timed(op: str, info: ResourceInfo, timing: Timing | None) -> Iterator[None]:
    """Time a storage call (a list's parts: the whole of their reading)."""
    t0 = time.perf_counter()
    try:
        yield
    finally:
        _observe(op, info, timing, time.perf_counter() - t0)
