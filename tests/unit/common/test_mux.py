"""Unary calls multiplexed on one stream: results, errors, concurrency, and a peer that goes away."""
from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator

import grpc
import pytest
from prometheus_client import REGISTRY

from apiary_pb import envelope_pb2 as pb
from apiary_pb import registry_pb2 as rpb
from apiary_pb import registry_pb2_grpc as rgrpc
from services.common import grpcutil, mux
from services.common.errors import APIError, NotFound, ServiceUnavailable, not_found
from services.common.mux.streams import read_stream
from tests.waiting import until


class Echo(rgrpc.RegistryServicer):
    held = asyncio.Event()  # a call named "held" answers once the test sets it

    @grpcutil.api_method
    async def Handle(self, request, context):
        if request.name == "missing":
            raise not_found("configmaps", "", "missing")
        if request.name == "boom":
            raise RuntimeError("boom")
        if request.name.startswith("parts-"):
            n = int(request.query["parts"])
            size = int(request.query.get("size", "10"))

            async def parts():
                for i in range(n):
                    if request.name == "parts-fail" and i == 2:
                        raise not_found("configmaps", "", "gone")
                    await asyncio.sleep(0)
                    yield bytes([65 + i]) * size
            return mux.Streamed(parts() if request.query.get("async") else [bytes([65 + i]) * size for i in range(n)])
        if request.name == "held":
            await self.held.wait()
        await asyncio.sleep(float(request.query.get("sleep", "0")))
        return rpb.APIResponse(code=200, body=request.name.encode())

    async def Calls(self, request_iterator, context):
        async for frame in mux.serve_mux(request_iterator, context,
                                         mux.unary_methods(self, {"Handle": rpb.APIRequest})):
            yield frame


def handles_started() -> float:
    """Handle calls the servers of this process have started (serve_mux counts each frame's call)."""
    return REGISTRY.get_sample_value("grpc_server_started_total", {"grpc_method": "Handle"}) or 0.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def start(port: int) -> grpc.aio.Server:
    server = grpcutil.make_server(None, f"127.0.0.1:{port}")
    mux.add_servicer(rgrpc.add_RegistryServicer_to_server, Echo(), server)
    await server.start()
    return server


@contextlib.asynccontextmanager
async def echo_client() -> AsyncIterator[mux.MuxClient]:
    """A mux client on a fresh Echo server of its own, both closed at the end."""
    port = free_port()
    server = await start(port)
    channel = grpcutil.make_channel(None, f"127.0.0.1:{port}")
    try:
        yield mux.MuxClient(rgrpc.RegistryStub(channel).Calls, "registry", {"Handle": rpb.APIResponse})
    finally:
        await channel.close()
        await server.stop(None)


async def test_calls_errors_and_concurrency():
    async with echo_client() as client:
        resp = await client.call("Handle", rpb.APIRequest(name="a"))
        assert resp.code == 200 and resp.body == b"a"
        with pytest.raises(NotFound) as e:
            await client.call("Handle", rpb.APIRequest(name="missing"))
        assert e.value.message == 'configmaps "missing" not found'
        with pytest.raises(APIError) as e:
            await client.call("Handle", rpb.APIRequest(name="boom"))
        assert e.value.code == 500
        # answers come back by id, not in order: the slow call does not hold up the fast ones
        Echo.held = asyncio.Event()
        slow = asyncio.create_task(client.call("Handle", rpb.APIRequest(name="held")))
        fast = await asyncio.gather(*(client.call("Handle", rpb.APIRequest(name=f"n{i}")) for i in range(50)))
        assert [r.body for r in fast] == [f"n{i}".encode() for i in range(50)]
        assert not slow.done()
        Echo.held.set()
        assert (await slow).body == b"held"


async def test_a_call_past_its_timeout_is_a_timeout_and_the_stream_serves_on():
    async with echo_client() as client:
        with pytest.raises(APIError) as e:
            await client.call("Handle", rpb.APIRequest(name="late", query={"sleep": "5"}), timeout=0.2)
        assert e.value.code == 504 and "(registry)" in e.value.message
        assert (await client.call("Handle", rpb.APIRequest(name="next"), timeout=5)).body == b"next"


async def test_peer_restart_fails_pending_and_recovers():
    port = free_port()
    server = await start(port)
    channel = grpcutil.make_channel(None, f"127.0.0.1:{port}")
    client = mux.MuxClient(rgrpc.RegistryStub(channel).Calls, "registry", {"Handle": rpb.APIResponse})
    try:
        started = handles_started()
        pending = asyncio.create_task(client.call("Handle", rpb.APIRequest(name="x", query={"sleep": "5"})))
        await until(lambda: handles_started() > started, what="the call running on the server")
        await server.stop(None)
        with pytest.raises(APIError) as e:
            await pending
        assert e.value.code in (500, 503)
        server = await start(port)
        for _ in range(50):
            try:
                resp = await client.call("Handle", rpb.APIRequest(name="back"), timeout=2)
                break
            except ServiceUnavailable:
                await asyncio.sleep(0.1)
        assert resp.body == b"back"
    finally:
        await channel.close()
        await server.stop(None)


