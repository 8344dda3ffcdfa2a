"""The proxy's watch fan-out on a real HTTP server (services/proxy/handlers/watch.py): events written
straight to each connection, several in one write, and a client that stops reading cut off without
holding back the others."""
from __future__ import annotations

import asyncio
import socket
import time
from types import SimpleNamespace

import orjson
import pytest

from apiary_pb import registry_pb2 as rpb
from services.apiserver.serving import CONNECTION_EXTENSION, Config, Server, TLSHttpToolsProtocol
from services.proxy.context import Context
from services.proxy.handlers import watch
from tests.waiting import until


class FakeWatches:
    """The registry stream's reader: every watch gets each event as the same bytes object."""

    def __init__(self) -> None:
        self.relays: dict[int, tuple] = {}
        self._ids = 0

    def relay(self, request, on_event, on_end):
        self._ids += 1
        wid = self._ids
        self.relays[wid] = (on_event, on_end)
        return SimpleNamespace(cancel=lambda: self.relays.pop(wid, None))

    def emit(self, event: bytes) -> None:
        for wid, (on_event, _) in list(self.relays.items()):
            if not on_event(event, False):
                self.relays.pop(wid, None)


def event(i: int, pad: int = 0) -> bytes:
    obj = {"metadata": {"name": f"c{i}", "resourceVersion": str(i)}, "t": time.time(), "pad": "x" * pad}
    return orjson.dumps({"type": "ADDED", "object": obj})


@pytest.fixture
async def served():
    handler = watch.WatchHandler(SimpleNamespace(Watches=None))
    handler.watches = FakeWatches()
    ended: list[str] = []

    async def app(scope, receive, send):
        ctx = Context(scope, receive, send)
        ctx.watch_disconnect()
        if scope["path"] == "/slow":  # the kernel's buffers hold little, as over a real network
            transport = scope["extensions"][CONNECTION_EXTENSION]
            transport.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
        await handler.handle(ctx, rpb.APIRequest(resource="configmaps"), 60.0, lambda: None)
        ended.append(scope["path"])

    config = Config(app, host="127.0.0.1", port=0, http=TLSHttpToolsProtocol, loop="none", lifespan="off",
                    access_log=False, log_level="warning", ws="none")
    server = Server(config)
    task = asyncio.create_task(server.serve())
    await until(lambda: server.started, what="the server started")
    port = server.servers[0].sockets[0].getsockname()[1]
    yield SimpleNamespace(handler=handler, watches=handler.watches, port=port, ended=ended)
    handler.close_all()
    server.should_exit = True
    await task


async def open_watch(port: int, path: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port, limit=1 << 24)
    writer.write(f"GET {path} HTTP/1.1\r\nHost: t\r\n\r\n".encode())
    return reader, writer


