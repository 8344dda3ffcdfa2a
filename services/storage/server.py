"""apiary.Storage, the gRPC face of the storage backend (services/apiserver/storage/backend.py):
each method calls the backend's and turns its APIErrors into Status errors. The unary methods
also run on the registry's long-lived Calls stream (services/common/mux/), and the watches on its
Watches stream (services/common/watchmux.py).
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Awaitable
from typing import Any

import grpc

from apiary_pb import envelope_pb2 as pb
from apiary_pb import storage_pb2 as spb
from apiary_pb import storage_pb2_grpc as sgrpc
from services.apiserver.storage.backend import Backend
from services.common import mux, watchmux
from services.common.grpcutil import api_method, api_stream


def serialize(message: Any) -> bytes:
    """gRPC response serializer: a message, or bytes that are already its serialization."""
    return message if type(message) is bytes else message.SerializeToString()


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
        response_serializer=pb.Frames.SerializeToString,
    )
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("apiary.Storage", handlers),))
    if hasattr(server, "add_registered_method_handlers"):
        server.add_registered_method_handlers("apiary.Storage", handlers)


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
                    context: grpc.aio.ServicerContext) -> AsyncIterator[pb.Frames]:
        """The unary methods on the registry's long-lived stream (services/common/mux/)."""
        async for frame in mux.serve_mux(request_iterator, context, self._mux_methods):
            yield frame

    @api_method
    def Create(self, request: spb.CreateRequest, context: grpc.aio.ServicerContext) -> Awaitable[pb.Object]:
        return self.backend.create(request)

    @api_method
    def Update(self, request: spb.UpdateRequest, context: grpc.aio.ServicerContext) -> Awaitable[pb.Object]:
        return self.backend.update(request)

    @api_method
    def Delete(self, request: spb.DeleteRequest, context: grpc.aio.ServicerContext) -> Awaitable[pb.Object]:
        return self.backend.delete(request)

    @api_method
    def Get(self, request: spb.GetRequest, context: grpc.aio.ServicerContext) -> Awaitable[pb.Object | bytes]:
        return self.backend.get(request)

    @api_method
    def List(self, request: spb.ListRequest, context: grpc.aio.ServicerContext) -> Awaitable[Any]:
        return self.backend.list(request)

    async def EtcdHealth(self, request: spb.EtcdHealthRequest,
                         context: grpc.aio.ServicerContext) -> spb.EtcdHealthResponse:
        etcd = self.backend.etcd
        error = await etcd.health_error()
        return spb.EtcdHealthResponse(servers=[spb.EtcdServerHealth(endpoint=etcd.endpoint, healthy=not error,
                                                                     error=error)])

    @api_stream
    def Watch(self, request: spb.WatchRequest, context: grpc.aio.ServicerContext) -> AsyncIterator[bytes]:
        return self.backend.watch(request)

    async def Watches(self, request_iterator: AsyncIterator[pb.WatchControl],
                      context: grpc.aio.ServicerContext) -> AsyncIterator[pb.WatchBatch]:
        """Watch, multiplexed: every watch a peer holds on one stream, each event sent once per
        stream with the ids of the watches it goes to (services/common/watchmux.py)."""
        async for batch in watchmux.serve(request_iterator, self._mux_watch):
            yield batch

    async def _mux_watch(self, wid: int, raw: bytes, sink: watchmux.Sink) -> None:
        """One watch of a Watches stream: live events go from the cache straight to the sink."""
        await self.backend.watch_into(spb.WatchRequest.FromString(raw), functools.partial(sink.send, wid))
