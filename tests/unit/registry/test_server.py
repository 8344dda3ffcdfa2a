"""The servicer over real gRPC (in-process server; storage and admission are the in-memory fakes)."""
from __future__ import annotations

import asyncio

import orjson
import pytest

from apiary_pb import registry_pb2 as rpb
from apiary_pb import registry_pb2_grpc as rgrpc
from services.common import errors, grpcutil
from services.registry.server import RegistryServicer
from tests.waiting import until

from .conftest import cm, request


@pytest.fixture
async def stub(handlers):
    server = grpcutil.make_server(None, "127.0.0.1:0")
    port = server.add_insecure_port("127.0.0.1:0")
    rgrpc.add_RegistryServicer_to_server(RegistryServicer(handlers), server)
    await server.start()
    channel = grpcutil.make_channel(None, f"127.0.0.1:{port}")
    yield rgrpc.RegistryStub(channel)
    await channel.close()
    await server.stop(None)


async def test_handle_watch_discovery_over_grpc(stub, storage):
    resp = await grpcutil.call(stub.Handle(request("create", "configmaps", "default", body=cm())))
    assert resp.code == 201 and resp.timing["storage"] >= 0 and "admission" in resp.timing
    with pytest.raises(errors.APIError) as e:
        await grpcutil.call(stub.Handle(request("create", "configmaps", "default", body=cm())))
    assert e.value.status() == {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                                "message": 'configmaps "c" already exists', "reason": "AlreadyExists",
                                "details": {"name": "c", "kind": "configmaps"}, "code": 409}

    call = stub.Watch(request("watch", "configmaps", "default"))
    frames = grpcutil.stream(call)
    nxt = asyncio.ensure_future(frames.__anext__())
    await until(lambda: any(prefix.startswith("/registry/configmaps/") for prefix, _ in storage.watchers),
                what="the watch open on storage")
    await grpcutil.call(stub.Handle(request("create", "configmaps", "default", body=cm("d"))))
    frame = await asyncio.wait_for(nxt, 2)
    ev = orjson.loads(frame.data)
    assert ev["type"] == "ADDED" and ev["object"]["metadata"]["name"] == "d"
    call.cancel()

    d = await grpcutil.call(stub.Discovery(rpb.DiscoveryRequest()))
    assert "api/v1" in d.openapi and orjson.loads(d.aggregated_core)["items"][0]["metadata"]["name"] == ""
