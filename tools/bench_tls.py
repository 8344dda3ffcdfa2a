"""Micro-benchmark: what client-certificate verification costs the proxy, per connection and per request.

    python -m tools.bench_tls

Since client certificates are requested but not verified in the TLS handshake (a certificate that does
not verify gets 401, as from kube-apiserver), services/apiserver/serving.py verifies them in Python, once
per connection (an LRU keyed by the certificate's bytes). Measured in this one process, on TLS over
memory BIOs and on a real server on loopback, against baselines from the same run:

- conn_*: the server's certificate work after a handshake. Baseline: what the proxy did when OpenSSL
  verified in the handshake (getpeercert() parsed into a dict, the DER, the issuing bundle from an LRU).
  "cold" is a certificate seen for the first time (its signature checked), "warm" every later one.
- handshake_*: a whole handshake with the admin-like client certificate, client and server sides;
  baseline: verified by OpenSSL in the handshake, as before.
- get_*: one GET on a keep-alive HTTPS connection to make_server (uvicorn, httptools) with a trivial
  app, client (httpx) included; baseline: the same server with no client CA (no certificate asked for).
"""
from __future__ import annotations

import asyncio
import datetime as dt
import functools
import ssl
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from services.apiserver.serving import ClientTrust, make_server, request_client_certificates, serve_until


def subject_of(cert: dict[str, Any]) -> dict[str, Any] | None:
    """CN and O of a getpeercert() dict, as the proxy read them when OpenSSL verified (the baseline)."""
    cn = ""
    orgs: list[str] = []
    for rdn in cert.get("subject", ()):
        for key, value in rdn:
            if key == "commonName" and not cn:
                cn = value
            elif key == "organizationName":
                orgs.append(value)
    if not cn and not orgs:
        return None
    return {"cn": cn, "o": orgs}


