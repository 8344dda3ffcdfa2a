"""The forwarding client: kept-alive HTTP/1.1 connections to aggregated servers (what Go's http.Transport
is to kube-aggregator's proxy handler).

An asyncio Protocol per connection and httptools' response parser (the C parser uvicorn serves with),
so a forwarded request costs a few Python calls on the client side (with it and the chain's caches the
proxy's CPU per forwarded GET fell from about 1.4 ms on aiohttp to 0.95 ms: `python -m tools.bench
aggregation`, docs/benchmarks.md). Both bodies stream: the request body is written as it arrives
from the client (Content-Length kept, or chunked), and the response body is handed over in the parts
the server flushes, with reading paused while more than READ_HIGH bytes wait (a slow client slows the
server down instead of growing the proxy's memory).

A connection goes back to its pool only once its answer was read to the end and both sides keep it
alive; a request cancelled midway (deadline, client gone) closes its connection. A request without a
body that fails on a reused connection before any answer arrives is sent once more on a new
connection, as Go's transport does: the server may have closed the idle connection meanwhile.

It stays beside the services' one outbound client (services/apiserver/httpclient.py, aiohttp) because
forwarding is on every request to an aggregated server and streams both ways, where this lean client
measured faster; every other outbound call (webhooks, JWKS, the availability and discovery probes) is
a whole JSON exchange, made through the library's client.
"""
from __future__ import annotations

import asyncio
import collections
import ssl
from collections.abc import AsyncIterator

import httptools

CONNECT_TIMEOUT = 5.0
IDLE_TIMEOUT = 60.0  # below the 90 s after which kube's (and apiary's) servers close idle connections
MAX_HEADER_BYTES = 1 << 20  # Go's http.DefaultMaxHeaderBytes
READ_HIGH, READ_LOW = 1 << 20, 1 << 18

Headers = list[tuple[bytes, bytes]]


class BackendError(Exception):
    """The server could not be reached, or what it sent is not an HTTP answer."""


class _Connection(asyncio.Protocol):
    __slots__ = ("_drain", "closed", "idle_since", "response", "reused", "transport")

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.response: Response | None = None
        self.closed = False
        self.reused = False
        self.idle_since = 0.0
        self._drain: asyncio.Future[None] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        r = self.response
        if r is None:  # nothing was asked: a server that talks out of turn is not reused
            self.close()
            return
        try:
            r.parser.feed_data(data)
        except httptools.HttpParserError as e:
            # a callback's own error comes wrapped (HttpParserCallbackError)
            cause = e.__context__
            r.fail(cause if isinstance(cause, BackendError) else
                   BackendError(f"malformed HTTP response {data[:64]!r}: {e}"))
            self.close()

    def eof_received(self) -> bool | None:
        return None  # close the transport

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self.response is not None:
            self.response.lost(exc)
        d = self._drain
        if d is not None and not d.done():
            d.set_result(None)  # the writer's next write finds the connection closed

    def pause_writing(self) -> None:
        if self._drain is None or self._drain.done():
            self._drain = asyncio.get_running_loop().create_future()

    def resume_writing(self) -> None:
        d = self._drain
        if d is not None and not d.done():
            d.set_result(None)

    async def drain(self) -> None:
        d = self._drain
        if d is not None and not d.done():
            await d

    def write(self, data: bytes) -> None:
        if self.closed or self.transport is None or self.transport.is_closing():
            raise BackendError("connection closed")
        self.transport.write(data)

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()


