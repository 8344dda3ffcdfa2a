"""The HTTPS server: the client certificate reaches the app as the "tls" scope extension (verified here,
not in the handshake), and kube's connection limits (header-read and idle timeouts, header size)."""
import asyncio
import datetime
import ssl
import time

import httpx
import orjson
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from services.apiserver.serving import ClientTrust, HTTPLimits, make_server, serve_until
from tests.waiting import until


def _name(cn, orgs=()):
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)]
                     + [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in orgs])


def _cert(subject, key, issuer, issuer_key, *, ca=False, server=False, start=-60, end=3600, eku=True):
    """start and end: seconds from now."""
    now = datetime.datetime.now(datetime.timezone.utc)
    b = (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer).public_key(key.public_key())
         .serial_number(x509.random_serial_number()).not_valid_before(now + datetime.timedelta(seconds=start))
         .not_valid_after(now + datetime.timedelta(seconds=end))
         .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
    if server:
        b = b.add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost")]), critical=False)
        b = b.add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
    elif not ca and eku:
        b = b.add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
    return b.sign(issuer_key, hashes.SHA256())


def _write(tmp_path, name, cert, key=None):
    (tmp_path / f"{name}.crt").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    if key is not None:
        (tmp_path / f"{name}.key").write_bytes(key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    return str(tmp_path / f"{name}.crt"), str(tmp_path / f"{name}.key")


@pytest.fixture
def pki(tmp_path):
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = _cert(_name("test-ca"), ca_key, _name("test-ca"), ca_key, ca=True)
    srv_key = ec.generate_private_key(ec.SECP256R1())
    srv = _cert(_name("localhost"), srv_key, ca.subject, ca_key, server=True)
    cli_key = ec.generate_private_key(ec.SECP256R1())
    cli = _cert(_name("alice", ["dev", "ops"]), cli_key, ca.subject, ca_key)
    other_key = ec.generate_private_key(ec.SECP256R1())
    other_ca = _cert(_name("other-ca"), other_key, _name("other-ca"), other_key, ca=True)
    stranger = _cert(_name("mallory", ["system:masters"]), cli_key, other_ca.subject, other_key)
    # a front proxy's CA and client certificate; the CA shares its subject with nothing else
    fp_key = ec.generate_private_key(ec.SECP256R1())
    fp_ca = _cert(_name("front-proxy-ca"), fp_key, _name("front-proxy-ca"), fp_key, ca=True)
    fp_client = _cert(_name("front-proxy-client"), cli_key, fp_ca.subject, fp_key)
    # a forgery: issuer name of the client CA, signed by the front-proxy CA's key
    forged = _cert(_name("eve", ["system:masters"]), cli_key, ca.subject, fp_key)
    # what kube answers 401: self-signed, expired or not yet valid, issued for servers only
    selfsigned = _cert(_name("mallory", ["system:masters"]), cli_key, _name("mallory", ["system:masters"]), cli_key)
    expired = _cert(_name("alice", ["dev"]), cli_key, ca.subject, ca_key, start=-7200, end=-3600)
    early = _cert(_name("alice", ["dev"]), cli_key, ca.subject, ca_key, start=3600, end=7200)
    server_only = _cert(_name("localhost"), cli_key, ca.subject, ca_key, server=True)
    no_eku = _cert(_name("carol"), cli_key, ca.subject, ca_key, eku=False)
    paths = {"fp-ca": _write(tmp_path, "fp-ca", fp_ca)[0],
             "selfsigned": _write(tmp_path, "selfsigned", selfsigned, cli_key),
             "expired": _write(tmp_path, "expired", expired, cli_key),
             "early": _write(tmp_path, "early", early, cli_key),
             "server-only": _write(tmp_path, "server-only", server_only, cli_key),
             "no-eku": _write(tmp_path, "no-eku", no_eku, cli_key),
             "expired-cert": expired,
             "fp-client": _write(tmp_path, "fp-client", fp_client, cli_key),
             "forged": _write(tmp_path, "forged", forged, cli_key),
             "ca-cert": ca, "fp-ca-cert": fp_ca, "forged-cert": forged, "fp-client-cert": fp_client,
             "client-cert": cli,
             "ca": _write(tmp_path, "ca", ca)[0], "server": _write(tmp_path, "server", srv, srv_key),
             "client": _write(tmp_path, "client", cli, cli_key), "stranger": _write(tmp_path, "stranger", stranger,
                                                                                   cli_key)}
    return paths


async def echo_app(scope, receive, send):
    body = orjson.dumps(scope.get("extensions", {}).get("tls"))
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]})
    await send({"type": "http.response.body", "body": body})


