"""The kit's per-request state: what the library's filters read and set
(services.apiserver.filters.RequestContext), and the answers written with the request's Audit-Id and
Server-Timing headers, as the core path (the proxy's Context) writes them."""
from __future__ import annotations

import asyncio
import re
import time
import uuid
from collections.abc import Awaitable, Sequence
from typing import Any, TypeVar

from apiary_pb import envelope_pb2 as pb
from services.apiserver.audit.policy import Event
from services.apiserver.negotiation import JSON
from services.apiserver.requestinfo import RequestInfo
from services.apiserver.serving import CONNECTION_EXTENSION
from services.common.errors import APIError

T = TypeVar("T")

_AUDIT_ID = re.compile(rb"[!-~]{1,128}")


def warning_headers(warnings: Sequence[str]) -> list[tuple[bytes, bytes]]:
    """RFC 7234 warnings, as kube sends them: 299 - "<text>" with the text's quotes escaped."""
    return [(b"warning", ('299 - "' + w.replace("\\", "\\\\").replace('"', '\\"') + '"').encode())
            for w in warnings]


class Context:
    """One request through the kit's handler chain (services.kit.chain)."""

    __slots__ = (
        "_disconnect",
        "audit",
        "audit_id",
        "code",
        "extra_headers",
        "failure",
        "headers",
        "impersonation",
        "info",
        "mark",
        "method",
        "panic",
        "path",
        "query",
        "query_string",
        "receive",
        "response_chunks",
        "response_started",
        "scope",
        "seat",
        "send",
        "timings",
        "user",
        "user_name",
    )

    def __init__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        self.scope, self.receive, self.send = scope, receive, send
        self.method: str = scope["method"]
        self.path: str = scope["path"]
        self.query_string: bytes = scope.get("query_string", b"")
        self.headers: dict[bytes, bytes] = {}
        for k, v in scope["headers"]:
            self.headers.setdefault(k, v)
        self.impersonation: list[tuple[bytes, bytes]] = []  # the kit does not impersonate
        # kube takes the client's Audit-ID (one token of visible characters here: it goes into logs)
        sent = self.headers.get(b"audit-id")
        self.audit_id = sent.decode() if sent and _AUDIT_ID.fullmatch(sent) else str(uuid.uuid4())
        self.extra_headers: list[tuple[bytes, bytes]] = []
        self.code = 0
        self.response_started = False
        self.response_chunks: list[bytes] | None = None
        self.timings: list[tuple[str, float]] = []
        self.info: RequestInfo | None = None
        self.query: dict[str, str] = {}
        self.user: pb.UserInfo | None = None
        self.user_name = ""
        self.seat: Any = None
        self.audit: Event | None = None
        self.failure: APIError | None = None
        self.panic = False
        self.mark = 0.0
        self._disconnect: asyncio.Task[None] | None = None

    def header(self, name: bytes) -> str:
        v = self.headers.get(name)
        return v.decode("latin-1") if v else ""

    @property
    def raw_headers(self) -> list[tuple[bytes, bytes]]:
        return self.scope["headers"]

    @property
    def client_cert(self) -> dict[str, Any] | None:
        ext = self.scope.get("extensions")
        return ext.get("tls") if ext else None

    def timing(self, stage: str, since: float) -> float:
        now = time.perf_counter()
        self.timings.append((stage, (now - since) * 1000.0))
        return now

    async def race(self, aw: Awaitable[T]) -> T:
        """The kit has no flow control that waits for a seat: nothing to race the client against."""
        return await aw

    # answers -------------------------------------------------------------------------------------------

    def response_headers(self, headers: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
        """headers with the request's Audit-Id and its Server-Timing stages so far."""
        out = [*headers, (b"audit-id", self.audit_id.encode())]
        if self.timings:
            out.append((b"server-timing",
                        ", ".join(f"{name};dur={ms:.2f}" for name, ms in self.timings).encode()))
        return out + self.extra_headers

    async def start(self, code: int, headers: list[tuple[bytes, bytes]]) -> None:
        self.code = code
        self.response_started = True
        await self.send({"type": "http.response.start", "status": code, "headers": self.response_headers(headers)})

    async def respond(self, code: int, body: bytes, content_type: str = JSON,
                      headers: list[tuple[bytes, bytes]] | None = None) -> None:
        if self.response_chunks is not None and content_type == JSON:
            self.response_chunks.append(body)
        await self.start(code, [(b"content-type", content_type.encode()),
                                (b"content-length", str(len(body)).encode()), *(headers or ())])
        await self.send({"type": "http.response.body", "body": body})

    async def error(self, err: APIError) -> None:
        if self.response_started:
            return
        headers = [(k.lower().encode(), str(v).encode()) for k, v in err.headers.items()]
        await self.respond(err.code, err.body(), JSON, headers + warning_headers(err.warnings or ()))

    async def abort(self) -> None:
        """Close the connection under an answer already started (kube aborts the handler), so the
        client sees it cut off; returns once the server has seen the connection go."""
        transport = (self.scope.get("extensions") or {}).get(CONNECTION_EXTENSION)
        if transport is None:
            return
        transport.abort()
        if self._disconnect is None:
            self._disconnect = asyncio.ensure_future(self._wait_disconnect())
        await asyncio.wait((self._disconnect,), timeout=1.0)

    async def _wait_disconnect(self) -> None:
        while (await self.receive())["type"] != "http.disconnect":
            pass