async def test_answers_in_parts():
    """mux.Streamed: each part its own frame, read as they come by call_stream; an error after some
    parts ends the stream with it; a one-part answer and a plain answer are one item."""
    async with echo_client() as client:
        async def read(name: str, **query: str) -> list[tuple[bytes, bool]]:
            return [p async for p in client.call_stream("Handle", rpb.APIRequest(name=name, query=query))]

        assert await read("parts-list", parts="3") == [(b"A" * 10, True), (b"B" * 10, True), (b"C" * 10, False)]
        assert await read("parts-async", parts="4", **{"async": "1"}) == [
            (b"A" * 10, True), (b"B" * 10, True), (b"C" * 10, True), (b"D" * 10, False)]
        assert await read("parts-one", parts="1") == [(b"A" * 10, False)]
        assert await read("parts-none", parts="0") == [(b"", False)]
        plain = await read("x")
        assert len(plain) == 1 and not plain[0][1] and rpb.APIResponse.FromString(plain[0][0]).body == b"x"
        got: list[bytes] = []
        with pytest.raises(NotFound):
            async for part, _ in client.call_stream("Handle", rpb.APIRequest(name="parts-fail", query={
                    "parts": "5", "async": "1"})):
                got.append(part)
        assert got == [b"A" * 10, b"B" * 10]
        # large parts travel in separate stream messages, and calls in between still get through
        big = asyncio.create_task(read("parts-big", parts="8", size=str(mux.PART_BYTES)))
        small = await asyncio.gather(*(client.call("Handle", rpb.APIRequest(name=f"s{i}")) for i in range(5)))
        assert [r.body for r in small] == [f"s{i}".encode() for i in range(5)]
        assert [len(p) for p, _ in await big] == [mux.PART_BYTES] * 8


class _EndedStream:
    """A long-lived stream that yields nothing and ends with the given gRPC error."""

    def __init__(self, error: grpc.aio.AioRpcError) -> None:
        self.error = error

    def __aiter__(self):
        return self

    async def __anext__(self):
        raise self.error


def _rpc_error(code: grpc.StatusCode, details: str, trailers: tuple = ()) -> grpc.aio.AioRpcError:
    return grpc.aio.AioRpcError(code, grpc.aio.Metadata(), grpc.aio.Metadata(*trailers), details)


@pytest.mark.parametrize("code,details", [
    (grpc.StatusCode.INTERNAL, "Internal error from Core"),
    (grpc.StatusCode.INTERNAL, "Received RST_STREAM with error code 2"),
    (grpc.StatusCode.UNKNOWN, "Stream removed"),
    (grpc.StatusCode.UNAVAILABLE, "Socket closed"),
])
def test_a_stream_broken_under_the_peer_ends_its_calls_with_503(code: grpc.StatusCode, details: str) -> None:
    err = asyncio.run(read_stream(_EndedStream(_rpc_error(code, details)), lambda m: None, "peer", "stream"))
    assert isinstance(err, ServiceUnavailable)
    assert err.headers == {"Retry-After": "1"}
    assert details in err.message


def test_a_stream_ended_by_the_peer_with_its_status_ends_its_calls_with_that_status() -> None:
    status = not_found("configmaps", "", "x")
    ended = _EndedStream(_rpc_error(status.grpc_code(), status.message, status.grpc_trailers()))
    err = asyncio.run(read_stream(ended, lambda m: None, "peer", "stream"))
    assert isinstance(err, NotFound)
    assert err.message == status.message


def test_a_large_message_serialized_by_hand_is_its_frames():
    """flow.encode: a stream message with a large part is serialized by hand, a small one by the
    protobuf library; both are the same Frames message, byte for byte."""
    from services.common.mux.flow import LARGE, encode

    error = NotFound("gone").to_pb()
    for big in (b"", b"x" * LARGE, b"y" * (3 * LARGE + 1)):
        batch = [(1, b"a", None, False), (2**40, big, None, True), (3, b"", error, False),
                 (4, b"", None, False)]
        expected = pb.Frames(frames=[pb.Frame(id=1, payload=b"a"), pb.Frame(id=2**40, payload=big, more=True),
                                     pb.Frame(id=3, error=error), pb.Frame(id=4)]).SerializeToString()
        assert encode(batch, sum(len(a[1]) for a in batch)) == expected
