"""The kit's per-request state: what the library's filters read and set
(services.apiserver.filters.RequestContext), and the answers written with the request's Audit-Id and
Server-Timing headers, as the core path (the proxy's Context) writes them."""
from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any, TypeVar

from apiary_pb import envelope_pb2 as pb
from services.apiserver.audit.policy import Event
from services.apiserver.filters.context import BaseContext, audit_id, warning_headers
from services.apiserver.negotiation import JSON, indent_json
from services.apiserver.requestinfo import RequestInfo
from services.common.errors import APIError

T = TypeVar("T")


class Context(BaseContext):
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
        self.audit_id = audit_id(self.headers.get(b"audit-id"))
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

    async def race(self, aw: Awaitable[T]) -> T:
        """The kit has no flow control that waits for a seat: nothing to race the client against."""
        return await aw

    # answers -------------------------------------------------------------------------------------------

    def response_headers(self, headers: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
        """headers with the request's Audit-Id and its Server-Timing stages so far."""
        out = [*headers, (b"audit-id", self.audit_id.encode())]
        if self.timings:
            out.append((b"server-timing", self.server_timing()))
        return out + self.extra_headers

    async def start(self, code: int, headers: list[tuple[bytes, bytes]]) -> None:
        self.code = code
        self.response_started = True
        await self.send({"type": "http.response.start", "status": code, "headers": self.response_headers(headers)})

    async def respond(self, code: int, body: bytes, content_type: str = JSON,
                      headers: list[tuple[bytes, bytes]] | None = None) -> None:
        if content_type == JSON and self.pretty:
            body = indent_json(body)
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
