"""HTTPS serving: uvicorn (httptools + uvloop) inside the service's own event loop.

uvicorn does not hand the peer certificate to the application, so the protocol subclass reads it
from the TLS connection once and puts the verified subject into every request's scope as the
ASGI "tls" extension: {"cn": ..., "o": [...]} (absent when no certificate was presented).
"""
from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
from collections.abc import Callable, Generator
from typing import Any

import uvicorn
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
            except (ValueError, ssl.SSLError):
                cert = None
            if cert:  # only certificates that verified against --client-ca-file are returned
                self._tls = subject_of(cert)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        if self._tls is not None:
            self.scope["extensions"] = {"tls": self._tls}  # type: ignore[typeddict-unknown-key]


class Server(uvicorn.Server):
    """uvicorn.Server that leaves signals to the service (runtime.run sets the stop event)."""

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        yield


def make_server(app: Any, host: str, port: int, cert_file: str, key_file: str, client_ca_file: str = "",
                log_level: str = "warning") -> Server:
    config = uvicorn.Config(
        app, host=host, port=port, http=TLSHttpToolsProtocol, loop="none", lifespan="off",
        ssl_certfile=cert_file, ssl_keyfile=key_file,
        ssl_ca_certs=client_ca_file or None,
        ssl_cert_reqs=ssl.CERT_OPTIONAL if client_ca_file else ssl.CERT_NONE,
        access_log=False, log_level=log_level, ws="none", server_header=False, date_header=True,
        timeout_keep_alive=65, backlog=2048, timeout_graceful_shutdown=GRACEFUL_SHUTDOWN,
    )
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
