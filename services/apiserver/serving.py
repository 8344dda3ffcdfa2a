"""HTTPS serving: uvicorn (httptools + uvloop) inside the service's own event loop, with kube's limits.

Client certificates are requested, never required, and any certificate completes the handshake (as
kube-apiserver's tls.RequestClientCert): the protocol verifies it here, once per connection, against
--client-ca-file and --requestheader-client-ca-file, and puts the subject into every request's scope
as the ASGI "tls" extension: {"cn": ..., "o": [...], "ca": [...]} where "ca" names the bundles whose
certificates issued it ("client", "requestheader", or both), because the two mean different things:
only a client-CA certificate is an x509 user identity, only a request-header-CA certificate may
assert X-Remote-* headers. A certificate that verifies against neither has "ca" empty, which the
authentication filter answers with 401 unless a bearer token authenticates the request (kube's
union of authenticators). The extension is absent when no certificate was presented, and for a
verified certificate without CN and O (kube's x509 authenticator then passes on it too).

The connection limits are kube-apiserver's http.Server settings (k8s.io/apiserver
pkg/server/secure_serving.go): a request's headers must arrive within ReadHeaderTimeout (32 s, from
the connection's start or the request's first byte), a keep-alive connection idle for IdleTimeout
(90 s) is closed, and headers over MaxHeaderBytes (1 MiB, plus Go's 4 KiB of slack) get 431.

The protocol and the request-response cycle are uvicorn's httptools ones, subclassed: private code, so
requirements-runtime.txt pins uvicorn's minor series and tests/unit/apiserver/test_serving_uvicorn.py
checks what is used of it.
"""
from __future__ import annotations

import _ssl
import asyncio
import contextlib
import ctypes
import functools
import logging
import socket
import ssl
import sys
import sysconfig
import time
import urllib.parse
from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import Any

import httptools
import uvicorn
from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol, RequestResponseCycle

from services.common.runtime import released

log = logging.getLogger(__name__)

# The scope extension under which the protocol puts the connection's transport (a handler that must
# see the client go away watches it).
CONNECTION_EXTENSION = "apiary.connection"
# ... and a future of the connection, done once it is lost: a request that must see its client go away
# waits on it (a callback) instead of a task of its own reading for http.disconnect
GONE_EXTENSION = "apiary.gone"
# Requests still running this long after the stop signal are cancelled (watches end at once, but one
# whose client does not read holds its connection): well inside the grace a stop gives a process before
# SIGKILL (a local stack's 10 s, services/cluster/processes.py; a pod's 30 s), so that what is stopped
# after the drain still has time, the proxy's audit sink writing the events it holds first of all.
GRACEFUL_SHUTDOWN = 5


@dataclass(frozen=True)
class HTTPLimits:
    """kube-apiserver's http.Server limits (secure_serving.go)."""

    read_header_timeout: float = 32.0
    idle_timeout: float = 90.0
    max_header_bytes: int = 1 << 20


# What Go's server answers when the headers exceed MaxHeaderBytes (then it closes the connection).
_HEADERS_TOO_LARGE = (b"HTTP/1.1 431 Request Header Fields Too Large\r\n"
                      b"Content-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n"
                      b"431 Request Header Fields Too Large")
# Go reads MaxHeaderBytes + 4096 before it gives up on a request's headers.
_HEADER_SLACK = 4096
# the longest request-target httptools.parse_url takes (its offsets are 16-bit)
_PARSE_URL_MAX = 65535
# What a TLS connection holds on the C heap, freed when it closes: uvloop's SSL read buffer (256 KiB,
# SSL_READ_MAX_SIZE, allocated with each connection) and OpenSSL's state. Counted to runtime.released
# so that a burst of closed connections (2,000 watches reset) is given back to the system instead of
# staying resident in the heap between the live allocations made meanwhile (issue 9).
CONNECTION_HEAP_BYTES = 256 << 10


def _subject(cert: x509.Certificate) -> tuple[str, list[str]]:
    """CN (the first one) and every O, in the certificate's order."""
    cn = ""
    orgs: list[str] = []
    for attr in cert.subject:
        if attr.oid == NameOID.COMMON_NAME and not cn:
            cn = str(attr.value)
        elif attr.oid == NameOID.ORGANIZATION_NAME:
            orgs.append(str(attr.value))
    return cn, orgs


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


