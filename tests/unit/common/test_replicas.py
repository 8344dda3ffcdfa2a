"""A peer as several replicas: the address forms, calls spread over the replicas and failing over
when one stops, and the audit ID that travels with each call into the log lines of its handler."""
from __future__ import annotations

import asyncio
import logging

import pytest

from apiary_pb import registry_pb2 as rpb
from apiary_pb import registry_pb2_grpc as rgrpc
from services.common import auditid, grpcutil, mux
from services.common.errors import APIError
from services.common.mux import client as mux_client
from services.common.mux import streams

from .test_mux import Echo, free_port


class Tagged(Echo):
    """Answers with its own tag and the audit ID the call was handled under."""

    def __init__(self, tag: str) -> None:
        self.tag = tag

    @grpcutil.api_method
    async def Handle(self, request, context):
        logging.getLogger("test.replicas").info("handled %s", request.name)
        return rpb.APIResponse(code=200, body=f"{self.tag} {auditid.current()}".encode())


async def start(tag: str) -> tuple[object, int]:
    return await start_on(tag, free_port())


async def start_on(tag: str, port: int) -> tuple[object, int]:
    server = grpcutil.make_server(None, f"127.0.0.1:{port}")
    mux.add_servicer(rgrpc.add_RegistryServicer_to_server, Tagged(tag), server)
    await server.start()
    return server, port


def test_targets():
    one = grpcutil.target("127.0.0.1:20054")
    assert (one.target, one.replicas, one.options) == ("127.0.0.1:20054", 1, ())
    two = grpcutil.target("127.0.0.1:1, 127.0.0.2:2")
    assert two.target == "ipv4:127.0.0.1:1,127.0.0.2:2" and two.replicas == 2
    assert ("grpc.lb_policy_name", "round_robin") in two.options
    assert ("grpc.ssl_target_name_override", "127.0.0.1") in two.options  # what the certificates name
    assert grpcutil.target("[::1]:1,[::1]:2").target == "ipv6:[::1]:1,[::1]:2"
    named = grpcutil.target("localhost:20054")
    assert named.target == "dns:///localhost:20054" and named.replicas >= 1
    with pytest.raises(ValueError):
        grpcutil.target("127.0.0.1:1,[::1]:2")
    with pytest.raises(ValueError):
        grpcutil.target("a.example:1,b.example:2")


async def test_calls_spread_over_replicas_and_fail_over():
    (a, pa), (b, pb_) = await start("a"), await start("b")
    address = f"127.0.0.1:{pa},127.0.0.1:{pb_}"
    channel = grpcutil.make_channel(None, address)
    client = mux.MuxClient(rgrpc.RegistryStub(channel).Calls, "registry", {"Handle": rpb.APIResponse},
                           grpcutil.target(address).replicas)
    try:
        # both replicas connected (unary calls go to each in turn) before the streams open, so
        # that each stream lands on its own
        stub, seen = rgrpc.RegistryStub(channel), set()
        while seen != {b"a", b"b"}:
            seen.add((await stub.Handle(rpb.APIRequest(name="warm"), wait_for_ready=True)).body.split()[0])
        served = {(await client.call("Handle", rpb.APIRequest(name=str(i)))).body.split()[0] for i in range(8)}
        assert served == {b"a", b"b"}
        await a.stop(None)
        answered = []
        for i in range(20):
            try:
                answered.append((await client.call("Handle", rpb.APIRequest(name=str(i)))).body.split()[0])
            except APIError as e:  # only a call that was on its way to the stopped replica
                assert e.code == 503, e
        assert len(answered) >= 18 and set(answered) == {b"b"}
    finally:
        await channel.close()
        await b.stop(None)


