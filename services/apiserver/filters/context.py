"""What the request contexts of the servers share (the proxy's and the kit's Context; the filters see
either as a RequestContext): the Audit-ID kept or made, the headers read, the Server-Timing stages, a
connection closed under an answer already started, and kube's Warning headers."""
from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Iterable
from typing import Any

from services.common.uids import new_uid

from ..negotiation import wants_pretty
from ..requestinfo import parse_query
from ..serving import CONNECTION_EXTENSION, GONE_EXTENSION

# kube takes the client's Audit-ID: one token of visible characters here, as it goes into logs
AUDIT_ID = re.compile(rb"[!-~]{1,128}")


new_audit_id = new_uid  # a new Audit-ID: kube's uuid.New()


def audit_id(sent: bytes | None) -> str:
    """The request's Audit-ID: the client's when it is one, else a new one."""
    return sent.decode() if sent and AUDIT_ID.fullmatch(sent) else new_audit_id()


def warning_headers(warnings: Iterable[str]) -> list[tuple[bytes, bytes]]:
    """RFC 7234 Warning headers as kube writes them: 299 - "<text>"."""
    out = []
    for w in warnings:
        text = w.replace("\\", "\\\\").replace('"', '\\"')
        out.append((b"warning", f'299 - "{text}"'.encode()))
    return out


class BaseContext:
    """The methods a server's Context shares; the Context holds the attributes (in its __slots__)."""

    __slots__ = ()
    scope: dict[str, Any]
    receive: Any
    headers: dict[bytes, bytes]  # the first value of each header read (User-Agent among them)
    timings: list[tuple[str, float]]
    _disconnect: asyncio.Future[None] | None

    def header(self, name: bytes) -> str:
        v = self.headers.get(name)
        return v.decode("latin-1") if v else ""

    @property
    def raw_headers(self) -> list[tuple[bytes, bytes]]:
        return self.scope["headers"]

    @property
    def pretty(self) -> bool:
        """kube's isPrettyPrint for this request: its JSON answers are indented."""
        qs = self.scope.get("query_string", b"")
        return wants_pretty(parse_query(qs) if b"pretty" in qs else {}, self.headers.get(b"user-agent", b""))

    @property
    def client_cert(self) -> dict[str, Any] | None:
        ext = self.scope.get("extensions")
        return ext.get("tls") if ext else None

    def timing(self, stage: str, since: float) -> float:
        now = time.perf_counter()
        self.timings.append((stage, (now - since) * 1000.0))
        return now

    def server_timing(self) -> bytes:
        return ", ".join(f"{name};dur={ms:.2f}" for name, ms in self.timings).encode()

    async def _wait_disconnect(self) -> None:
        while (await self.receive())["type"] != "http.disconnect":
            pass

    def _gone(self) -> asyncio.Future[None]:
        """What is done once the client has gone away: the connection's future where the server hands it
        over (no task per request), else a task reading the request's messages until http.disconnect."""
        gone = (self.scope.get("extensions") or {}).get(GONE_EXTENSION)
        return gone if gone is not None else asyncio.ensure_future(self._wait_disconnect())

    async def abort(self) -> None:
        """Close the connection under an answer already started (kube aborts the handler), so the
        client sees it cut off; returns once the server has seen the connection go."""
        transport = (self.scope.get("extensions") or {}).get(CONNECTION_EXTENSION)
        if transport is None:
            return
        transport.abort()
        if self._disconnect is None:
            self._disconnect = self._gone()
        await asyncio.wait((self._disconnect,), timeout=1.0)
