"""The servicer over real gRPC (in-process server; storage and admission are the in-memory fakes)."""
from __future__ import annotations

import asyncio

import orjson
import pytest

from apiary_pb import registry_pb2 as rpb
from apiary_pb import registry_pb2_grpc as rgrpc
from services.apis.install import new_catalogue
from services.apiserver.resource import GroupVersion
from services.common import errors, grpcutil, mux
from services.registry.admission import AdmissionClient
from services.registry.auth import AuthClient
from services.registry.rest import new_handlers
from services.registry.server import RegistryServicer
from services.registry.storage_client import StorageClient
from tests.waiting import until

from .conftest import cm, request


@pytest.fixture
async def stub(handlers):
    server = grpcutil.make_server(None, "127.0.0.1:0")
    port = server.add_insecure_port("127.0.0.1:0")
    mux.add_servicer(rgrpc.add_RegistryServicer_to_server, RegistryServicer(handlers), server)
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


async def test_discovery_follows_the_catalogue(storage, admission, auth):
    """Kinds removed and added while the server runs (as CustomResourceDefinitions will be) are in discovery
    and OpenAPI at once."""
    catalogue = new_catalogue()
    handlers = new_handlers(catalogue, StorageClient(storage), AdmissionClient(admission),  # type: ignore[arg-type]
                            AuthClient(auth))  # type: ignore[arg-type]
    servicer = RegistryServicer(handlers)
    priorityclasses = catalogue.lookup("scheduling.k8s.io", "v1", "priorityclasses")
    assert priorityclasses is not None
    catalogue.remove(priorityclasses)
    d = await servicer.Discovery(rpb.DiscoveryRequest(), None)  # type: ignore[arg-type]
    assert "scheduling.k8s.io/v1" not in d.resource_lists and "apis/scheduling.k8s.io/v1" not in d.openapi
    assert "scheduling.k8s.io" not in [i["metadata"]["name"] for i in orjson.loads(d.aggregated_groups)["items"]]
    with pytest.raises(errors.NotFound):
        await handlers.handle(request("get", "priorityclasses", "", "system-node-critical"))
    assert priorityclasses not in handlers._storage
    catalogue.add(GroupVersion("scheduling.k8s.io", "v1", 16600, 15, (priorityclasses,)))
    d = await servicer.Discovery(rpb.DiscoveryRequest(), None)  # type: ignore[arg-type]
    assert "scheduling.k8s.io/v1" in d.resource_lists and "apis/scheduling.k8s.io/v1" in d.openapi
    code = (await handlers.handle(request("create", "priorityclasses", body={
        "apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": "high"},
        "value": 1000})))[0].code
    assert code == 201
