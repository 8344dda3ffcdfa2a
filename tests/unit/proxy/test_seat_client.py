"""The APF seat client when the apf service is unreachable (no task or generator left behind) or stalled."""
import asyncio
import gc
import logging

import pytest

from apiary_pb import apf_pb2_grpc as fgrpc
from apiary_pb import envelope_pb2 as pb
from services.common import grpcutil
from services.common.errors import ServiceUnavailable
from services.proxy.filters.apf import SEAT_EXEMPT, SEAT_READ_ONLY, SeatClient
from tests.integration.procs import free_port


async def test_unreachable_apf_leaves_no_pending_task(caplog: pytest.LogCaptureFixture) -> None:
    """Each failed seat stream ends the generator gRPC reads its requests from; before, the task
    reading it was left pending and destroyed later ("Task was destroyed but it is pending!",
    "aclose(): asynchronous generator is already running")."""
    loop = asyncio.get_running_loop()
    errors: list[str] = []
    # only these: grpc's own poller may report unrelated errors when tests share a process
    loop.set_exception_handler(lambda _loop, ctx: errors.append(f"{ctx['message']} {ctx.get('exception')!r}"))
    channel = grpcutil.make_channel(None, f"127.0.0.1:{free_port()}")
    seats = SeatClient(fgrpc.FlowControlStub(channel), channel)
    seats.start()
    alice = pb.RequestAttributes(user={"name": "alice", "groups": ["system:authenticated"]}, verb="get")
    admin = pb.RequestAttributes(user={"name": "admin", "groups": ["system:masters"]}, verb="create")
    try:
        with caplog.at_level(logging.WARNING, "services.proxy.filters.apf"):
            for _ in range(6):
                seat = await asyncio.wait_for(seats.acquire(alice), 5)
                assert seat.kind == SEAT_READ_ONLY and seat.headers() == []
                seats.release(seat)
                assert (await seats.acquire(admin)).kind == SEAT_EXEMPT
                await asyncio.sleep(0.3)
                gc.collect()
        assert seats.falling_back
        assert sum("falling back to max-in-flight limits" in r.message for r in caplog.records) == 1
    finally:
        await seats.stop()
        await channel.close()
    gc.collect()
    await asyncio.sleep(0.05)
    assert not [e for e in errors if "Task was destroyed" in e or "aclose()" in e], errors


class _SilentSeats:
    """A Seats stream that takes every request and never answers (a stalled apf service)."""

    def __init__(self, requests: object) -> None:
        self.requests = requests
        self.cancelled = False

    def __aiter__(self) -> "_SilentSeats":
        return self

    async def __anext__(self) -> object:
        async for _ in self.requests:  # type: ignore[attr-defined]
            pass
        await asyncio.Event().wait()
        raise StopAsyncIteration

    def cancel(self) -> None:
        self.cancelled = True


class _SilentStub:
    def Seats(self, requests: object) -> _SilentSeats:
        return _SilentSeats(requests)


async def test_an_unanswered_seat_request_gives_up_after_the_acquire_timeout() -> None:
    """A stalled apf service: the request gets a 503 once the acquire timeout has passed (one timer sweeps
    them all), and nothing of it is left waiting."""
    seats = SeatClient(_SilentStub(), acquire_timeout=0.2)  # type: ignore[arg-type]
    seats.start()
    alice = pb.RequestAttributes(user={"name": "alice", "groups": ["system:authenticated"]}, verb="get")
    try:
        while seats._queue is None:
            await asyncio.sleep(0.01)
        with pytest.raises(ServiceUnavailable, match="no answer in time"):
            await asyncio.wait_for(seats.acquire(alice), 10)
        assert not seats._pending
    finally:
        await seats.stop()