class Response:
    """One answer: status, headers (names lower-cased), and the body in parts (read())."""

    __slots__ = (
        "_buffered",
        "_error",
        "_head",
        "_head_only",
        "_header_bytes",
        "_interim",
        "_parts",
        "_paused",
        "_waiter",
        "conn",
        "done",
        "headers",
        "keep_alive",
        "parser",
        "received",
        "status",
    )

    def __init__(self, conn: _Connection, head_only: bool) -> None:
        self.conn = conn
        self.parser = httptools.HttpResponseParser(self)
        self.status = 0
        self.headers: Headers = []
        self.done = False
        self.keep_alive = False
        self.received = False
        self._head_only = head_only
        self._interim = False
        self._head: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._parts: collections.deque[bytes] = collections.deque()
        self._buffered = 0
        self._paused = False
        self._waiter: asyncio.Future[None] | None = None
        self._error: BaseException | None = None
        self._header_bytes = 0

    # httptools' callbacks ------------------------------------------------------------

    def on_message_begin(self) -> None:
        self.received = True

    def on_header(self, name: bytes, value: bytes) -> None:
        self._header_bytes += len(name) + len(value) + 4
        if self._header_bytes > MAX_HEADER_BYTES:
            raise BackendError(f"server response headers exceeded {MAX_HEADER_BYTES} bytes")
        self.headers.append((name.lower(), value))

    def on_headers_complete(self) -> None:
        status = self.parser.get_status_code()
        if status < 200:  # 1xx: the real answer follows
            self._interim = True
            self.headers = []
            self._header_bytes = 0
            return
        self.status = status
        if not self._head.done():
            self._head.set_result(None)
        if self._head_only:  # no body follows an answer to HEAD, whatever its Content-Length says
            self._complete()

    def on_body(self, body: bytes) -> None:
        self._parts.append(body)
        self._buffered += len(body)
        if self._buffered > READ_HIGH and not self._paused and self.conn.transport is not None:
            self._paused = True
            self.conn.transport.pause_reading()
        self._wake()

    def on_message_complete(self) -> None:
        if self._interim:
            self._interim = False
            return
        if not self.done:
            self._complete()

    # ----------------------------------------------------------------------------------

    def _complete(self) -> None:
        self.done = True
        self.keep_alive = self.parser.should_keep_alive()
        self._wake()

    def _wake(self) -> None:
        w = self._waiter
        if w is not None and not w.done():
            w.set_result(None)

    def fail(self, error: BaseException) -> None:
        if self.done:
            return
        self._error = error
        if not self._head.done():
            self._head.set_exception(error)
            self._head.exception()  # retrieved here: request() may have gone already
        self._wake()

    def lost(self, exc: Exception | None) -> None:
        if self.done:
            return
        if exc is None and self._head.done() and self._until_close():
            self._complete()  # a body without a length ends with the connection
            return
        if not self.done:
            self.fail(BackendError(f"connection lost: {exc}" if exc else
                                   "server closed the connection before the answer was complete"))

    def _until_close(self) -> bool:
        """No Content-Length and not chunked: the body is whatever comes until the connection ends."""
        if self.status in (204, 304):
            return False
        for name, value in self.headers:
            if name == b"content-length" or (name == b"transfer-encoding" and b"chunked" in value.lower()):
                return False
        return True

    async def head(self) -> None:
        await self._head

    async def read(self) -> tuple[bytes, bool]:
        """What arrived of the body since the last read, and whether more follows."""
        while True:
            parts = self._parts
            if parts:
                data = parts.popleft() if len(parts) == 1 else b"".join(parts)
                parts.clear()
                self._buffered = 0
                if self._paused and self.conn.transport is not None:
                    self._paused = False
                    self.conn.transport.resume_reading()
                return data, not self.done
            if self.done:
                return b"", False
            if self._error is not None:
                raise self._error
            self._waiter = asyncio.get_running_loop().create_future()
            await self._waiter


