"""The Seats stream over real gRPC (plaintext, in-process), as the proxy drives it."""
from __future__ import annotations

import asyncio
import dataclasses
import socket

import pytest

from apiary_pb import apf_pb2 as fpb
from apiary_pb import apf_pb2_grpc as fgrpc
from apiary_pb import envelope_pb2 as pb
from services.apf.__main__ import build, parse_args
from services.apf.config import BOOTSTRAP, Configuration
from services.apf.server import FlowControlServicer
from services.common import grpcutil
from services.common.identity import user_pb
from tests.waiting import until

ALICE = user_pb("alice", ["system:authenticated"])
BOB = user_pb("bob", ["system:authenticated"])


def fixed(cfg: Configuration, *names: str) -> Configuration:
    """cfg with the levels `names` neither lending nor borrowing: their current limit is their nominal one."""
    levels = tuple(dataclasses.replace(pl, lendable_percent=0, borrowing_limit_percent=0) if pl.name in names else pl
                   for pl in cfg.priority_levels)
    return dataclasses.replace(cfg, priority_levels=levels)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
async def apf():
    # global-default gets ceil(3 * 20 / 245) = 1 seat; neither lending nor borrowing, it keeps that one
    ctl = build(parse_args(["--max-requests-inflight", "3", "--max-mutating-requests-inflight", "0",
                            "--apf-queue-wait-seconds", "0.5", "--insecure-internal"]))
    ctl.reconfigure(fixed(BOOTSTRAP, "global-default"))
    assert ctl.levels["global-default"].current_limit == 1
    servicer = FlowControlServicer(ctl)
    address = f"127.0.0.1:{free_port()}"
    server = grpcutil.make_server(None, address)
    fgrpc.add_FlowControlServicer_to_server(servicer, server)
    await server.start()
    channel = grpcutil.make_channel(None, address)
    try:
        yield fgrpc.FlowControlStub(channel), ctl, servicer
    finally:
        await channel.close()
        await server.stop(None)


class Stream:
    """A proxy-side stream: send acquires and releases, read responses."""

    def __init__(self, stub: fgrpc.FlowControlStub) -> None:
        self.outbox: asyncio.Queue[fpb.SeatRequest | None] = asyncio.Queue()
        self.call = stub.Seats(self._requests())
        self.inbox: list[fpb.SeatResponse] = []

    async def _requests(self):
        while (msg := await self.outbox.get()) is not None:
            yield fpb.SeatRequests(requests=[msg])

    def acquire(self, request_id: int, user=ALICE) -> None:
        self.outbox.put_nowait(fpb.SeatRequest(id=request_id, acquire=pb.RequestAttributes(
            user=user, verb="get", resource_request=True, resource="pods", namespace="default", name="x")))

    def release(self, request_id: int) -> None:
        self.outbox.put_nowait(fpb.SeatRequest(id=request_id, release=True))

    async def read(self, timeout: float = 2.0) -> fpb.SeatResponse:
        if not self.inbox:
            batch = await asyncio.wait_for(self.call.read(), timeout)
            self.inbox.extend(batch.responses)
        return self.inbox.pop(0)


async def test_two_streams_share_the_level_and_a_broken_stream_releases(apf) -> None:
    stub, ctl, servicer = apf
    qs = ctl.levels["global-default"].queueset
    s1, s2 = Stream(stub), Stream(stub)
    s1.acquire(1)
    r = await s1.read()
    assert r.id == 1 and r.granted
    assert r.priority_level == "global-default" and r.flow_schema == "global-default"
    assert r.flow_schema_uid and r.priority_level_uid

    s2.acquire(1, BOB)       # same id on another stream: ids are per stream
    s1.acquire(2)            # queued behind s2's request
    await until(lambda: qs.requests_waiting == 2)

    s1.call.cancel()         # the proxy holding the seat and a queued request goes away
    r = await s2.read()
    assert r.id == 1 and r.granted
    await until(lambda: qs.requests_waiting == 0 and qs.seats_in_use == 1)
    await until(lambda: servicer.streams == 1)

    s2.release(1)
    await until(lambda: qs.seats_in_use == 0)
    s2.acquire(2, BOB)
    assert (await s2.read()).granted
    s2.outbox.put_nowait(None)  # a clean end of stream releases too
    await until(lambda: qs.seats_in_use == 0 and servicer.streams == 0)


async def test_queued_request_times_out(apf) -> None:
    stub, ctl, _ = apf
    s = Stream(stub)
    s.acquire(1)
    assert (await s.read()).granted
    s.acquire(2)
    r = await s.read()
    assert r.id == 2 and not r.granted and r.reason == "time-out" and r.retry_after_seconds >= 1
    s.release(2)             # releasing a rejected id is harmless
    s.release(1)
    await until(lambda: ctl.levels["global-default"].queueset.seats_in_use == 0)
    s.call.cancel()


async def test_release_of_a_queued_request_withdraws_it(apf) -> None:
    stub, ctl, _ = apf
    qs = ctl.levels["global-default"].queueset
    s = Stream(stub)
    s.acquire(1)
    assert (await s.read()).granted
    s.acquire(2)
    await until(lambda: qs.requests_waiting == 1)
    s.release(2)
    await until(lambda: qs.requests_waiting == 0)
    s.release(1)
    s.acquire(3)
    assert (await s.read()).id == 3      # no answer was ever sent for the withdrawn id 2
    s.call.cancel()
    await until(lambda: qs.seats_in_use == 0)


async def test_each_sampled_request_has_its_seat_span(apf) -> None:
    """The seat decisions of requests sharing a stream are spans of their own parents (the traceparent
    each SeatRequest carries), ended when decided, queued or withdrawn; an unsampled request has none."""
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from services.common import tracing

    stub, ctl, _ = apf
    exporter = InMemorySpanExporter()
    tracing.start("apf", tracing.TracingConfiguration(), exporter)
    try:
        parents = {i: f"00-{i:032x}-{i:016x}-01" for i in (1, 2, 3)}
        s = Stream(stub)

        def acquire(request_id: int, traceparent: str) -> None:
            s.outbox.put_nowait(fpb.SeatRequest(id=request_id, traceparent=traceparent, acquire=pb.RequestAttributes(
                user=ALICE, verb="get", resource_request=True, resource="pods", namespace="default", name="x")))

        acquire(1, parents[1])
        assert (await s.read()).granted
        acquire(2, parents[2])                       # queued behind 1
        acquire(3, parents[3])
        acquire(4, f"00-{4:032x}-{4:016x}-00")      # not sampled
        await until(lambda: ctl.levels["global-default"].queueset.requests_waiting == 3)
        s.release(3)                                 # withdrawn while queued
        s.release(1)                                 # 2 gets the seat
        assert (await s.read()).id == 2
        s.release(2)
        assert (await s.read()).id == 4
        s.release(4)
        tracing.flush()
        spans = {s.parent.trace_id: s for s in exporter.get_finished_spans()}
        assert set(spans) == {1, 2, 3}
        for i, span in spans.items():
            assert span.name == "apf seat" and span.parent.span_id == i and span.parent.is_remote
        assert spans[1].attributes["decision"] == spans[2].attributes["decision"] == "granted"
        assert spans[2].attributes["priority_level"] == "global-default"
        assert spans[3].attributes["decision"] == "withdrawn"
        s.call.cancel()
    finally:
        tracing.shutdown()