def _cert(cn: str, orgs: tuple[str, ...], key: ec.EllipticCurvePrivateKey, issuer: x509.Name | None,
          issuer_key: ec.EllipticCurvePrivateKey, *, ca: bool = False, server: bool = False
          ) -> x509.Certificate:
    name = x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in orgs]
                     + [x509.NameAttribute(NameOID.COMMON_NAME, cn)])
    now = dt.datetime.now(dt.timezone.utc)
    b = (x509.CertificateBuilder().subject_name(name).issuer_name(issuer or name).public_key(key.public_key())
         .serial_number(x509.random_serial_number()).not_valid_before(now - dt.timedelta(minutes=5))
         .not_valid_after(now + dt.timedelta(days=1))
         .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
    if server:
        b = b.add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost")]), critical=False)
    if not ca:
        usage = ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH
        b = b.add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
    return b.sign(issuer_key, hashes.SHA256())


def make_pki(d: Path) -> dict[str, str]:
    """A cluster CA, a front-proxy CA, a serving certificate and the admin's client certificate (EC P-256,
    as services/cluster/certs.py makes them)."""
    def write(name: str, cert: x509.Certificate, key: ec.EllipticCurvePrivateKey | None = None) -> str:
        (d / f"{name}.crt").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        if key is not None:
            (d / f"{name}.key").write_bytes(key.private_bytes(
                serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
        return str(d / f"{name}.crt")

    ca_key, fp_key, srv_key, adm_key = (ec.generate_private_key(ec.SECP256R1()) for _ in range(4))
    ca = _cert("apiary-ca", (), ca_key, None, ca_key, ca=True)
    fp = _cert("front-proxy-ca", (), fp_key, None, fp_key, ca=True)
    write("server", _cert("localhost", (), srv_key, ca.subject, ca_key, server=True), srv_key)
    write("admin", _cert("kubernetes-admin", ("system:masters",), adm_key, ca.subject, ca_key), adm_key)
    return {"ca": write("ca", ca), "fp-ca": write("fp-ca", fp), "server": str(d / "server.crt"),
            "server-key": str(d / "server.key"), "admin": str(d / "admin.crt"),
            "admin-key": str(d / "admin.key")}


def _contexts(pki: dict[str, str], python_verifies: bool) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(pki["server"], pki["server-key"])
    server.verify_mode = ssl.CERT_OPTIONAL
    server.load_verify_locations(pki["ca"])
    server.load_verify_locations(pki["fp-ca"])
    if python_verifies:
        assert request_client_certificates(server)
    client = ssl.create_default_context(cafile=pki["ca"])
    client.load_cert_chain(pki["admin"], pki["admin-key"])
    return server, client


def _handshake(server_ctx: ssl.SSLContext, client_ctx: ssl.SSLContext) -> ssl.SSLObject:
    """A full TLS handshake over memory BIOs; the server's SSLObject."""
    s_in, s_out, c_in, c_out = ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO()
    server = server_ctx.wrap_bio(s_in, s_out, server_side=True)
    client = client_ctx.wrap_bio(c_in, c_out, server_hostname="localhost")
    done = {"s": False, "c": False}
    while not (done["s"] and done["c"]):
        for side, obj in (("c", client), ("s", server)):
            if not done[side]:
                try:
                    obj.do_handshake()
                    done[side] = True
                except ssl.SSLWantReadError:
                    pass
        s_in.write(c_out.read())
        c_in.write(s_out.read())
    # TLS 1.3: the client's certificate is in its last flight; a read lets the server finish with it
    try:
        server.read(1)
    except ssl.SSLWantReadError:
        pass
    return server


def _per_call(fn, n: int) -> float:  # type: ignore[no-untyped-def]
    t = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - t) / n * 1e6


def bench_connection(pki: dict[str, str], n: int = 20000) -> dict[str, float]:
    server_ctx, client_ctx = _contexts(pki, python_verifies=True)
    sslobj = _handshake(server_ctx, client_ctx)
    trust = ClientTrust.from_files(client=pki["ca"], requestheader=pki["fp-ca"])
    der = sslobj.getpeercert(binary_form=True)
    assert trust.verify(der) == {"cn": "kubernetes-admin", "o": ["system:masters"], "ca": ["client"]}

    # what connection_made did when the handshake verified: the parsed dict, the DER, the bundle
    old_classify = functools.lru_cache(maxsize=1024)(lambda d: trust.classify(d))

    def before() -> None:
        cert = sslobj.getpeercert()
        d = sslobj.getpeercert(binary_form=True)
        subject = subject_of(cert)
        subject["ca"] = list(old_classify(d))  # type: ignore[index]

    def warm() -> None:
        trust.verify(sslobj.getpeercert(binary_form=True))

    def cold() -> None:
        trust.judge.cache_clear()
        trust.verify(sslobj.getpeercert(binary_form=True))

    return {"conn_before_us": _per_call(before, n), "conn_warm_us": _per_call(warm, n),
            "conn_cold_us": _per_call(cold, n // 10)}


def bench_handshake(pki: dict[str, str], rounds: int = 9, n: int = 40) -> dict[str, float]:
    """Alternating rounds of each kind (the median round), as in bench_get."""
    trust = ClientTrust.from_files(client=pki["ca"], requestheader=pki["fp-ca"])
    kinds = {}
    for name, python_verifies in (("handshake_openssl_us", False), ("handshake_python_us", True)):
        server_ctx, client_ctx = _contexts(pki, python_verifies)

        def once(server_ctx: ssl.SSLContext = server_ctx, client_ctx: ssl.SSLContext = client_ctx,
                 python_verifies: bool = python_verifies) -> None:
            obj = _handshake(server_ctx, client_ctx)
            if python_verifies:
                trust.verify(obj.getpeercert(binary_form=True))
            else:
                obj.getpeercert()
        once()
        kinds[name] = once
    times: dict[str, list[float]] = {name: [] for name in kinds}
    for _ in range(rounds):
        for name, once in kinds.items():
            times[name].append(_per_call(once, n))
    return {name: sorted(ts)[len(ts) // 2] for name, ts in times.items()}


async def _hello(scope, receive, send) -> None:  # type: ignore[no-untyped-def]
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
    await send({"type": "http.response.body", "body": b"ok"})


async def bench_get(pki: dict[str, str], rounds: int = 7, n: int = 300) -> dict[str, float]:
    """Both servers up at once, measured in alternating rounds (the median round), so that a busy
    machine weighs on both alike."""
    servers, clients = {}, {}
    for name, client_ca in (("get_no_client_ca_us", ""), ("get_client_cert_us", pki["ca"])):
        server = make_server(_hello, "127.0.0.1", 0, pki["server"], pki["server-key"], client_ca,
                             requestheader_ca_file=pki["fp-ca"] if client_ca else "")
        stop = asyncio.Event()
        servers[name] = (server, stop, asyncio.create_task(serve_until(server, stop)))
        while not server.started:
            await asyncio.sleep(0.01)
        port = server.servers[0].sockets[0].getsockname()[1]
        ctx = ssl.create_default_context(cafile=pki["ca"])
        ctx.load_cert_chain(pki["admin"], pki["admin-key"])
        clients[name] = httpx.AsyncClient(verify=ctx, base_url=f"https://localhost:{port}")
    times: dict[str, list[float]] = {name: [] for name in clients}
    for r in range(rounds + 1):
        for name, c in clients.items():
            t = time.perf_counter()
            for _ in range(n):
                await c.get("/")
            if r:  # the first round warms up
                times[name].append((time.perf_counter() - t) / n * 1e6)
    for name, c in clients.items():
        await c.aclose()
        server, stop, task = servers[name]
        stop.set()
        await task
    return {name: sorted(ts)[len(ts) // 2] for name, ts in times.items()}


def main() -> None:
    with tempfile.TemporaryDirectory() as d:
        pki = make_pki(Path(d))
        results = {**bench_connection(pki), **bench_handshake(pki), **asyncio.run(bench_get(pki))}
    for k, v in results.items():
        print(f"{k:24} {v:9.1f}")
    print(f"{'conn warm/before':24} {results['conn_warm_us'] / results['conn_before_us']:9.2f}")
    ratio = results["handshake_python_us"] / results["handshake_openssl_us"]
    print(f"{'handshake python/openssl':24} {ratio:9.2f}")
    print(f"{'get cert/no ca':24} {results['get_client_cert_us'] / results['get_no_client_ca_us']:9.2f}")


if __name__ == "__main__":
    main()