def _is_ca(cert: x509.Certificate) -> bool:
    try:
        return bool(cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca)
    except x509.ExtensionNotFound:
        return False


def _client_auth_usage(cert: x509.Certificate) -> bool:
    """Go's x509 verification with KeyUsages=[ClientAuth]: no EKU extension, clientAuth or any."""
    try:
        usages = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    except x509.ExtensionNotFound:
        return True
    except ValueError:  # a malformed extension
        return False
    return ExtendedKeyUsageOID.CLIENT_AUTH in usages or ExtendedKeyUsageOID.ANY_EXTENDED_KEY_USAGE in usages


def _window(*certs: x509.Certificate) -> tuple[float, float]:
    """The period in which every one of certs is valid (POSIX seconds)."""
    start = max(c.not_valid_before_utc for c in certs)
    end = min(c.not_valid_after_utc for c in certs)
    return start.timestamp(), end.timestamp()


@dataclass(frozen=True, slots=True)
class _Verdict:
    """What a certificate's bytes say once and for all; only the clock is checked per connection."""

    cn: str
    orgs: tuple[str, ...]
    # (bundle name, valid from, valid until) for each bundle with a CA that issued the certificate
    issuers: tuple[tuple[str, float, float], ...]

    def extension(self, now: float) -> dict[str, Any] | None:
        ca = [name for name, start, end in self.issuers if start <= now <= end]
        if ca and not self.cn and not self.orgs:
            return None  # verified, but no identity in it: as if no certificate was presented
        return {"cn": self.cn, "o": list(self.orgs), "ca": ca}


_UNREADABLE = _Verdict("", (), ())


class ClientTrust:
    """Verifies client certificates against named CA bundles, as kube's x509 authenticators do.

    A certificate verifies against a bundle when a CA certificate of the bundle issued it directly
    (issuer name and signature), both are within their validity period, and its extended key usage
    allows client authentication. The bytes of each certificate are judged once (an LRU keyed by
    the DER): clients reconnect with the same certificate, and only the validity period, which the
    clock moves, is compared again per connection.
    """

    def __init__(self, bundles: dict[str, list[x509.Certificate]]) -> None:
        self.bundles = {name: [ca for ca in certs if _is_ca(ca)] for name, certs in bundles.items() if certs}
        self.names = tuple(self.bundles)
        self.judge = functools.lru_cache(maxsize=1024)(self._judge)

    @classmethod
    def from_files(cls, **files: str) -> "ClientTrust":
        return cls({name: load_bundle(path) for name, path in files.items() if path})

    def _judge(self, der: bytes) -> _Verdict:
        try:
            leaf = x509.load_der_x509_certificate(der)
            cn, orgs = _subject(leaf)
        except ValueError:
            return _UNREADABLE
        issuers: list[tuple[str, float, float]] = []
        if _client_auth_usage(leaf):
            for name, cas in self.bundles.items():
                windows = [_window(leaf, ca) for ca in cas if _issued_by(leaf, ca)]
                if windows:
                    issuers.append((name, min(w[0] for w in windows), max(w[1] for w in windows)))
        return _Verdict(cn, tuple(orgs), tuple(issuers))

    def verify(self, der: bytes, now: float | None = None) -> dict[str, Any] | None:
        """The "tls" scope extension for a presented certificate (see the module docstring)."""
        return self.judge(der).extension(time.time() if now is None else now)

    def classify(self, der: bytes, now: float | None = None) -> tuple[str, ...]:
        """The names of the bundles the certificate verifies against, now."""
        v = self.judge(der)
        t = time.time() if now is None else now
        return tuple(name for name, start, end in v.issuers if start <= t <= end)


# Requesting a client certificate without verifying it in the handshake: Python's ssl module has no
# verify callback, so one that accepts every chain is installed on the context's SSL_CTX through
# libssl itself (the library the _ssl module is linked with). The certificate is verified above.
_SSL_VERIFY_PEER = 0x01
_VerifyCallback = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int, ctypes.c_void_p)


@_VerifyCallback
def _accept_any_chain(preverify_ok: int, store_ctx: int) -> int:
    return 1


