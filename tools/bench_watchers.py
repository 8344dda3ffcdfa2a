"""A lean load generator of HTTPS watches, run as a subprocess by tools.bench_storage so that its CPU is
its own and can be reported beside the servers'.

    python -m tools.bench_watchers HOST PORT CA CERT KEY PATH WATCHERS EXPECTED

opens WATCHERS TLS connections on uvloop, sends each the watch request PATH and reads raw bytes: per
event it only finds the write time the bench embedded in the object ("t":"<epoch seconds>") and keeps
the delay (no JSON parse, no chunk re-framing, no line splitting). Once every watch has its 200 it
prints `ready OK BAD` (BAD: the first refused status line, or -), then reads until EXPECTED events have
arrived or a line `stop` comes on stdin, and prints one JSON line: {"delays": [...seconds],
"cpu_s": its CPU seconds since ready, "closed": connections the server closed meanwhile}.
"""
from __future__ import annotations

import asyncio
import resource
import ssl
import sys
import time
from typing import Any

import orjson
import uvloop

MARK = b'"t":"'


class WatchReader(asyncio.Protocol):
    """One watch connection; delays go to the shared list, the end of all of them sets done."""

    def __init__(self, delays: list[float], expected: int, done: asyncio.Event, closed: list[int]) -> None:
        self.delays, self.expected, self.done, self.closed = delays, expected, done, closed
        self.tail = b""
        self.status = b""
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        now = time.time()
        if not self.status:
            self.status = data[:data.find(b"\r\n")] if b"\r\n" in data else data[:40]
        buf = self.tail + data if self.tail else data
        i = buf.find(MARK)
        while i >= 0:
            j = buf.find(b'"', i + 5)
            if j < 0:
                break
            self.delays.append(now - float(buf[i + 5:j]))
            i = buf.find(MARK, j)
        # keep what may be the start of a mark cut by the read
        self.tail = buf[i:] if i >= 0 else buf[-(len(MARK) - 1):]
        if len(self.delays) >= self.expected:
            self.done.set()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed[0] += 1


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


async def main(argv: list[str]) -> None:
    host, port, ca, cert, key, path, watchers, expected = argv
    ctx = ssl.create_default_context(cafile=ca)
    ctx.load_cert_chain(cert, key)
    loop = asyncio.get_running_loop()
    delays: list[float] = []
    done = asyncio.Event()
    closed = [0]
    request = (f"GET {path} HTTP/1.1\r\nHost: {host}\r\nAccept: application/json\r\n\r\n").encode()
    readers: list[WatchReader] = []
    gate = asyncio.Semaphore(100)

    async def open_one() -> None:
        async with gate:
            _, r = await loop.create_connection(lambda: WatchReader(delays, int(expected), done, closed),
                                                host, int(port), ssl=ctx, server_hostname="localhost")
            r.transport.write(request)  # type: ignore[union-attr]
            readers.append(r)

    await asyncio.gather(*(open_one() for _ in range(int(watchers))))
    deadline = time.monotonic() + 60
    while any(not r.status for r in readers) and time.monotonic() < deadline:
        await asyncio.sleep(0.05)  # the 200 comes once the registry has started the watch
    bad = [r.status for r in readers if not r.status.startswith(b"HTTP/1.1 200")]
    ok = len(readers) - len(bad)
    sys.stdout.write(f"ready {ok} {bad[0].decode('latin-1').replace(' ', '_') if bad else '-'}\n")
    sys.stdout.flush()
    cpu0 = _cpu()
    stdin = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(stdin), sys.stdin)
    stop = asyncio.ensure_future(stdin.readline())
    finished = asyncio.ensure_future(done.wait())
    await asyncio.wait({stop, finished}, return_when=asyncio.FIRST_COMPLETED)
    cpu = _cpu() - cpu0
    out: dict[str, Any] = {"delays": delays, "cpu_s": round(cpu, 3), "closed": closed[0]}
    sys.stdout.buffer.write(orjson.dumps(out) + b"\n")
    sys.stdout.flush()
    for r in readers:
        if r.transport is not None:
            r.transport.abort()
    stop.cancel()
    finished.cancel()


if __name__ == "__main__":
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(main(sys.argv[1:]))