def _client_ctx(ca, cert=None):
    ctx = ssl.create_default_context(cafile=ca)
    if cert:
        ctx.load_cert_chain(*cert)
    return ctx


async def test_client_certificate_reaches_scope(pki):
    server, stop, task, url = await _serve(echo_app, pki, client_ca_file=pki["ca"])
    async with httpx.AsyncClient(verify=_client_ctx(pki["ca"], pki["client"])) as c:
        want = {"cn": "alice", "o": ["dev", "ops"], "ca": ["client"]}
        assert (await c.get(url)).json() == want
        assert (await c.get(url)).json() == want  # same connection, every request
    async with httpx.AsyncClient(verify=_client_ctx(pki["ca"])) as c:
        assert (await c.get(url)).json() is None
    # a certificate from another CA completes the handshake; it is no identity ("ca" empty)
    async with httpx.AsyncClient(verify=_client_ctx(pki["ca"], pki["stranger"])) as c:
        assert (await c.get(url)).json() == {"cn": "mallory", "o": ["system:masters"], "ca": []}
    stop.set()
    await asyncio.wait_for(task, 5)


@pytest.mark.parametrize("name,want", [
    ("selfsigned", {"cn": "mallory", "o": ["system:masters"], "ca": []}),
    ("expired", {"cn": "alice", "o": ["dev"], "ca": []}),
    ("early", {"cn": "alice", "o": ["dev"], "ca": []}),
    ("server-only", {"cn": "localhost", "o": [], "ca": []}),
    ("no-eku", {"cn": "carol", "o": [], "ca": ["client"]}),  # no extended key usage: any use (Go's rule)
])
async def test_certificates_that_do_not_verify_complete_the_handshake(pki, name, want):
    server, stop, task, url = await _serve(echo_app, pki, client_ca_file=pki["ca"],
                                           requestheader_ca_file=pki["fp-ca"])
    async with httpx.AsyncClient(verify=_client_ctx(pki["ca"], pki[name])) as c:
        assert (await c.get(url)).json() == want
    stop.set()
    await asyncio.wait_for(task, 5)


def test_validity_is_checked_against_the_clock_on_every_lookup(pki):
    from cryptography.hazmat.primitives.serialization import Encoding
    trust = ClientTrust({"client": [pki["ca-cert"]]})
    der = pki["client-cert"].public_bytes(Encoding.DER)
    now = time.time()
    assert trust.classify(der, now) == ("client",)
    assert trust.classify(der, now + 2 * 3600) == ()  # the same cached verdict, later
    assert trust.verify(der, now + 2 * 3600) == {"cn": "alice", "o": ["dev", "ops"], "ca": []}
    # before the CA's own validity began, its certificate was not valid either
    assert trust.classify(pki["expired-cert"].public_bytes(Encoding.DER), now - 5400) == ()
    assert trust.judge.cache_info().misses == 2


async def _serve(app, pki, **kw):
    server = make_server(app, "127.0.0.1", 0, *pki["server"], **kw)
    stop = asyncio.Event()
    task = asyncio.create_task(serve_until(server, stop))
    await until(lambda: server.started, what="the server started")
    return server, stop, task, f"https://localhost:{server.servers[0].sockets[0].getsockname()[1]}/"


