"""Storage.Watch read event by event: each stream message (WatchEvents) holds one or more events."""
from __future__ import annotations

from collections import deque
from collections.abc import AsyncIterator

import grpc

from apiary_pb import envelope_pb2 as pb
from apiary_pb import storage_pb2 as spb
from apiary_pb import storage_pb2_grpc as sgrpc


class WatchStream:
    """One Storage.Watch call; read() is the next WatchEvent, None once the stream has ended."""

    def __init__(self, stub: sgrpc.StorageStub, request: spb.WatchRequest) -> None:
        self.call = stub.Watch(request)
        self.pending: deque[pb.WatchEvent] = deque()

    async def read(self) -> pb.WatchEvent | None:
        while not self.pending:
            message = await self.call.read()
            if message is grpc.aio.EOF:
                return None
            self.pending.extend(pb.WatchEvent.FromString(e) for e in message.events)
        return self.pending.popleft()

    async def __aiter__(self) -> AsyncIterator[pb.WatchEvent]:
        while (ev := await self.read()) is not None:
            yield ev

    def cancel(self) -> None:
        self.call.cancel()