def open_unread_watch(port: int, path: str) -> socket.socket:
    """A watch whose client reads nothing for now (the kernel holds little of it for the client)."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(("127.0.0.1", port))
    sock.sendall(f"GET {path} HTTP/1.1\r\nHost: t\r\n\r\n".encode())
    return sock


async def read_events(reader: asyncio.StreamReader, into: list[dict], until_name: str = "") -> bool:
    """Chunked JSON lines until the answer's end (True) or the event named until_name (False)."""
    head = await reader.readuntil(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200") and b"transfer-encoding: chunked" in head.lower()
    while True:
        size = int((await reader.readline()).strip(), 16)
        if size == 0:
            await reader.readline()
            return True
        body = await reader.readexactly(size + 2)
        for line in body[:-2].splitlines():
            e = orjson.loads(line)
            e["received"] = time.time()
            into.append(e)
            if e["object"]["metadata"]["name"] == until_name:
                return False


async def test_events_of_a_few_milliseconds_go_in_one_write(served):
    reader, writer = await open_watch(served.port, "/w")
    await until(lambda: served.watches.relays, what="the watch relayed")
    served.watches.emit(event(0))  # before the 200: sent right after it
    await reader.readuntil(b"\r\n\r\n")
    size = int((await reader.readline()).strip(), 16)
    assert orjson.loads(await reader.readexactly(size + 2))["object"]["metadata"]["name"] == "c0"
    for i in range(1, 4):
        served.watches.emit(event(i))
    size = int((await reader.readline()).strip(), 16)
    chunk = await reader.readexactly(size + 2)
    assert [orjson.loads(x)["object"]["metadata"]["name"] for x in chunk.splitlines() if x] == ["c1", "c2", "c3"]
    writer.close()


async def test_one_event_is_encoded_once_for_every_watch(served):
    conns = [await open_watch(served.port, f"/w{k}") for k in range(3)]
    await until(lambda: len(served.watches.relays) == 3, what="the watches relayed")
    e = event(0)
    served.watches.emit(e)
    encoded = served.handler._encoded(watch.OUTPUT_JSON)
    assert encoded.get(e) is encoded.get(e) == e + b"\n"
    for reader, writer in conns:
        got: list[dict] = []
        assert not await read_events(reader, got, until_name="c0")
        writer.close()


async def test_a_watcher_that_stops_reading_is_cut_off_and_holds_back_no_other(served, monkeypatch):
    monkeypatch.setattr(watch, "BUFFER_BYTES", 256 << 10)
    monkeypatch.setattr(watch, "CUT_OFF_GRACE", 30.0)
    fast_reader, fast_writer = await open_watch(served.port, "/fast")
    unread = open_unread_watch(served.port, "/slow")
    await until(lambda: len(served.watches.relays) == 2, what="both watches relayed")
    fast: list[dict] = []
    reading = asyncio.create_task(read_events(fast_reader, fast, until_name="c1999"))
    for i in range(2000):  # 2,000 events of 2 KB, 200 a second per 10 ms
        served.watches.emit(event(i, pad=2048))
        if i % 20 == 19:
            await asyncio.sleep(0.01)
    assert not await asyncio.wait_for(reading, 10)
    # the reader keeps up: every event, in order, each soon after it was sent
    assert [e["object"]["metadata"]["name"] for e in fast] == [f"c{i}" for i in range(2000)]
    assert max(e["received"] - e["object"]["t"] for e in fast) < 2.0
    # the other one was cut off once its connection held the buffer's worth, and gets no more
    assert len(served.watches.relays) == 1
    slow_reader, slow_writer = await asyncio.open_connection(sock=unread, limit=1 << 24)  # it reads again
    slow: list[dict] = []
    assert await asyncio.wait_for(read_events(slow_reader, slow), 10)  # the answer ends cleanly
    names = [e["object"]["metadata"]["name"] for e in slow]
    assert 0 < len(names) < 2000 and names == [f"c{i}" for i in range(len(names))]  # resumes from its last rv
    await until(lambda: "/slow" in served.ended, what="the slow watch's handler ended")
    fast_writer.close()
    slow_writer.close()


async def test_without_the_connection_a_send_that_does_not_return_is_cut_off(monkeypatch):
    """Under a server that does not hand over its connection, events go through the ASGI send; while
    one is stuck there, what waits behind it is bounded the same way, and the answer is given up."""
    monkeypatch.setattr(watch, "BUFFER_BYTES", 64 << 10)
    monkeypatch.setattr(watch, "CUT_OFF_GRACE", 0.1)
    handler = watch.WatchHandler(SimpleNamespace(Watches=None))
    handler.watches = watches = FakeWatches()
    sent: list[bytes] = []

    async def send(message):
        if message.get("more_body"):
            sent.append(message["body"])
            if len(sent) == 2:
                await asyncio.sleep(3600)  # the client stopped reading

    async def receive():
        await asyncio.sleep(3600)

    scope = {"type": "http", "method": "GET", "path": "/w", "query_string": b"", "headers": []}
    handling = asyncio.create_task(handler.handle(Context(scope, receive, send), rpb.APIRequest(), 60.0,
                                                  lambda: None))
    await until(lambda: watches.relays, what="the watch relayed")
    for i in range(100):
        watches.emit(event(i, pad=2048))
        await asyncio.sleep(0.001)
    assert not watches.relays  # cut off: it gets nothing more
    await asyncio.wait_for(handling, 5)  # and its handler is done
    names = [orjson.loads(x)["object"]["metadata"]["name"] for x in b"".join(sent).splitlines()]
    assert 0 < len(names) < 100 and names == [f"c{i}" for i in range(len(names))]