async def test_both_bundles_verify_and_the_issuer_is_named(pki):
    server, stop, task, url = await _serve(echo_app, pki, client_ca_file=pki["ca"],
                                           requestheader_ca_file=pki["fp-ca"])
    async with httpx.AsyncClient(verify=_client_ctx(pki["ca"], pki["client"])) as c:
        assert (await c.get(url)).json()["ca"] == ["client"]
    async with httpx.AsyncClient(verify=_client_ctx(pki["ca"], pki["fp-client"])) as c:
        assert (await c.get(url)).json() == {"cn": "front-proxy-client", "o": [], "ca": ["requestheader"]}
    async with httpx.AsyncClient(verify=_client_ctx(pki["ca"], pki["stranger"])) as c:
        assert (await c.get(url)).json()["ca"] == []
    stop.set()
    await asyncio.wait_for(task, 5)


async def test_same_ca_for_both_names_both(pki):
    server, stop, task, url = await _serve(echo_app, pki, client_ca_file=pki["ca"], requestheader_ca_file=pki["ca"])
    async with httpx.AsyncClient(verify=_client_ctx(pki["ca"], pki["client"])) as c:
        assert (await c.get(url)).json()["ca"] == ["client", "requestheader"]
    stop.set()
    await asyncio.wait_for(task, 5)


def test_client_trust_checks_the_signature_not_only_the_issuer_name(pki):
    from cryptography.hazmat.primitives.serialization import Encoding
    trust = ClientTrust({"client": [pki["ca-cert"]], "requestheader": [pki["fp-ca-cert"]]})
    der = lambda c: c.public_bytes(Encoding.DER)  # noqa: E731
    assert trust.classify(der(pki["client-cert"])) == ("client",)
    assert trust.classify(der(pki["fp-client-cert"])) == ("requestheader",)
    assert trust.classify(der(pki["forged-cert"])) == ()
    assert trust.classify(b"not a certificate") == ()


# connection limits ------------------------------------------------------------------------------

async def slow_app(scope, receive, send):
    await asyncio.sleep(float(scope["query_string"] or 0))
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
    await send({"type": "http.response.body", "body": b"ok"})


async def _open(pki, url):
    port = int(url.rsplit(":", 1)[1].rstrip("/"))
    ctx = _client_ctx(pki["ca"])
    return await asyncio.open_connection("127.0.0.1", port, ssl=ctx, server_hostname="localhost")


async def _closed_after(reader, started):
    """Seconds from started until the server closes the connection (reading whatever it sends)."""
    data = b""
    try:
        while chunk := await asyncio.wait_for(reader.read(65536), 10):
            data += chunk
    except (ConnectionError, ssl.SSLError):
        pass
    return asyncio.get_running_loop().time() - started, data


async def _request(reader, writer, query=b"", headers=b""):
    writer.write(b"GET /?" + query + b" HTTP/1.1\r\nHost: localhost\r\n" + headers + b"\r\n")
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
    assert head.startswith(b"HTTP/1.1 200")
    assert await reader.readexactly(2) == b"ok"


async def test_a_silent_connection_is_closed_after_the_header_timeout(pki):
    limits = HTTPLimits(read_header_timeout=0.5, idle_timeout=30)
    server, stop, task, url = await _serve(slow_app, pki, limits=limits)
    loop = asyncio.get_running_loop()
    reader, writer = await _open(pki, url)
    elapsed, data = await _closed_after(reader, loop.time())
    assert 0.3 < elapsed < 3 and data == b""
    writer.close()
    stop.set()
    await asyncio.wait_for(task, 5)


async def test_slowloris_is_closed_after_the_header_timeout(pki):
    """A byte now and then does not extend the time the headers have (Go's ReadHeaderTimeout)."""
    limits = HTTPLimits(read_header_timeout=0.6, idle_timeout=30)
    server, stop, task, url = await _serve(slow_app, pki, limits=limits)
    loop = asyncio.get_running_loop()
    reader, writer = await _open(pki, url)
    started = loop.time()

    async def drip():
        for b in b"GET / HTTP/1.1\r\nHost: localhost\r\nX-Slow: " + b"a" * 100:
            writer.write(bytes([b]))
            await asyncio.sleep(0.05)

    dripping = asyncio.create_task(drip())
    elapsed, data = await _closed_after(reader, started)
    dripping.cancel()
    assert 0.4 < elapsed < 3 and data == b""
    writer.close()
    stop.set()
    await asyncio.wait_for(task, 5)


