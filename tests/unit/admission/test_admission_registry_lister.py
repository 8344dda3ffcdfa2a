"""InformerNamespaceLister against an in-process fake registry (plaintext gRPC)."""
from __future__ import annotations

import asyncio
import socket

import orjson
import pytest

from apiary_pb import admission_pb2 as adpb
from apiary_pb import envelope_pb2 as pb
from apiary_pb import registry_pb2 as rpb
from apiary_pb import registry_pb2_grpc as rgrpc
from services.admission.__main__ import build_chain
from services.admission.attributes import Attributes
from services.admission.server import AdmissionServicer
from services.apis.install import new_catalogue
from services.common import grpcutil
from services.common.envelope import to_envelope
from services.common.errors import NotFound, not_found
from tests.waiting import until

CATALOGUE = new_catalogue()


class FakeRegistry(rgrpc.RegistryServicer):
    def __init__(self) -> None:
        self.namespaces = {"default": {"apiVersion": "v1", "kind": "Namespace",
                                       "metadata": {"name": "default", "resourceVersion": "3"},
                                       "status": {"phase": "Active"}}}
        self.gets: list[str] = []

    @grpcutil.api_method
    async def Handle(self, request, context):
        assert request.resource == "namespaces" and request.user.name == "system:apiserver"
        if request.verb == "list":
            body = {"kind": "NamespaceList", "apiVersion": "v1", "metadata": {"resourceVersion": "3"},
                    "items": list(self.namespaces.values())}
            return rpb.APIResponse(code=200, body=orjson.dumps(body))
        self.gets.append(request.name)
        if request.name not in self.namespaces:
            raise not_found("namespaces", "", request.name)
        return rpb.APIResponse(code=200, body=orjson.dumps(self.namespaces[request.name]))

    @grpcutil.api_stream
    async def Watch(self, request, context):
        await asyncio.Event().wait()
        yield rpb.WatchFrame()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def create(namespace: str) -> adpb.AdmissionRequest:
    r = adpb.AdmissionRequest(operation="CREATE", attributes=pb.RequestAttributes(
        api_version="v1", resource="configmaps", namespace=namespace))
    r.object.CopyFrom(to_envelope({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm"}}))
    return r


async def test_chain_with_registry_informer() -> None:
    fake = FakeRegistry()
    address = f"127.0.0.1:{free_port()}"
    server = grpcutil.make_server(None, address)
    rgrpc.add_RegistryServicer_to_server(fake, server)
    await server.start()
    channel = grpcutil.make_channel(None, address)
    chain = build_chain(["NamespaceLifecycle"], {}, rgrpc.RegistryStub(channel), CATALOGUE)
    try:
        await chain.start()
        await until(lambda: not chain.not_ready(), what="the chain ready")
        servicer = AdmissionServicer(chain, CATALOGUE)
        await servicer.Admit(create("default"), None)
        assert fake.gets == []                        # served from the informer's cache
        with pytest.raises(NotFound, match='namespaces "nope" not found'):
            await chain.admit(Attributes(create("nope"), CATALOGUE))
        assert fake.gets == ["nope"]                  # a live lookup before refusing
    finally:
        await chain.stop()
        await channel.close()
        await server.stop(None)
