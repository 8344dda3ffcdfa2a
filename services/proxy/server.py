"""HTTPS serving: uvicorn (httptools + uvloop) inside the service's own event loop.

uvicorn does not hand the peer certificate to the application, so the protocol subclass reads it
from the TLS connection once and puts the verified subject into every request's scope as the
ASGI "tls" extension: {"cn": ..., "o": [...], "ca": [...]} (absent when no certificate was presented).

The handshake verifies client certificates against the union of --client-ca-file and
--requestheader-client-ca-file, as kube-apiserver does; "ca" then names which of those bundles
issued the certificate ("client", "requestheader", or both), because the two mean different things:
only a client-CA certificate is an x509 user identity, only a request-header-CA certificate may
assert X-Remote-* headers.
"""
from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import ssl
from collections.abc import Callable, Generator
from typing import Any

import uvicorn
from cryptography import x509
from cryptography.exceptions import InvalidSignature
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

log = logging.getLogger(__name__)

# Requests still running this long after the stop signal are cancelled (watches end at once).
GRACEFUL_SHUTDOWN = 10


def subject_of(cert: dict[str, Any]) -> dict[str, Any] | None:
    """CN and O of a getpeercert() dict; None when it carries no subject."""
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


def load_bundle(path: str) -> list[x509.Certificate]:
    with open(path, "rb") as f:
        return x509.load_pem_x509_certificates(f.read())


def _issued_by(leaf: x509.Certificate, ca: x509.Certificate) -> bool:
    if leaf.issuer != ca.subject:
        return False
    try:
        leaf.verify_directly_issued_by(ca)
    except (InvalidSignature, ValueError, TypeError):  # TypeError: a key type it cannot check
        return False
    return True


class ClientTrust:
    """Which named CA bundles issued a peer certificate the handshake already verified.

    With one bundle there is nothing to decide. With several, the leaf's issuer and signature are
    checked against each bundle's certificates (a leaf must be issued directly by a certificate of
    the bundle). Answers are cached per certificate, since clients reconnect with the same one.
    """

    def __init__(self, bundles: dict[str, list[x509.Certificate]]) -> None:
        self.bundles = {name: certs for name, certs in bundles.items() if certs}
        self.names = tuple(self.bundles)
        self.classify = functools.lru_cache(maxsize=1024)(self._classify)

    @classmethod
    def from_files(cls, **files: str) -> "ClientTrust":
        return cls({name: load_bundle(path) for name, path in files.items() if path})

    def _classify(self, der: bytes) -> tuple[str, ...]:
        if len(self.names) == 1:
            return self.names
        try:
            leaf = x509.load_der_x509_certificate(der)
        except ValueError:
            return ()
        return tuple(name for name, cas in self.bundles.items() if any(_issued_by(leaf, ca) for ca in cas))


class TLSHttpToolsProtocol(HttpToolsProtocol):
    """HttpToolsProtocol that exposes the verified client certificate as scope["extensions"]["tls"]."""

    _tls: dict[str, Any] | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._tls = None
        sslobj = transport.get_extra_info("ssl_object")
        if sslobj is not None:
            try:
                cert = sslobj.getpeercert()
                der = sslobj.getpeercert(binary_form=True) if cert else None
            except (ValueError, ssl.SSLError):
                cert = der = None
            # only certificates that verified against the client CA bundles are returned
            trust: ClientTrust | None = getattr(self.config, "client_trust", None)
            if cert and der and trust is not None:
                subject = subject_of(cert)
                if subject is not None:
                    subject["ca"] = list(trust.classify(der))
                    self._tls = subject

    def on_message_begin(self) -> None:
        super().on_message_begin()
        if self._tls is not None:
            self.scope["extensions"] = {"tls": self._tls}  # type: ignore[typeddict-unknown-key]


class Server(uvicorn.Server):
    """uvicorn.Server that leaves signals to the service (runtime.run sets the stop event)."""

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        yield


class Config(uvicorn.Config):
    """uvicorn.Config carrying the client-certificate trust the protocol consults."""

    client_trust: ClientTrust | None = None


def make_server(app: Any, host: str, port: int, cert_file: str, key_file: str, client_ca_file: str = "",
                log_level: str = "warning", requestheader_ca_file: str = "") -> Server:
    """HTTPS server; client certificates are verified against both CA files (either may be empty)."""
    trust = ClientTrust.from_files(client=client_ca_file, requestheader=requestheader_ca_file)
    ca_files = [f for f in (client_ca_file, requestheader_ca_file) if f]

    def ssl_context(config: uvicorn.Config, default: Callable[[], ssl.SSLContext]) -> ssl.SSLContext:
        ctx = default()
        for extra in ca_files[1:]:
            ctx.load_verify_locations(extra)
        return ctx

    config = Config(
        app, host=host, port=port, http=TLSHttpToolsProtocol, loop="none", lifespan="off",
        ssl_certfile=cert_file, ssl_keyfile=key_file,
        ssl_ca_certs=ca_files[0] if ca_files else None,
        ssl_cert_reqs=ssl.CERT_OPTIONAL if ca_files else ssl.CERT_NONE,
        ssl_context_factory=ssl_context,
        access_log=False, log_level=log_level, ws="none", server_header=False, date_header=True,
        timeout_keep_alive=65, backlog=2048, timeout_graceful_shutdown=GRACEFUL_SHUTDOWN,
    )
    config.client_trust = trust if trust.names else None
    return Server(config)


async def serve_until(server: Server, stop: asyncio.Event, on_stop: Callable[[], None] | None = None) -> None:
    """Serve until the stop event is set (or the server stops by itself); on_stop runs first then."""
    task = asyncio.create_task(server.serve(), name="https")
    stopper = asyncio.create_task(stop.wait())
    try:
        await asyncio.wait({task, stopper}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        if on_stop is not None:
            on_stop()
        server.should_exit = True
        stopper.cancel()
        await task