async def test_idle_keepalive_connection_is_closed_after_the_idle_timeout(pki):
    limits = HTTPLimits(read_header_timeout=0.3, idle_timeout=1.2)
    server, stop, task, url = await _serve(slow_app, pki, limits=limits)
    loop = asyncio.get_running_loop()
    reader, writer = await _open(pki, url)
    await _request(reader, writer, b"0.5")  # a handler slower than the header timeout is not cut
    await asyncio.sleep(0.6)  # idle longer than the header timeout: still open
    await _request(reader, writer)
    elapsed, data = await _closed_after(reader, loop.time())
    assert 0.9 < elapsed < 4 and data == b""
    writer.close()
    stop.set()
    await asyncio.wait_for(task, 5)


async def test_headers_over_the_limit_get_431(pki):
    limits = HTTPLimits(max_header_bytes=2048)
    server, stop, task, url = await _serve(slow_app, pki, limits=limits)
    loop = asyncio.get_running_loop()
    reader, writer = await _open(pki, url)
    # within MaxHeaderBytes + Go's 4 KiB of slack
    await _request(reader, writer, headers=b"X-Big: " + b"a" * 4000 + b"\r\n")
    writer.write(b"GET / HTTP/1.1\r\nHost: localhost\r\n" + b"X-Big: " + b"a" * 8000 + b"\r\n")
    elapsed, data = await _closed_after(reader, loop.time())
    assert data.startswith(b"HTTP/1.1 431 Request Header Fields Too Large\r\n")
    assert data.endswith(b"\r\n\r\n431 Request Header Fields Too Large")
    writer.close()
    stop.set()
    await asyncio.wait_for(task, 5)


async def test_stray_bytes_between_requests_do_not_keep_a_connection_open(pki):
    """Bytes that begin no request end the idle wait all the same; the header timeout then applies."""
    limits = HTTPLimits(read_header_timeout=0.6, idle_timeout=30)
    server, stop, task, url = await _serve(slow_app, pki, limits=limits)
    loop = asyncio.get_running_loop()
    reader, writer = await _open(pki, url)
    await _request(reader, writer)
    started = loop.time()

    async def crlf():
        while True:
            writer.write(b"\r\n")
            await asyncio.sleep(0.1)

    sending = asyncio.create_task(crlf())
    elapsed, data = await _closed_after(reader, started)
    sending.cancel()
    assert elapsed < 3 and data == b""
    writer.close()
    stop.set()
    await asyncio.wait_for(task, 5)


async def test_closed_connections_count_their_buffers_as_released(pki, monkeypatch):
    """Each closed TLS connection counts its heap buffers to runtime.released (issue 9: the heap is
    trimmed after a burst of them); a request does not, while its connection stays open."""
    import services.apiserver.serving as server_module
    freed: list[int] = []
    monkeypatch.setattr(server_module, "released", freed.append)
    server, stop, task, url = await _serve(echo_app, pki, client_ca_file=pki["ca"])
    for _ in range(3):
        async with httpx.AsyncClient(verify=_client_ctx(pki["ca"], pki["client"])) as c:
            assert (await c.get(url)).status_code == 200
            assert (await c.get(url)).status_code == 200
    await until(lambda: len(freed) >= 3, what="three connections counted")
    assert freed == [server_module.CONNECTION_HEAP_BYTES] * 3
    stop.set()
    await asyncio.wait_for(task, 5)


async def scope_app(scope, receive, send):
    body = orjson.dumps({"path": scope["path"], "raw_path": scope["raw_path"].decode(),
                         "query": scope["query_string"].decode()})
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


