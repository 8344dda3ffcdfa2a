"""The services' outbound client against a loopback HTTPS server: JSON exchanges with the config's
headers, the URL joined as kube's clients join it, and Go's words for the calls that get no answer."""
from __future__ import annotations

import asyncio
import socket
import ssl
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiohttp import web

from services.apiserver.httpclient import CallError, Client
from services.apiserver.kubeconfig import Config
from services.cluster import certs


@pytest.fixture
def pki(tmp_path: Path) -> Path:
    ca = certs.make_ca(tmp_path / "ca", "test-ca")
    certs.make_cert(tmp_path / "server", ca, "localhost", server=True)
    return tmp_path


async def _echo(request: web.Request) -> web.Response:
    if request.path.endswith("/slow"):
        await asyncio.sleep(1)
    return web.json_response({"path": request.path_qs, "body": await request.json() if request.can_read_body else None,
                              "authorization": request.headers.get("Authorization", "")}, status=201)


@pytest.fixture
async def server(pki: Path) -> AsyncIterator[str]:
    tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    tls.load_cert_chain(pki / "server.crt", pki / "server.key")
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", _echo)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=tls)
    await site.start()
    port = runner.addresses[0][1]
    yield f"https://localhost:{port}"
    await runner.cleanup()


def _trusting(pki: Path) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=str(pki / "ca.crt"))


async def test_json_exchanges_carry_the_configs_headers_below_its_url(server: str, pki: Path) -> None:
    client = Config(server + "/base/", _trusting(pki), {"Authorization": "Bearer t"}).client(5.0)
    try:
        r = await client.post_json("/apis/x?dryRun=All", {"spec": {"token": "a"}})
        assert r.status == 201 and r.ok
        assert r.json() == {"path": "/base/apis/x?dryRun=All", "body": {"spec": {"token": "a"}},
                            "authorization": "Bearer t"}
        r = await client.post_json("", {"kind": "TokenReview"})  # a webhook's: the URL itself
        assert r.json()["path"] == "/base/"
    finally:
        await client.aclose()


async def test_a_timeout_is_a_deadline_exceeded(server: str, pki: Path) -> None:
    client = Client(tls=_trusting(pki), timeout=0.2)
    with pytest.raises(CallError) as e:
        await client.get(f"{server}/slow")
    assert str(e.value) == f'Get "{server}/slow": context deadline exceeded' and e.value.timeout
    await client.aclose()


async def test_an_untrusted_server_and_a_refused_connection_in_gos_words(server: str) -> None:
    client = Client()
    with pytest.raises(CallError) as e:
        await client.post_json(server, {})
    assert str(e.value).startswith(f'Post "{server}": tls: failed to verify certificate: ')
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(CallError) as e:
        await client.post_json(f"https://127.0.0.1:{port}/hook", {})
    assert str(e.value) == f'Post "https://127.0.0.1:{port}/hook": dial tcp 127.0.0.1:{port}: connect: connection refused'
    await client.aclose()