class Transport:
    """Kept-alive connections to the servers of one TLS configuration, by (address, port, server name)."""

    def __init__(self, tls: ssl.SSLContext | None, connect_timeout: float = CONNECT_TIMEOUT,
                 idle_timeout: float = IDLE_TIMEOUT) -> None:
        self.tls = tls
        self.connect_timeout = connect_timeout
        self.idle_timeout = idle_timeout
        self._idle: dict[tuple[str, int, str], list[_Connection]] = {}
        self._sweeper: asyncio.TimerHandle | None = None
        self._closed = False

    async def _connect(self, host: str, port: int, server_name: str) -> _Connection:
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(self.connect_timeout):
                _, conn = await loop.create_connection(
                    _Connection, host, port, ssl=self.tls,
                    server_hostname=server_name if self.tls is not None else None)
        except TimeoutError:
            raise BackendError(f"dial tcp {host}:{port}: i/o timeout") from None
        return conn

    def _take(self, key: tuple[str, int, str]) -> _Connection | None:
        idle = self._idle.get(key)
        if not idle:
            return None
        cutoff = asyncio.get_running_loop().time() - self.idle_timeout
        while idle:
            conn = idle.pop()
            if conn.closed or conn.transport is None or conn.transport.is_closing():
                continue
            if conn.idle_since < cutoff:
                conn.close()
                continue
            return conn
        return None

    def _put(self, key: tuple[str, int, str], conn: _Connection) -> None:
        if self._closed:
            conn.close()
            return
        loop = asyncio.get_running_loop()
        conn.response = None
        conn.reused = True
        conn.idle_since = loop.time()
        self._idle.setdefault(key, []).append(conn)
        if self._sweeper is None:
            self._sweeper = loop.call_later(self.idle_timeout, self._sweep)

    def _sweep(self) -> None:
        """Close connections idle for longer than idle_timeout."""
        self._sweeper = None
        loop = asyncio.get_running_loop()
        cutoff = loop.time() - self.idle_timeout
        for key, idle in list(self._idle.items()):
            keep = []
            for conn in idle:
                if conn.idle_since < cutoff or conn.closed:
                    conn.close()
                else:
                    keep.append(conn)
            if keep:
                self._idle[key] = keep
            else:
                del self._idle[key]
        if self._idle:
            self._sweeper = loop.call_later(self.idle_timeout / 2, self._sweep)

    async def request(self, host: str, port: int, server_name: str, method: str, target: bytes,
                      headers: Headers, body: AsyncIterator[bytes] | None = None,
                      content_length: int | None = None) -> Exchange:
        """Send the request; return once the answer's status and headers are in.

        body: the request body as it arrives (None: none); with content_length None it is sent
        chunked. The headers are the caller's to validate (no CR, LF or NUL in a value).
        """
        hostport = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        head = [b"%s %s HTTP/1.1\r\nhost: %s\r\n" % (method.encode(), target, hostport.encode())]
        head += [b"%s: %s\r\n" % kv for kv in headers]
        if body is not None:
            head.append(b"transfer-encoding: chunked\r\n" if content_length is None
                        else b"content-length: %d\r\n" % content_length)
        head.append(b"\r\n")
        payload = b"".join(head)
        key = (host, port, server_name)
        while True:
            conn = self._take(key)
            reused = conn is not None
            if conn is None:
                conn = await self._connect(host, port, server_name)
            response = Response(conn, method == "HEAD")
            conn.response = response
            try:
                conn.write(payload)
                if body is not None:
                    await self._send_body(conn, body, content_length is None)
                await response.head()
            except BackendError:
                conn.close()
                if reused and body is None and not response.received:
                    continue  # the server closed the idle connection as we used it: once more, anew
                raise
            except BaseException:
                conn.close()
                raise
            return Exchange(self, key, conn, response)

    @staticmethod
    async def _send_body(conn: _Connection, body: AsyncIterator[bytes], chunked: bool) -> None:
        async for chunk in body:
            if chunked:
                conn.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            else:
                conn.write(chunk)
            await conn.drain()
        if chunked:
            conn.write(b"0\r\n\r\n")

    def close(self) -> None:
        self._closed = True
        if self._sweeper is not None:
            self._sweeper.cancel()
            self._sweeper = None
        for idle in self._idle.values():
            for conn in idle:
                conn.close()
        self._idle.clear()


class Exchange:
    """An answer being read; release() once done with it (its connection is pooled or closed)."""

    __slots__ = ("conn", "key", "response", "transport")

    def __init__(self, transport: Transport, key: tuple[str, int, str], conn: _Connection,
                 response: Response) -> None:
        self.transport, self.key, self.conn, self.response = transport, key, conn, response

    @property
    def status(self) -> int:
        return self.response.status

    @property
    def headers(self) -> Headers:
        return self.response.headers

    async def read(self) -> tuple[bytes, bool]:
        return await self.response.read()

    def abort(self) -> None:
        """Cut the connection at once (no TLS goodbye to wait for): the next read fails."""
        self.conn.closed = True
        if self.conn.transport is not None:
            self.conn.transport.abort()

    def release(self) -> None:
        r, conn = self.response, self.conn
        if r.done and r.keep_alive and not r._parts and not conn.closed:
            self.transport._put(self.key, conn)
        else:
            conn.close()