def request_client_certificates(ctx: ssl.SSLContext) -> bool:
    """Make ctx ask for a client certificate and accept any (tls.RequestClientCert); False when
    this interpreter does not allow it (the context then keeps verifying in the handshake)."""
    if sys.implementation.name != "cpython" or sysconfig.get_config_var("Py_GIL_DISABLED"):
        return False
    try:
        lib = ctypes.CDLL(_ssl.__file__)
        get_mode, get_options = lib.SSL_CTX_get_verify_mode, lib.SSL_CTX_get_options
        set_verify = lib.SSL_CTX_set_verify
    except (OSError, AttributeError):
        return False
    get_mode.argtypes = get_options.argtypes = [ctypes.c_void_p]
    get_mode.restype, get_options.restype = ctypes.c_int, ctypes.c_uint64
    set_verify.argtypes, set_verify.restype = [ctypes.c_void_p, ctypes.c_int, _VerifyCallback], None
    # PySSLContext starts with its SSL_CTX pointer, right after the object header.
    ssl_ctx = ctypes.c_void_p.from_address(id(ctx) + object.__basicsize__).value
    if not ssl_ctx or get_options(ssl_ctx) != ctx.options or get_mode(ssl_ctx) != int(ctx.verify_mode):
        return False
    set_verify(ssl_ctx, _SSL_VERIFY_PEER, _accept_any_chain)
    return True


def _request_target(url: bytes) -> tuple[bytes, bytes]:
    """The path and query of a request-target (origin- or absolute-form), of any length."""
    if len(url) <= _PARSE_URL_MAX:
        parsed = httptools.parse_url(url)
        return parsed.path, parsed.query or b""
    # httptools.parse_url keeps uint16 offsets; Go takes any request-target within MaxHeaderBytes
    target = url.split(b"#", 1)[0]
    if b"://" in target.split(b"?", 1)[0]:  # absolute-form: the path starts after the authority
        target = b"/" + target.split(b"://", 1)[1].partition(b"/")[2]
    raw_path, _, query = target.partition(b"?")
    return raw_path, query


class HeaderDeadlines:
    """Every connection's header-read deadline, checked by one task every `tick` seconds.

    A timer per request (loop.call_later, then its cancel when the headers are in) costs several µs
    with uvloop; a dict entry costs well under one. The task starts with the first deadline and runs
    until the server stops (serve_until), rather than a task being started for each request.
    """

    def __init__(self, tick: float = 0.25) -> None:
        self.tick = tick
        self._due: dict["TLSHttpToolsProtocol", float] = {}
        self._sweeper: asyncio.Task[None] | None = None

    def set(self, conn: "TLSHttpToolsProtocol", when: float) -> None:
        self._due[conn] = when
        if self._sweeper is None:
            self._sweeper = conn.loop.create_task(self._sweep(conn.loop))

    def clear(self, conn: "TLSHttpToolsProtocol") -> None:
        self._due.pop(conn, None)

    def armed(self, conn: "TLSHttpToolsProtocol") -> bool:
        return conn in self._due

    async def _sweep(self, loop: asyncio.AbstractEventLoop) -> None:
        while True:
            await asyncio.sleep(self.tick)
            if self._due:
                now = loop.time()
                for conn in [c for c, when in self._due.items() if when <= now]:
                    del self._due[conn]
                    conn.header_timeout()

    async def stop(self) -> None:
        self._due.clear()
        task, self._sweeper = self._sweeper, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


class _CycleTransport:
    """The connection's transport as a request's cycle sees it: what is written while `holding` waits
    and leaves with the next write (Go's server buffers a response's head the same way, in its bufio.Writer).
    A cycle calls write, close and is_closing (tests/unit/apiserver/test_serving_uvicorn.py checks it)."""

    __slots__ = ("held", "holding", "transport")

    def __init__(self, transport: asyncio.Transport) -> None:
        self.transport = transport
        self.holding = False
        self.held = b""

    def write(self, data: bytes) -> None:
        if self.holding:
            self.held += data
            return
        if self.held:
            data, self.held = self.held + data, b""
        self.transport.write(data)

    def flush(self) -> None:
        if self.held:
            self.write(b"")

    def close(self) -> None:
        self.transport.close()

    def is_closing(self) -> bool:
        return self.transport.is_closing()


