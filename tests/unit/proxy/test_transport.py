"""The aggregator's forwarding client against small asyncio servers on loopback (plain TCP: TLS is the
standard library's; the integration tests cover it against real aggregated servers)."""
from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from services.apiserver import requestinfo
from services.proxy.aggregator.proxy import Backends, RemoteProxy
from services.proxy.aggregator.resolver import Target
from services.proxy.aggregator.transport import BackendError, Exchange, Transport
from tests.waiting import until

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


class Server:
    """Answers each request on a connection with handler(request head, body, writer)."""

    def __init__(self, answer: Callable[[bytes, bytes, asyncio.StreamWriter], Awaitable[bool]]) -> None:
        self.answer = answer
        self.connections = 0
        self.requests: list[tuple[bytes, bytes]] = []
        self.server: asyncio.Server | None = None

    async def __aenter__(self) -> Server:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return self

    async def __aexit__(self, *_: object) -> None:
        assert self.server is not None
        self.server.close()

    @property
    def port(self) -> int:
        assert self.server is not None
        return self.server.sockets[0].getsockname()[1]

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except asyncio.IncompleteReadError:
                    return
                lower = head.lower()
                body = b""
                if b"content-length:" in lower:
                    n = int(lower.split(b"content-length:")[1].split(b"\r\n")[0])
                    body = await reader.readexactly(n)
                elif b"transfer-encoding: chunked" in lower:
                    while True:
                        size = int((await reader.readline()).strip(), 16)
                        chunk = await reader.readexactly(size + 2)
                        if size == 0:
                            break
                        body += chunk[:-2]
                self.requests.append((head, body))
                if not await self.answer(head, body, writer):
                    return
        finally:
            writer.close()


async def read_all(ex: Exchange) -> bytes:
    out = b""
    while True:
        data, more = await ex.read()
        out += data
        if not more:
            ex.release()
            return out


async def ok(head: bytes, body: bytes, w: asyncio.StreamWriter) -> bool:
    answer = b"hello" if not body else body
    w.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n\r\n%s" % (len(answer), answer))
    await w.drain()
    return True


async def get(t: Transport, port: int, method: str = "GET", headers: list[tuple[bytes, bytes]] | None = None,
              body: AsyncIterator[bytes] | None = None, length: int | None = None) -> Exchange:
    return await t.request("127.0.0.1", port, "api.ns.svc", method, b"/apis/g/v1/things?x=1", headers or [],
                           body, length)


async def test_connections_are_kept_alive_and_headers_go_through() -> None:
    async with Server(ok) as s:
        t = Transport(None)
        for _ in range(3):
            ex = await get(t, s.port, headers=[(b"x-remote-user", b"alice")])
            assert ex.status == 200
            assert (b"content-type", b"text/plain") in ex.headers
            assert await read_all(ex) == b"hello"
        assert s.connections == 1
        head = s.requests[0][0]
        assert head.startswith(b"GET /apis/g/v1/things?x=1 HTTP/1.1\r\n")
        assert b"host: 127.0.0.1:%d\r\n" % s.port in head and b"x-remote-user: alice\r\n" in head
        t.close()


async def test_request_bodies_stream_with_their_length_or_chunked() -> None:
    async def parts() -> AsyncIterator[bytes]:
        yield b"abc"
        yield b"defg"

    async with Server(ok) as s:
        t = Transport(None)
        assert await read_all(await get(t, s.port, "POST", body=parts(), length=7)) == b"abcdefg"
        assert b"content-length: 7\r\n" in s.requests[-1][0]
        assert await read_all(await get(t, s.port, "POST", body=parts(), length=None)) == b"abcdefg"
        assert b"transfer-encoding: chunked\r\n" in s.requests[-1][0]
        assert s.connections == 1
        t.close()


async def test_a_watch_arrives_as_the_server_flushes_it() -> None:
    go_on = asyncio.Event()

    async def watch(head: bytes, body: bytes, w: asyncio.StreamWriter) -> bool:
        w.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nevent\r\n")
        await w.drain()
        await go_on.wait()  # the second event is written only once the first was read
        w.write(b"6\r\nevent2\r\n0\r\n\r\n")
        await w.drain()
        return True

    async with Server(watch) as s:
        t = Transport(None)
        ex = await get(t, s.port)
        assert await ex.read() == (b"event", True)
        go_on.set()
        assert await read_all(ex) == b"event2"
        t.close()


