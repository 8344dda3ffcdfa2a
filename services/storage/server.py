"""apiary.Storage, the gRPC face of the storage backend (services/apiserver/storage/backend.py):
each method calls the backend's and turns its APIErrors into Status errors. The unary methods
also run on the registry's long-lived Calls stream (services/common/mux/), and the watches on its
Watches stream (services/common/watchmux.py).
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Awaitable, Iterator
from typing import Any, TypeVar

import grpc

from apiary_pb import envelope_pb2 as pb
from apiary_pb import storage_pb2 as spb
from apiary_pb import storage_pb2_grpc as sgrpc
from services.apiserver.storage.backend import Backend
from services.common import mux, protowire, tracing, watchmux
from services.common.grpcutil import api_method, api_stream


def serialize(message: Any) -> bytes:
    """gRPC response serializer: a message, or bytes that are already its serialization."""
    return message if type(message) is bytes else message.SerializeToString()


def add_to_server(servicer: StorageServicer, server: grpc.aio.Server) -> None:
    """sgrpc.add_StorageServicer_to_server, except that every response serializer passes bytes through:
    Get, List and Watch answer from the watch cache with already-serialized messages (wire.py), and
    the Calls stream's messages come serialized (mux.serve_mux)."""
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
    handlers["Stats"] = grpc.unary_unary_rpc_method_handler(
        servicer.Stats, request_deserializer=spb.StatsRequest.FromString,
        response_serializer=spb.StatsResponse.SerializeToString)
    handlers["EtcdHealth"] = grpc.unary_unary_rpc_method_handler(
        servicer.EtcdHealth, request_deserializer=spb.EtcdHealthRequest.FromString,
        response_serializer=spb.EtcdHealthResponse.SerializeToString,
    )
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
        response_serializer=serialize,  # mux.serve_mux's messages come serialized
    )
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("apiary.Storage", handlers),))
    if hasattr(server, "add_registered_method_handlers"):
        server.add_registered_method_handlers("apiary.Storage", handlers)


T = TypeVar("T")
WATCH_MESSAGE_BYTES = 1 << 20
# A watch on a stream of its own writes at most one message per 50 ms (an event after a quiet spell
# goes at once): at 100 events/s that is 5 events a message instead of 5 messages, each costing the
# server and the client about 40 us of gRPC's CPU (100 such watches: 0.8 of a core, half of this machine's).
WATCH_WRITE_INTERVAL = 0.05


def watch_events(events: list[bytes]) -> Iterator[bytes]:
    """Serialized WatchEvents messages holding the events in order, each at most about
    WATCH_MESSAGE_BYTES (an initial list can be far larger than a message may be)."""
    parts: list[bytes] = []
    size = 0
    for event in events:
        if size > WATCH_MESSAGE_BYTES:
            yield b"".join(parts)
            parts, size = [], 0
        parts += protowire.bytes_field(1, event)
        size += len(event)
    yield b"".join(parts)


async def served(method: str, key: str, call: Awaitable[T]) -> T:
    """A call of a sampled request in its span, named as a gRPC server names it ("apiary.Storage/Get"), the
    caller's span its parent: the watch cache's part and etcd's are events on it (services/apiserver/storage)."""
    with tracing.span(f"apiary.Storage/{method}", {"key": key}):
        return await call


class StorageServicer(sgrpc.StorageServicer):
    """The backend's methods as gRPC methods. Each returns the backend's coroutine (or async
    iterator) for the error wrapper to await: no frame of its own on the way to the cache."""

    def __init__(self, backend: Backend) -> None:
        self.backend = backend
        self._mux_methods = mux.unary_methods(self, {
            "Create": spb.CreateRequest, "Get": spb.GetRequest, "List": spb.ListRequest,
            "Update": spb.UpdateRequest, "Delete": spb.DeleteRequest,
        })

    async def Calls(self, request_iterator: AsyncIterator[pb.Frames],
                    context: grpc.aio.ServicerContext) -> AsyncIterator[bytes]:
        """The unary methods on the registry's long-lived stream (services/common/mux/)."""
        async for frame in mux.serve_mux(request_iterator, context, self._mux_methods):
            yield frame

    @api_method
    def Create(self, request: spb.CreateRequest, context: grpc.aio.ServicerContext) -> Awaitable[pb.Object]:
        if tracing.ENABLED and tracing.recording():
            return served("Create", request.key, self.backend.create(request))
        return self.backend.create(request)

    @api_method
    def Update(self, request: spb.UpdateRequest, context: grpc.aio.ServicerContext) -> Awaitable[pb.Object]:
        if tracing.ENABLED and tracing.recording():
            return served("Update", request.key, self.backend.update(request))
        return self.backend.update(request)

    @api_method
    def Delete(self, request: spb.DeleteRequest, context: grpc.aio.ServicerContext) -> Awaitable[pb.Object]:
        if tracing.ENABLED and tracing.recording():
            return served("Delete", request.key, self.backend.delete(request))
        return self.backend.delete(request)

    @api_method
    def Get(self, request: spb.GetRequest, context: grpc.aio.ServicerContext) -> Awaitable[pb.Object | bytes]:
        if tracing.ENABLED and tracing.recording():
            return served("Get", request.key, self.backend.get(request))
        return self.backend.get(request)

    @api_method
    def List(self, request: spb.ListRequest, context: grpc.aio.ServicerContext) -> Awaitable[Any]:
        if tracing.ENABLED and tracing.recording():
            return served("List", request.prefix, self.backend.list(request))
        return self.backend.list(request)

    async def Stats(self, request: spb.StatsRequest, context: grpc.aio.ServicerContext) -> spb.StatsResponse:
        return self.backend.stats()

    async def EtcdHealth(self, request: spb.EtcdHealthRequest,
                         context: grpc.aio.ServicerContext) -> spb.EtcdHealthResponse:
        etcd = self.backend.etcd
        error = await etcd.health_error()
        return spb.EtcdHealthResponse(servers=[spb.EtcdServerHealth(endpoint=etcd.endpoint, healthy=not error,
                                                                     error=error)])

    @api_stream
    async def Watch(self, request: spb.WatchRequest, context: grpc.aio.ServicerContext) -> AsyncIterator[bytes]:
        """The watch's events, as many per message (WatchEvents) as were queued when the stream
        could write: a stream message costs gRPC about 50 us of CPU whatever it carries, so a watch
        that fell behind catches up instead of paying that per event."""
        async for batch in self.backend.watch_batches(request, WATCH_WRITE_INTERVAL):
            for message in watch_events(batch):
                yield message

    async def Watches(self, request_iterator: AsyncIterator[pb.WatchControl],
                      context: grpc.aio.ServicerContext) -> AsyncIterator[pb.WatchBatch]:
        """Watch, multiplexed: every watch a peer holds on one stream, each event sent once per
        stream with the ids of the watches it goes to (services/common/watchmux.py)."""
        async for batch in watchmux.serve(request_iterator, self._mux_watch):
            yield batch

    async def _mux_watch(self, wid: int, raw: bytes, sink: watchmux.Sink) -> None:
        """One watch of a Watches stream: live events go from the cache straight to the sink."""
        await self.backend.watch_into(spb.WatchRequest.FromString(raw), functools.partial(sink.send, wid))