class OneWriteCycle(RequestResponseCycle):
    """uvicorn's request-response cycle, whose answer of a known length leaves in one write: uvicorn's send
    writes the head, which is held and leaves with the body's first part (one TLS record and one send
    instead of two). A chunked answer (a watch) and HEAD's have their head written at once."""

    transport: _CycleTransport  # type: ignore[assignment]

    def __init__(self, *, transport: asyncio.Transport, **kwargs: Any) -> None:
        super().__init__(transport=_CycleTransport(transport), **kwargs)  # type: ignore[arg-type]

    async def send(self, message: Any) -> None:
        if message["type"] != "http.response.start":
            await super().send(message)
            return
        transport = self.transport
        transport.holding = True
        try:
            await super().send(message)
        finally:
            transport.holding = False
        if self.chunked_encoding or self.scope["method"] == "HEAD":
            transport.flush()


class TLSHttpToolsProtocol(HttpToolsProtocol):
    """HttpToolsProtocol with kube's connection limits; the client certificate goes in
    scope["extensions"]["tls"] and the transport in scope["extensions"]["apiary.connection"]."""

    _tls: dict[str, Any] | None = None
    _gone: asyncio.Future[None] | None = None
    _limits: HTTPLimits = HTTPLimits()
    _deadlines: HeaderDeadlines | None = None
    # bytes received since the current request's headers began (counted until they are complete)
    _header_bytes = 0
    _in_headers = True
    _rejected = False

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._tls = None
        self._gone = self.loop.create_future()
        self._limits = getattr(self.config, "limits", None) or HTTPLimits()
        self._deadlines = getattr(self.config, "header_deadlines", None)
        trust: ClientTrust | None = getattr(self.config, "client_trust", None)
        sslobj = transport.get_extra_info("ssl_object")
        if sslobj is not None and trust is not None:
            try:
                der = sslobj.getpeercert(binary_form=True)
            except (ValueError, ssl.SSLError):
                der = None
            if der:
                self._tls = trust.verify(der)
        # The first request's headers are due within the header timeout of the connection's start.
        self._arm_header_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_header_timer()
        if self._gone is not None and not self._gone.done():
            self._gone.set_result(None)
        super().connection_lost(exc)
        released(CONNECTION_HEAP_BYTES)

    def _arm_header_timer(self) -> None:
        deadlines = self._deadlines
        if deadlines is not None and not deadlines.armed(self):
            deadlines.set(self, self.loop.time() + self._limits.read_header_timeout)

    def _cancel_header_timer(self) -> None:
        if self._deadlines is not None:
            self._deadlines.clear(self)

    def header_timeout(self) -> None:
        """The headers did not arrive in time (a slow or idle client): closed unanswered, as Go does."""
        if not self.transport.is_closing():
            self.transport.close()

    def data_received(self, data: bytes) -> None:
        if self._rejected:
            return
        if self._in_headers:
            self._header_bytes += len(data)
            # bytes between requests (even ones that start none, such as stray CRLFs) end the idle
            # wait: from here on the headers are due
            self._arm_header_timer()
        super().data_received(data)
        if self._in_headers and self._header_bytes > self._limits.max_header_bytes + _HEADER_SLACK:
            self._rejected = True
            self._cancel_header_timer()
            self.transport.write(_HEADERS_TOO_LARGE)
            self.transport.close()

    def on_message_begin(self) -> None:
        super().on_message_begin()
        # A keep-alive connection's next request: its headers are due within the timeout of its first byte.
        self._arm_header_timer()
        ext: dict[str, Any] = {CONNECTION_EXTENSION: self.transport, GONE_EXTENSION: self._gone}
        if self._tls is not None:
            ext["tls"] = self._tls
        self.scope["extensions"] = ext  # type: ignore[typeddict-unknown-key]

    def on_headers_complete(self) -> None:
        """uvicorn's, as apiary's server needs it (no WebSocket, no concurrency limit: APF limits): the
        request-target may be of any length within MaxHeaderBytes, and the cycle is a OneWriteCycle."""
        self._cancel_header_timer()
        self._in_headers = False
        self._header_bytes = 0
        parser, scope = self.parser, self.scope
        http_version = parser.get_http_version()
        scope["method"] = parser.get_method().decode("ascii")
        if http_version != "1.1":
            scope["http_version"] = http_version
        raw_path, query = _request_target(self.url)
        path = raw_path.decode("ascii")
        scope["path"] = self.root_path + (urllib.parse.unquote(path) if "%" in path else path)
        scope["raw_path"] = self.root_path.encode("ascii") + raw_path
        scope["query_string"] = query
        previous = self.cycle
        self.cycle = OneWriteCycle(
            scope=scope, transport=self.transport, flow=self.flow, logger=self.logger,
            access_logger=self.access_logger, access_log=self.access_log,
            default_headers=self.server_state.default_headers, message_event=asyncio.Event(),
            expect_100_continue=self.expect_100_continue,
            keep_alive=http_version != "1.0" and parser.should_keep_alive(), on_response=self.on_response_complete)
        if previous is None or previous.response_complete:
            self._start_asgi_task(self.cycle, self.app)
        else:  # a pipelined request starts when the one before it is answered (uvicorn's on_response_complete)
            self.flow.pause_reading()
            self.pipeline.appendleft((self.cycle, self.app))

    def on_message_complete(self) -> None:
        self._in_headers = True
        super().on_message_complete()


