"""A lean open-loop load generator, run as a subprocess by tools.bench so that it shares no event loop
with the bench's bookkeeping and its CPU is its own, reported beside the servers'.

    python -m tools.bench_openloop SPEC

SPEC is JSON: host, ports (the connections go to each in turn), ca, cert, key, connections (the pool),
method, path, headers, body (a `$N` in it becomes each request's number: unique names for creates) and
expect (the status every answer must have). On uvloop it opens the pool over TLS, sends one request on
each connection (handshakes and caches warm), prints `ready`, and on a line `RATE SECONDS` on stdin sends
RATE requests a second for SECONDS whatever the answers: each on the next idle connection, or, when none
is idle, on the first to come free (a client's bounded pool). Requests are pre-built bytes; of an answer
only the status line, Content-Length and Server-Timing are read. It then prints one JSON line: {"samples":
[[latency s, connection wait s, Server-Timing], ...], "elapsed": s, "max_in_flight", "bad": [the first
unexpected status lines]}, latency counted from when the request was due, and exits when stdin closes.
"""
from __future__ import annotations

import asyncio
import gc
import math
import ssl
import sys
import time
from collections import deque
from typing import Any

import orjson
import uvloop


class Connection(asyncio.Protocol):
    """One keep-alive connection, one request at a time; each complete answer goes to the pool."""

    def __init__(self, pool: Pool) -> None:
        self.pool = pool
        self.transport: asyncio.Transport | None = None
        self.buf = bytearray()
        self.head: tuple[bytes, int, str] | None = None  # status line, body length, Server-Timing
        self.due = self.sent = 0.0
        self.lost = asyncio.get_running_loop().create_future()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def send(self, request: bytes, due: float) -> None:
        self.due, self.sent = due, time.perf_counter()
        self.transport.write(request)  # type: ignore[union-attr]

    def data_received(self, data: bytes) -> None:
        self.buf += data
        if self.head is None:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                return
            raw = bytes(self.buf[:end + 2])
            del self.buf[:end + 4]
            self.head = (raw[:raw.find(b"\r\n")], int(header(raw, b"\r\ncontent-length:") or b"0"),
                         header(raw, b"\r\nserver-timing:").decode("latin-1"))
        status, length, timing = self.head
        if len(self.buf) >= length:
            del self.buf[:length]
            self.head = None
            self.pool.answered(self, status, timing)

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.lost.done():
            self.lost.set_result(exc)
        self.pool.closed(self)


def header(head: bytes, name: bytes) -> bytes:
    """A header's value (name: lower case, after CRLF) in a response head ending with CRLF, or b""."""
    i = head.lower().find(name)
    if i < 0:
        return b""
    start = i + len(name)
    return head[start:head.find(b"\r\n", start)].strip()


class Pool:
    """The connections and the requests waiting for one: each answer frees its connection for the
    first request waiting, else puts it back at the end of the idle ones."""

    def __init__(self, body: bytes, head: bytes, expect: bytes) -> None:
        self.body, self.head, self.expect = body, head, expect
        self.idle: deque[Connection] = deque()
        self.waiting: deque[tuple[int, float]] = deque()
        self.samples: list[tuple[float, float, str]] = []
        self.bad: list[str] = []
        self.in_flight = self.max_in_flight = 0
        self.total = 0
        self.finished = asyncio.Event()
        self.failed: BaseException | None = None

    def request(self, i: int) -> bytes:
        """The request bytes: pre-built, or with the request's number in its body."""
        if b"$N" not in self.body:
            return self.head + self.body
        body = self.body.replace(b"$N", str(i).encode())
        return self.head.replace(b"Content-Length: 0", b"Content-Length: %d" % len(body)) + body

    def dispatch(self, i: int, due: float) -> None:
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        if self.idle:
            self.idle.popleft().send(self.request(i), due)
        else:
            self.waiting.append((i, due))

    def answered(self, conn: Connection, status: bytes, timing: str) -> None:
        now = time.perf_counter()
        self.in_flight -= 1
        self.samples.append((now - conn.due, conn.sent - conn.due, timing))
        if not status.startswith(self.expect) and len(self.bad) < 5:
            self.bad.append(status.decode("latin-1"))
        if self.waiting:
            conn.send(self.request(self.waiting[0][0]), self.waiting.popleft()[1])
        else:
            self.idle.append(conn)
        if len(self.samples) >= self.total:
            self.finished.set()

    def closed(self, conn: Connection) -> None:
        if self.total and len(self.samples) < self.total and self.failed is None:
            self.failed = ConnectionError("the server closed a connection of the pool")
            self.finished.set()


