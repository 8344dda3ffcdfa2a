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

from services.proxy.server import ClientTrust, make_server, serve_until, subject_of


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
    # a front proxy's CA and client certificate; the CA shares its subject with nothing else
    fp_key = ec.generate_private_key(ec.SECP256R1())
    fp_ca = _cert(_name("front-proxy-ca"), fp_key, _name("front-proxy-ca"), fp_key, ca=True)
    fp_client = _cert(_name("front-proxy-client"), cli_key, fp_ca.subject, fp_key)
    # a forgery: issuer name of the client CA, signed by the front-proxy CA's key
    forged = _cert(_name("eve", ["system:masters"]), cli_key, ca.subject, fp_key)
    paths = {"fp-ca": _write(tmp_path, "fp-ca", fp_ca)[0],
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
        want = {"cn": "alice", "o": ["dev", "ops"], "ca": ["client"]}
        assert (await c.get(url)).json() == want
        assert (await c.get(url)).json() == want  # same connection, every request
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


async def _serve(app, pki, **kw):
    server = make_server(app, "127.0.0.1", 0, *pki["server"], **kw)
    stop = asyncio.Event()
    task = asyncio.create_task(serve_until(server, stop))
    for _ in range(100):
        if server.started:
            break
        await asyncio.sleep(0.02)
    return server, stop, task, f"https://localhost:{server.servers[0].sockets[0].getsockname()[1]}/"


async def test_both_bundles_verify_and_the_issuer_is_named(pki):
    server, stop, task, url = await _serve(echo_app, pki, client_ca_file=pki["ca"],
                                           requestheader_ca_file=pki["fp-ca"])
    async with httpx.AsyncClient(verify=_client_ctx(pki["ca"], pki["client"])) as c:
        assert (await c.get(url)).json()["ca"] == ["client"]
    async with httpx.AsyncClient(verify=_client_ctx(pki["ca"], pki["fp-client"])) as c:
        assert (await c.get(url)).json() == {"cn": "front-proxy-client", "o": [], "ca": ["requestheader"]}
    with pytest.raises(httpx.HTTPError):
        async with httpx.AsyncClient(verify=_client_ctx(pki["ca"], pki["stranger"])) as c:
            await c.get(url)
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