class Server(uvicorn.Server):
    """uvicorn.Server that leaves signals to the service (runtime.run sets the stop event). With
    reuse_port, its socket is bound with SO_REUSEPORT: several processes serve one port, the kernel
    spreading the connections over them (the proxy's --workers)."""

    reuse_port = False

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        yield

    def sockets(self) -> list[socket.socket] | None:
        """The listening socket to serve on when the port is shared, else None (uvicorn binds)."""
        if not self.reuse_port:
            return None
        family = socket.AF_INET6 if ":" in self.config.host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind((self.config.host, self.config.port))
        sock.set_inheritable(False)
        return [sock]


class Config(uvicorn.Config):
    """uvicorn.Config carrying what the protocol consults: the client-certificate trust and the limits."""

    client_trust: ClientTrust | None = None
    limits: HTTPLimits | None = None
    header_deadlines: HeaderDeadlines | None = None


def make_server(app: Any, host: str, port: int, cert_file: str, key_file: str, client_ca_file: str = "",
                log_level: str = "warning", requestheader_ca_file: str = "",
                limits: HTTPLimits | None = None, reuse_port: bool = False) -> Server:
    """HTTPS server; client certificates are requested and verified against both CA files (either may
    be empty). reuse_port: the port is shared with other processes (Server.sockets)."""
    trust = ClientTrust.from_files(client=client_ca_file, requestheader=requestheader_ca_file)
    ca_files = [f for f in (client_ca_file, requestheader_ca_file) if f]
    limits = limits or HTTPLimits()

    def ssl_context(config: uvicorn.Config, default: Callable[[], ssl.SSLContext]) -> ssl.SSLContext:
        ctx = default()
        for extra in ca_files[1:]:
            ctx.load_verify_locations(extra)
        if ca_files and not request_client_certificates(ctx):
            log.warning("client certificates are verified in the TLS handshake: one that does not verify "
                        "fails the handshake instead of getting 401")
        return ctx

    config = Config(
        app, host=host, port=port, http=TLSHttpToolsProtocol, loop="none", lifespan="off",
        ssl_certfile=cert_file, ssl_keyfile=key_file,
        # The CA files loaded into the context only matter if the verify callback cannot be installed.
        ssl_ca_certs=ca_files[0] if ca_files else None,
        ssl_cert_reqs=ssl.CERT_OPTIONAL if ca_files else ssl.CERT_NONE,
        ssl_context_factory=ssl_context,
        access_log=False, log_level=log_level, ws="none", server_header=False, date_header=True,
        # the peer's address stays the connection's: kube records X-Forwarded-For (audit sourceIPs)
        # but never lets it replace the remote address, and the middleware cost every request a hop
        proxy_headers=False,
        # uvicorn's keep-alive timeout is Go's IdleTimeout: armed when a response is complete
        timeout_keep_alive=limits.idle_timeout, backlog=2048, timeout_graceful_shutdown=GRACEFUL_SHUTDOWN,
    )
    config.client_trust = trust if trust.names else None
    config.limits = limits
    config.header_deadlines = HeaderDeadlines()
    server = Server(config)
    server.reuse_port = reuse_port
    return server


async def serve_until(server: Server, stop: asyncio.Event, on_stop: Callable[[], None] | None = None) -> None:
    """Serve until the stop event is set (or the server stops by itself); on_stop runs first then."""
    task = asyncio.create_task(server.serve(sockets=server.sockets()), name="https")
    stopper = asyncio.create_task(stop.wait())
    try:
        await asyncio.wait({task, stopper}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        if on_stop is not None:
            on_stop()
        server.should_exit = True
        stopper.cancel()
        try:
            await task
        finally:
            deadlines = getattr(server.config, "header_deadlines", None)
            if deadlines is not None:
                await deadlines.stop()
