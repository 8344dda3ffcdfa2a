"""A small HTTP server on each service's own port: /metrics, /healthz, /livez, /readyz.

Written on asyncio streams rather than an ASGI server so that it adds no signal
handling or event-loop policy of its own to the service it runs in.
"""
from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from prometheus_client import CONTENT_TYPE_LATEST

from . import metrics

log = logging.getLogger(__name__)

ReadyCheck = Callable[[], Awaitable[bool]]


class HealthServer:
    def __init__(self, host: str, port: int, checks: dict[str, ReadyCheck] | None = None) -> None:
        self.host, self.port = host, port
        self.checks = checks or {}
        # Set when the service begins to stop: /readyz fails from then on, as kube's does during
        # its graceful shutdown, while /livez still answers.
        self.shutting_down = False
        self._server: asyncio.base_events.Server | None = None

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._handle, self.host, self.port, reuse_address=True)

    async def stop(self) -> None:
        if self._server:
            self._server.close()

    async def ready(self) -> tuple[bool, str]:
        ok, lines = True, []
        if self.shutting_down:
            ok = False
            lines.append("[-]shutdown failed")
        for name, check in self.checks.items():
            try:
                good = await asyncio.wait_for(check(), 2.0)
            except Exception:  # noqa: BLE001 - a failing check is a failed check
                good = False
            ok = ok and good
            lines.append(f"[{'+' if good else '-'}]{name} {'ok' if good else 'failed'}")
        lines.append("readyz check passed" if ok else "readyz check failed")
        return ok, "\n".join(lines) + "\n"

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            line = await asyncio.wait_for(reader.readline(), 5)
            openmetrics = False  # a scraper that asks for OpenMetrics (Prometheus does) gets the exemplars
            while (header := await asyncio.wait_for(reader.readline(), 5)) not in (b"\r\n", b"\n", b""):
                if header[:7].lower() == b"accept:" and metrics.OPENMETRICS.encode() in header.lower():
                    openmetrics = True
            parts = line.decode("latin-1").split()
            path = parts[1].split("?")[0] if len(parts) > 1 else "/"
            ctype = "text/plain; charset=utf-8"
            if path == "/metrics" and openmetrics:
                code, body, ctype = 200, await metrics.render(openmetrics=True), metrics.OPENMETRICS_CONTENT_TYPE
            elif path == "/metrics":
                code, body, ctype = 200, await metrics.render(), CONTENT_TYPE_LATEST
            elif path in ("/healthz", "/livez"):
                code, body = 200, b"ok"
            elif path == "/readyz":
                ok, text = await self.ready()
                code, body = (200 if ok else 500), text.encode()
            else:
                code, body = 404, b"not found\n"
            reason = {200: "OK", 404: "Not Found", 500: "Internal Server Error"}[code]
            writer.write(
                f"HTTP/1.1 {code} {reason}\r\nContent-Type: {ctype}\r\nContent-Length: {len(body)}\r\n"
                f"Connection: close\r\n\r\n".encode() + body
            )
            await writer.drain()
        except (asyncio.TimeoutError, ConnectionError):
            pass
        finally:
            writer.close()
