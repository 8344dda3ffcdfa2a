"""The HTTPS server: the verified client certificate reaches the app as the "tls" scope extension."""
import asyncio
import datetime
import ssl

import httpx
import orjson
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from services.proxy.server import make_server, serve_until, subject_of


def _name(cn, orgs=()):
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)]
                     + [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in orgs])


def _cert(subject, key, issuer, issuer_key, *, ca=False, server=False):
    now = datetime.datetime.now(datetime.timezone.utc)
    b = (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer).public_key(key.public_key())
         .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=1))
         .not_valid_after(now + datetime.timedelta(hours=1))
         .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
    if server:
        b = b.add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost")]), critical=False)
        b = b.add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
    elif not ca:
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
    paths = {"ca": _write(tmp_path, "ca", ca)[0], "server": _write(tmp_path, "server", srv, srv_key),
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
    server = make_server(echo_app, "127.0.0.1", 0, *pki["server"], client_ca_file=pki["ca"])
    stop = asyncio.Event()
    task = asyncio.create_task(serve_until(server, stop))
    for _ in range(100):
        if server.started:
            break
        await asyncio.sleep(0.02)
    port = server.servers[0].sockets[0].getsockname()[1]
    url = f"https://localhost:{port}/"
    async with httpx.AsyncClient(verify=_client_ctx(pki["ca"], pki["client"])) as c:
        assert (await c.get(url)).json() == {"cn": "alice", "o": ["dev", "ops"]}
        assert (await c.get(url)).json() == {"cn": "alice", "o": ["dev", "ops"]}  # same connection, every request
    async with httpx.AsyncClient(verify=_client_ctx(pki["ca"])) as c:
        assert (await c.get(url)).json() is None
    with pytest.raises(httpx.HTTPError):  # a certificate from another CA fails the handshake
        async with httpx.AsyncClient(verify=_client_ctx(pki["ca"], pki["stranger"])) as c:
            await c.get(url)
    stop.set()
    await asyncio.wait_for(task, 5)


def test_subject_of():
    cert = {"subject": ((("commonName", "bob"),), (("organizationName", "a"),), (("organizationName", "b"),))}
    assert subject_of(cert) == {"cn": "bob", "o": ["a", "b"]}
    assert subject_of({}) is None