async def test_a_replica_back_gets_calls_again(monkeypatch):
    """Streams move every REBALANCE seconds (mux.streams.Spread), the calls on them answered first: a
    replica that was down gets its share again."""
    monkeypatch.setattr(mux_client, "REBALANCE", 0.3)
    a, pa = await start("a")
    b, pb_ = await start("b")
    address = f"127.0.0.1:{pa},127.0.0.1:{pb_}"
    channel = grpcutil.make_channel(None, address)
    client = mux.MuxClient(rgrpc.RegistryStub(channel).Calls, "registry", {"Handle": rpb.APIResponse}, 2)
    try:
        await a.stop(None)  # every stream opens on b
        assert {(await client.call("Handle", rpb.APIRequest(name="x"))).body.split()[0] for _ in range(4)} == {b"b"}
        a, _ = await start_on("a", pa)
        stub, seen = rgrpc.RegistryStub(channel), set()
        while b"a" not in seen:  # the channel is connected to a again
            seen.add((await stub.Handle(rpb.APIRequest(name="warm"), wait_for_ready=True)).body.split()[0])
        deadline = asyncio.get_running_loop().time() + 10
        served: set[bytes] = set()
        while b"a" not in served:
            assert asyncio.get_running_loop().time() < deadline, "no call went to the replica back"
            # calls in flight while streams move: every one is answered
            answers = await asyncio.gather(*(client.call("Handle", rpb.APIRequest(name=str(i))) for i in range(8)))
            served |= {r.body.split()[0] for r in answers}
            await asyncio.sleep(0.05)
    finally:
        await channel.close()
        await a.stop(None)
        await b.stop(None)


async def test_audit_id_travels_with_the_call_into_its_log_lines(caplog):
    server, port = await start("a")
    channel = grpcutil.make_channel(None, f"127.0.0.1:{port}")
    client = mux.MuxClient(rgrpc.RegistryStub(channel).Calls, "registry", {"Handle": rpb.APIResponse})
    handler = logging.StreamHandler()
    handler.addFilter(auditid.LogFilter())
    handler.setFormatter(logging.Formatter("%(message)s%(audit)s"))
    lines: list[str] = []
    handler.emit = lambda record: lines.append(handler.format(record))  # type: ignore[method-assign]
    logger = logging.getLogger("test.replicas")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        async def request(aid: str) -> bytes:
            auditid.AUDIT_ID.set(aid)  # as the proxy does for each request's task
            return (await client.call("Handle", rpb.APIRequest(name=aid or "none"))).body

        assert await asyncio.create_task(request("req-1")) == b"a req-1"
        assert await asyncio.create_task(request("")) == b"a "
        # unary calls carry it as metadata
        auditid.AUDIT_ID.set("req-2")
        resp = await rgrpc.RegistryStub(channel).Handle(rpb.APIRequest(name="u"), metadata=auditid.metadata())
        assert resp.body == b"a req-2"
        assert lines == ["handled req-1 audit-id=req-1", "handled none", "handled u audit-id=req-2"]
    finally:
        logger.removeHandler(handler)
        await channel.close()
        await server.stop(None)


def test_streams_move_often_for_a_while_after_one_died(monkeypatch):
    """Spread: a stream opened in place of one that died is retired after a sixth of `rebalance`, and
    so are those opened for `rebalance` seconds after, so a replica started again gets calls back
    soon; then streams move at the regular pace."""
    now = [100.0]
    monkeypatch.setattr(streams.time, "monotonic", lambda: now[0])

    class Stream:
        def __init__(self) -> None:
            self.alive, self.retired = True, False

        def retire(self) -> None:
            self.retired = True

    spread = streams.Spread(Stream, 1, rebalance=30.0)
    first = spread.pick()
    assert 24.0 <= spread.due[0] - now[0] <= 36.0  # no stream died: the regular pace
    assert spread.pick() is first
    first.alive = False  # its replica was killed
    second = spread.pick()
    assert second is not first and 4.0 <= spread.due[0] - now[0] <= 6.0
    now[0] = spread.due[0]
    third = spread.pick()
    assert second.retired and third is not second and 4.0 <= spread.due[0] - now[0] <= 6.0
    now[0] = 100.0 + 31.0  # `rebalance` seconds after the death: the regular pace again
    fourth = spread.pick()
    assert third.retired and fourth is not third and 24.0 <= spread.due[0] - now[0] <= 36.0
