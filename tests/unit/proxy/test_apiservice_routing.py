"""Before the proxy's first APIService list, a path under /apis waits for it (or gets kube's 503), never the
registry's 404 for a group a remote server serves; the core group is served at once."""
import asyncio
from collections.abc import AsyncIterator

import httpx
import pytest

from apiary_pb import apf_pb2_grpc as fgrpc
from apiary_pb import auth_pb2_grpc as agrpc
from apiary_pb import registry_pb2_grpc as rgrpc
from services.common import grpcutil
from services.proxy.app import ProxyApp
from services.proxy.filters import apiservice

from .fakes import FakeRegistry, start_fakes, with_cert

ADMIN = {"Authorization": "Bearer admin-token"}
PIZZAS = "/apis/restaurant.example.com/v1alpha1/namespaces/demo/pizzas"  # a remote APIService's group


@pytest.fixture
async def unlisted() -> AsyncIterator[tuple[httpx.AsyncClient, FakeRegistry]]:
    """A proxy whose registry has not answered the APIService list yet."""
    server, addr, _, _, registry = await start_fakes()
    registry.apiservices_listable.clear()
    channels = {name: grpcutil.make_channel(None, addr) for name in ("auth", "apf", "registry")}
    proxy = ProxyApp(agrpc.AuthStub(channels["auth"]), fgrpc.FlowControlStub(channels["apf"]),
                     rgrpc.RegistryStub(channels["registry"]), channels=channels)
    proxy.start()
    client = httpx.AsyncClient(transport=httpx.ASGITransport(app=with_cert(proxy.app)), base_url="https://t")
    yield client, registry
    registry.apiservices_listable.set()
    await client.aclose()
    await proxy.stop()
    for ch in channels.values():
        await ch.close()
    await server.stop(None)


async def test_a_path_under_apis_waits_for_the_first_list(unlisted):
    client, registry = unlisted
    remote = asyncio.create_task(client.get(PIZZAS, headers=ADMIN))
    assert (await client.get("/api/v1/namespaces/demo/configmaps/c", headers=ADMIN)).status_code == 200
    await asyncio.sleep(0.3)
    assert not remote.done()
    registry.apiservices_listable.set()
    r = await asyncio.wait_for(remote, 10)
    # routed to the APIService's server (which this test does not run), not to the registry
    assert not [req for req in registry.requests if req.resource == "pizzas"]
    assert r.status_code == 503 and r.json()["reason"] == "ServiceUnavailable"


async def test_no_list_in_time_is_kubes_503(unlisted, monkeypatch):
    client, registry = unlisted
    monkeypatch.setattr(apiservice, "ROUTING_WAIT", 0.2)
    r = await client.get(PIZZAS, headers=ADMIN)
    assert r.status_code == 503
    assert r.json()["message"] == ("the request has been made before all known HTTP paths have been installed, "
                                   "please try again")
    assert r.headers["retry-after"] == "0" and r.json()["details"]["retryAfterSeconds"] == 0
    assert not [req for req in registry.requests if req.resource == "pizzas"]
