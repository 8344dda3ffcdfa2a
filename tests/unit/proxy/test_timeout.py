"""Request deadlines (--request-timeout, ?timeout=) in the handler chain, against the fake services."""
import asyncio
import time

import httpx
import orjson
import pytest

from apiary_pb import apf_pb2_grpc as fgrpc
from apiary_pb import auth_pb2_grpc as agrpc
from apiary_pb import registry_pb2_grpc as rgrpc
from services.apiserver.filters.timeout import (
    TIMEOUT_BODY,
    Deadlines,
    long_running,
    parse_duration,
    request_timeout,
)
from services.apiserver.requestinfo import parse
from services.apiserver.serving import make_server, serve_until
from services.common import grpcutil
from services.proxy.app import ProxyApp
from tests.unit.apiserver.test_serving import _client_ctx, pki  # noqa: F401 - the fixture
from tests.waiting import until

from .fakes import start_fakes, with_cert

ADMIN = {"Authorization": "Bearer admin-token"}


@pytest.fixture
async def proxy():
    """A ProxyApp on the fakes with a 0.5 s --request-timeout."""
    server, addr, *_ = await start_fakes()
    channels = {name: grpcutil.make_channel(None, addr) for name in ("auth", "apf", "registry")}
    app = ProxyApp(agrpc.AuthStub(channels["auth"]), fgrpc.FlowControlStub(channels["apf"]),
                   rgrpc.RegistryStub(channels["registry"]), channels=channels, request_timeout=0.5)
    app.start()
    await asyncio.wait_for(app.apiservices.synced.wait(), 5)
    await asyncio.wait_for(app.discovery.loaded.wait(), 5)
    yield app
    await app.stop()
    for ch in channels.values():
        await ch.close()
    await server.stop(None)


@pytest.fixture
async def client(proxy):
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=with_cert(proxy.app)),
                                 base_url="https://t") as c:
        yield c


def test_parse_duration_as_go():
    assert parse_duration("1m0s") == 60
    assert parse_duration("1.5h") == 5400
    assert parse_duration("500ms") == 0.5
    assert parse_duration("1h2m3.5s") == 3723.5
    assert parse_duration("-2s") == -2
    assert parse_duration("0") == 0
    for bad, msg in [("abc", 'time: invalid duration "abc"'), ("5", 'time: missing unit in duration "5"'),
                     ("5x", 'time: unknown unit "x" in duration "5x"'), ("", 'time: invalid duration ""'),
                     (".s", 'time: invalid duration ".s"')]:
        with pytest.raises(ValueError) as e:
            parse_duration(bad)
        assert str(e.value) == msg


def test_request_timeout_is_capped_by_the_server():
    assert request_timeout({}, 60) == 60
    assert request_timeout({"timeout": "10s"}, 60) == 10
    assert request_timeout({"timeout": "2m"}, 60) == 60  # longer than the server allows
    assert request_timeout({"timeout": "0s"}, 60) == 60  # no limit of the user's own
    assert request_timeout({"timeout": "-1s"}, 60) == 60


def test_long_running_requests_as_kube():
    assert long_running(parse("GET", "/api/v1/namespaces/a/configmaps", {"watch": "1"}))
    assert long_running(parse("GET", "/api/v1/namespaces/a/pods/p/log", {}))
    assert long_running(parse("POST", "/api/v1/namespaces/a/pods/p/exec", {}))
    assert not long_running(parse("GET", "/api/v1/namespaces/a/configmaps", {}))
    assert not long_running(parse("GET", "/version", {}))


async def test_deadlines_cancel_late_tasks_and_tell_them_from_other_cancellations():
    deadlines = Deadlines(tick=0.02)
    loop = asyncio.get_running_loop()
    started: list[asyncio.Task] = []

    async def work(seconds):
        task = asyncio.current_task()
        deadlines.set(task, loop.time() + 0.1)
        started.append(task)
        try:
            await asyncio.sleep(seconds)
            return "done"
        except asyncio.CancelledError:
            if not deadlines.expired(task):
                raise
            task.uncancel()
            return "late"
        finally:
            deadlines.clear(task)

    assert await work(0.01) == "done"
    t = time.monotonic()
    assert await work(5) == "late"
    assert 0.09 < time.monotonic() - t < 1
    other = asyncio.create_task(work(5))
    await until(lambda: other in started, what="the task under its deadline")
    other.cancel()  # not the deadline: the cancellation stands
    with pytest.raises(asyncio.CancelledError):
        await other
    await deadlines.stop()


async def test_slow_request_gets_kubes_504(client):
    t = time.monotonic()
    r = await client.get("/api/v1/namespaces/demo/slow", headers=ADMIN)
    assert 0.4 < time.monotonic() - t < 3
    assert r.status_code == 504
    assert r.content == TIMEOUT_BODY
    assert orjson.loads(r.content) == {
        "metadata": {}, "status": "Failure",
        "message": "Timeout: request did not complete within the allotted timeout",
        "reason": "Timeout", "details": {}, "code": 504}
    assert r.headers["content-type"] == "text/plain; charset=utf-8"
    assert len(r.headers["audit-id"]) == 36


async def test_timeout_parameter_shortens_the_deadline(client, proxy):
    proxy.request_timeout = 30
    t = time.monotonic()
    r = await client.get("/api/v1/namespaces/demo/slow?timeout=300ms", headers=ADMIN)
    assert r.status_code == 504
    assert time.monotonic() - t < 3


async def test_invalid_timeout_parameter_is_400(client):
    r = await client.get("/api/v1/namespaces/demo/configmaps?timeout=5", headers=ADMIN)
    assert r.status_code == 400
    assert r.json()["message"] == ('invalid timeout specified in the request URL - '
                                   'time: missing unit in duration "5"')
    assert r.json()["reason"] == "BadRequest"


async def test_fast_requests_and_watches_are_not_cut(client):
    r = await client.get("/api/v1/namespaces/demo/configmaps/c", headers=ADMIN)
    assert r.status_code == 200
    t = time.monotonic()
    r = await client.get("/api/v1/namespaces/demo/configmaps?watch=true&timeoutSeconds=1", headers=ADMIN)
    assert r.status_code == 200
    assert 0.9 < time.monotonic() - t < 5  # its own timeoutSeconds, not the 0.5 s request timeout
    assert len(r.text.splitlines()) == 2


async def test_timeout_after_the_answer_started_closes_the_connection(proxy, pki):  # noqa: F811
    """A list that stalls after its first part: the client sees the answer cut off, never a whole one."""
    server = make_server(with_cert(proxy.app), "127.0.0.1", 0, *pki["server"], client_ca_file=pki["ca"])
    stop = asyncio.Event()
    task = asyncio.create_task(serve_until(server, stop))
    await until(lambda: server.started, what="the server started")
    url = f"https://localhost:{server.servers[0].sockets[0].getsockname()[1]}"
    async with httpx.AsyncClient(verify=_client_ctx(pki["ca"])) as c:
        t = time.monotonic()
        with pytest.raises(httpx.RemoteProtocolError):
            async with c.stream("GET", f"{url}/api/v1/namespaces/parts-slow/configmaps", headers=ADMIN) as r:
                assert r.status_code == 200
                async for _ in r.aiter_bytes():
                    pass
        assert time.monotonic() - t < 3
        r = await c.get(f"{url}/api/v1/namespaces/demo/configmaps/c", headers=ADMIN)  # the server is fine
        assert r.status_code == 200
    stop.set()
    await asyncio.wait_for(task, 5)