async def test_head_answers_have_no_body_and_keep_the_connection() -> None:
    async def head_ok(head: bytes, body: bytes, w: asyncio.StreamWriter) -> bool:
        if head.startswith(b"HEAD"):
            w.write(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n")
            return True
        return await ok(head, body, w)

    async with Server(head_ok) as s:
        t = Transport(None)
        ex = await asyncio.wait_for(get(t, s.port, "HEAD"), 10)
        assert await asyncio.wait_for(read_all(ex), 10) == b""
        assert await read_all(await get(t, s.port)) == b"hello"
        assert s.connections == 1
        t.close()


async def test_a_body_without_length_ends_with_the_connection() -> None:
    async def until_close(head: bytes, body: bytes, w: asyncio.StreamWriter) -> bool:
        w.write(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nall of it")
        await w.drain()
        return False

    async with Server(until_close) as s:
        t = Transport(None)
        assert await read_all(await get(t, s.port)) == b"all of it"
        t.close()


async def test_garbage_and_a_broken_answer_are_backend_errors() -> None:
    async def garbage(head: bytes, body: bytes, w: asyncio.StreamWriter) -> bool:
        w.write(b"\x00\x01 this is not HTTP\r\n\r\n")
        return False

    async def broken(head: bytes, body: bytes, w: asyncio.StreamWriter) -> bool:
        w.write(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nonly this")
        await w.drain()
        return False

    async with Server(garbage) as s:
        with pytest.raises(BackendError):
            await get(Transport(None), s.port)
    async with Server(broken) as s:
        ex = await get(Transport(None), s.port)
        with pytest.raises(BackendError):
            await read_all(ex)


async def test_refused_connection_is_an_os_error() -> None:
    async with Server(ok) as s:
        port = s.port
    with pytest.raises(OSError):
        await get(Transport(None), port)


async def test_an_idle_connection_the_server_closed_is_replaced() -> None:
    async def once(head: bytes, body: bytes, w: asyncio.StreamWriter) -> bool:
        await ok(head, body, w)
        return False  # closes after each answer although it announced keep-alive

    async with Server(once) as s:
        t = Transport(None)
        for _ in range(3):
            assert await read_all(await get(t, s.port)) == b"hello"
        assert s.connections == 3
        t.close()


async def test_an_answer_given_up_midway_closes_its_connection() -> None:
    async def endless(head: bytes, body: bytes, w: asyncio.StreamWriter) -> bool:
        w.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nevent\r\n")
        await w.drain()
        await asyncio.sleep(3600)
        return True

    async with Server(endless) as s:
        t = Transport(None)
        ex = await get(t, s.port)
        assert await ex.read() == (b"event", True)
        ex.release()  # not read to its end: never pooled
        assert ex.conn.closed
        assert not t._idle.get(("127.0.0.1", s.port, "api.ns.svc"))
        t.close()


async def test_a_cancelled_request_closes_its_connection() -> None:
    async def silent(head: bytes, body: bytes, w: asyncio.StreamWriter) -> bool:
        await asyncio.sleep(3600)
        return True

    async with Server(silent) as s:
        t = Transport(None)
        task = asyncio.ensure_future(get(t, s.port))
        await until(lambda: s.requests, what="the request at the server")
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert not t._idle
        t.close()


class StreamingContext:
    """What RemoteProxy's pump uses of a request's Context: the answer's parts, and whether it was cut."""

    method, path = "GET", "/apis/g/v1/things"

    def __init__(self, verb: str) -> None:
        self.query_string = b"watch=1" if verb == "watch" else b""
        self.info = requestinfo.parse("GET", self.path, requestinfo.parse_query(self.query_string))
        self.written: list[bytes] = []
        self.aborted = self.ended = False

    async def start_stream(self, status: int, content_type: str, headers: list[tuple[bytes, bytes]]) -> None:
        pass

    async def write(self, data: bytes) -> None:
        self.written.append(data)

    async def end_stream(self, last: bytes = b"") -> None:
        self.written += [last] if last else []
        self.ended = True

    async def abort(self) -> None:
        self.aborted = True


async def test_close_watches_cuts_the_forwarded_watches_only() -> None:
    """At shutdown the forwarded watches end at once (the server's drain would wait for them), and so do
    those that start after it; a list being forwarded is left to finish."""
    finish = asyncio.Event()

    async def endless(head: bytes, body: bytes, w: asyncio.StreamWriter) -> bool:
        w.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nevent\r\n")
        await w.drain()
        await finish.wait()
        w.write(b"4\r\nlast\r\n0\r\n\r\n")
        await w.drain()
        return False

    async with Server(endless) as s:
        t = Transport(None)
        proxy = RemoteProxy(None, Backends())  # type: ignore[arg-type] - _exchange is given its target
        target = Target("127.0.0.1", s.port, "api.ns.svc")
        watch, listing = StreamingContext("watch"), StreamingContext("list")
        pumps = [asyncio.create_task(proxy._exchange(ctx, "v1.g", target, [], False, None, t))  # type: ignore[arg-type]
                 for ctx in (watch, listing)]
        await until(lambda: bool(watch.written and listing.written))
        proxy.close_watches()
        await pumps[0]
        assert watch.aborted and not watch.ended
        assert not pumps[1].done()
        again = StreamingContext("watch")  # a client watching again before the server stopped accepting
        pumps.append(asyncio.create_task(proxy._exchange(again, "v1.g", target, [], False, None, t)))  # type: ignore[arg-type]
        await until(lambda: again.aborted or bool(again.written))
        finish.set()
        await asyncio.gather(*pumps)
        assert again.aborted and not again.ended
        assert listing.ended and not listing.aborted and listing.written == [b"event", b"last"]
        t.close()