async def run_phase(pool: Pool, rate: float, seconds: float) -> float:
    """Every request sent at its time (a timer per wake-up, not per request: all those due go), until
    all are answered; the seconds from the first's due time to the last answer. uvloop's timers count
    whole milliseconds and round a shorter delay to none, which would spin the loop until the next is
    due: the wait is rounded up to the millisecond (a request leaves at most 1 ms after its time, which
    its latency, counted from that time, includes)."""
    loop = asyncio.get_running_loop()
    pool.total = total = int(rate * seconds)
    start = time.perf_counter()
    sent = 0

    def tick() -> None:
        nonlocal sent
        now = time.perf_counter()
        while sent < total and start + sent / rate <= now:
            pool.dispatch(sent, start + sent / rate)
            sent += 1
        if sent < total:
            loop.call_later(math.ceil((start + sent / rate - time.perf_counter()) * 1000) / 1000, tick)

    tick()
    await pool.finished.wait()
    if pool.failed is not None:
        raise pool.failed
    return time.perf_counter() - start


async def main(spec: dict[str, Any]) -> None:
    ctx = ssl.create_default_context(cafile=spec["ca"])
    ctx.load_cert_chain(spec["cert"], spec["key"])
    loop = asyncio.get_running_loop()
    headers = "".join(f"{k}: {v}\r\n" for k, v in spec.get("headers", {}).items())
    body = spec.get("body", "").encode()
    length = "0" if b"$N" in body else str(len(body))
    head = (f"{spec['method']} {spec['path']} HTTP/1.1\r\nHost: {spec['host']}\r\n{headers}"
            f"Content-Length: {length}\r\n\r\n").encode()
    pool = Pool(body, head, f"HTTP/1.1 {spec['expect']}".encode())
    conns: list[Connection] = []
    for k in range(spec["connections"]):
        port = spec["ports"][k % len(spec["ports"])]
        _, conn = await loop.create_connection(lambda: Connection(pool), spec["host"], port, ssl=ctx,
                                               server_hostname="localhost")
        conns.append(conn)
    # one request on each (warm), numbered below the phase's
    pool.total = len(conns)
    for k, conn in enumerate(conns):
        conn.send(pool.request(-1 - k), time.perf_counter())
    await pool.finished.wait()
    if pool.bad:
        raise RuntimeError(f"warm-up answers: {pool.bad}")
    pool.samples.clear()
    pool.finished.clear()
    pool.in_flight = pool.max_in_flight = 0
    # Nothing it keeps makes cycles: the collector would only pause the sends now and then.
    gc.collect()
    gc.disable()
    stdin = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(stdin), sys.stdin)
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    rate, seconds = (float(x) for x in (await stdin.readline()).split())
    elapsed = await run_phase(pool, rate, seconds)
    sys.stdout.buffer.write(orjson.dumps({"samples": pool.samples, "elapsed": elapsed,
                                          "max_in_flight": pool.max_in_flight, "bad": pool.bad}) + b"\n")
    sys.stdout.flush()
    await stdin.read()  # the bench reads this process's CPU before it lets it go
    for conn in conns:
        if conn.transport is not None:
            conn.transport.abort()


if __name__ == "__main__":
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(main(orjson.loads(sys.argv[1])))