@pytest.mark.parametrize("n", [100, 70_000, 300_000])
async def test_request_targets_of_any_length_within_the_header_limit_are_served(pki, n):
    # httptools.parse_url takes 64 KiB at most; Go takes any request-target within MaxHeaderBytes
    server, stop, task, url = await _serve(scope_app, pki)
    name = "a" * n
    reader, writer = await _open(pki, url)  # raw: httpx refuses URLs over 64 KiB itself
    writer.write(f"GET /api/v1/namespaces/default/configmaps/{name}%2Fx?limit=1&x=%20 HTTP/1.1\r\n"
                 "Host: localhost\r\nConnection: close\r\n\r\n".encode())
    data = await asyncio.wait_for(reader.read(), 10)
    writer.close()
    head, _, body = data.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200"), head
    assert orjson.loads(body) == {"path": f"/api/v1/namespaces/default/configmaps/{name}/x",
                        "raw_path": f"/api/v1/namespaces/default/configmaps/{name}%2Fx", "query": "limit=1&x=%20"}
    stop.set()
    await asyncio.wait_for(task, 5)


class _Transport:
    """What a cycle writes, write by write."""

    def __init__(self):
        self.writes: list[bytes] = []
        self.closed = False

    def write(self, data):
        self.writes.append(data)

    def close(self):
        self.closed = True

    def is_closing(self):
        return self.closed

    def pause_reading(self):
        pass

    def resume_reading(self):
        pass


def _cycle(method="GET", keep_alive=True):
    import logging

    from uvicorn.protocols.http.flow_control import FlowControl

    from services.apiserver.serving import OneWriteCycle

    transport = _Transport()
    done = []
    cycle = OneWriteCycle(scope={"method": method}, transport=transport, flow=FlowControl(transport),
                          logger=logging.getLogger("t"), access_logger=logging.getLogger("t"), access_log=False,
                          default_headers=[(b"date", b"today")], message_event=asyncio.Event(),
                          expect_100_continue=False, keep_alive=keep_alive, on_response=lambda: done.append(1))
    return cycle, transport, done


async def test_an_answer_of_known_length_leaves_in_one_write():
    cycle, transport, done = _cycle()
    await cycle.send({"type": "http.response.start", "status": 200,
                      "headers": [(b"Content-Type", b"application/json"), (b"content-length", b"2")]})
    assert transport.writes == []  # held for the body
    await cycle.send({"type": "http.response.body", "body": b"{}"})
    assert transport.writes == [b"HTTP/1.1 200 OK\r\ndate: today\r\ncontent-type: application/json\r\n"
                                b"content-length: 2\r\n\r\n{}"]
    assert cycle.response_complete and done == [1] and not transport.closed


async def test_chunked_and_head_answers_and_connection_close_are_uvicorns():
    cycle, transport, _ = _cycle()
    await cycle.send({"type": "http.response.start", "status": 200, "headers": []})
    await cycle.send({"type": "http.response.body", "body": b"ab", "more_body": True})
    await cycle.send({"type": "http.response.body", "body": b""})
    assert transport.writes == [b"HTTP/1.1 200 OK\r\ndate: today\r\ntransfer-encoding: chunked\r\n\r\n",
                                b"2\r\nab\r\n", b"0\r\n\r\n"]
    cycle, transport, _ = _cycle("HEAD", keep_alive=False)
    await cycle.send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"5")]})
    await cycle.send({"type": "http.response.body", "body": b""})
    assert transport.writes == [b"HTTP/1.1 200 OK\r\ndate: today\r\ncontent-length: 5\r\nconnection: close\r\n\r\n"]
    assert transport.closed


@pytest.mark.parametrize("header", [(b"bad name", b"v"), (b"x", b"a\r\nb"), (b"x", b"\x00")])
async def test_invalid_headers_are_refused_as_uvicorn_does(header):
    cycle, transport, _ = _cycle()
    with pytest.raises(RuntimeError):
        await cycle.send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"0"), header]})
    assert transport.writes == []


async def test_a_body_longer_or_shorter_than_its_length_is_an_error():
    for body in (b"abc", b"a"):
        cycle, _, _ = _cycle()
        await cycle.send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
        with pytest.raises(RuntimeError):
            await cycle.send({"type": "http.response.body", "body": body})
