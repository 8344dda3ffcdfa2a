"""Per-request state of the handler chain (what kube keeps in the request's context.Context; the
library's filters see it as services.apiserver.filters.RequestContext) and the raw ASGI response helpers."""
from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any, TypeVar

from apiary_pb import envelope_pb2 as pb
from services.apiserver.filters import ClientDisconnected
from services.apiserver.filters.context import BaseContext, audit_id, warning_headers
from services.apiserver.negotiation import JSON, indent_json
from services.apiserver.serving import CONNECTION_EXTENSION
from services.common.errors import APIError, RequestEntityTooLarge

from .encoding import encode_error

if TYPE_CHECKING:
    from services.apiserver.audit.policy import Event
    from services.apiserver.negotiation import Output
    from services.apiserver.requestinfo import RequestInfo

    from .filters.apf import Seat


T = TypeVar("T")

# kube-apiserver's MaxRequestBodyBytes
MAX_REQUEST_BODY_BYTES = 3 * 1024 * 1024
_WANTED_HEADERS = frozenset(
    (b"accept", b"audit-id", b"authorization", b"content-type", b"content-length", b"if-none-match",
     b"traceparent", b"user-agent"))
_IMPERSONATE_PREFIX = b"impersonate-"


def too_large(limit: int = MAX_REQUEST_BODY_BYTES) -> RequestEntityTooLarge:
    return RequestEntityTooLarge(f"Request entity too large: limit is {limit}")


class Context(BaseContext):
    __slots__ = ("scope", "receive", "send", "audit_id", "started", "timings", "headers", "extra_headers",
                 "code", "response_started", "_disconnect", "method", "path", "query_string", "impersonation",
                 "audit", "response_chunks", "output", "info", "query", "remote", "body", "user", "user_name",
                 "seat", "mark", "failure", "panic", "apply")

    def __init__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        self.scope, self.receive, self.send = scope, receive, send
        self.method: str = scope["method"]
        self.path: str = scope["path"]
        self.query_string: bytes = scope.get("query_string", b"")
        self.started = time.perf_counter()
        self.timings: list[tuple[str, float]] = []
        self.headers: dict[bytes, bytes] = {}
        # every Impersonate-* header, in order and repeated ones included
        self.impersonation: list[tuple[bytes, bytes]] = []
        for k, v in scope["headers"]:
            if k in _WANTED_HEADERS:
                if k not in self.headers:
                    self.headers[k] = v
            elif k.startswith(_IMPERSONATE_PREFIX):
                self.impersonation.append((k, v))
        # kube takes the client's Audit-ID (services.apiserver.filters.context.audit_id)
        self.audit_id = audit_id(self.headers.get(b"audit-id"))
        self.extra_headers: list[tuple[bytes, bytes]] = []
        self.code = 0
        self.response_started = False
        self._disconnect: asyncio.Future[None] | None = None
        self.audit: Event | None = None  # this request's audit event, when the policy audits it
        # the response body's parts, kept for an audit event at level RequestResponse (never for watches)
        self.response_chunks: list[bytes] | None = None
        # the negotiated response form, once a resource request has one: errors are answered in it
        self.output: Output | None = None
        # set by the filters as the request goes through them
        self.info: RequestInfo | None = None
        self.query: dict[str, str] = {}
        self.remote: dict[str, Any] | None = None  # the remote APIService that serves the request
        self.body = b""
        self.user: pb.UserInfo | None = None
        self.user_name = ""
        self.seat: Seat | None = None
        self.mark = 0.0  # when the last Server-Timing stage ended
        self.failure: APIError | None = None  # the error answered, for the audit event
        self.panic = False
        self.apply = False  # a server-side apply (for the request metrics)

    # request body and disconnects ------------------------------------------------

    async def read_body(self, limit: int = MAX_REQUEST_BODY_BYTES) -> bytes:
        declared = self.headers.get(b"content-length")
        if declared is not None:
            try:
                if int(declared) > limit:
                    raise too_large(limit)
            except ValueError:
                pass
        chunks: list[bytes] = []
        size = 0
        while True:
            msg = await self.receive()
            if msg["type"] == "http.disconnect":
                raise ClientDisconnected()
            chunk = msg.get("body", b"")
            if chunk:
                size += len(chunk)
                if size > limit:
                    raise too_large(limit)
                chunks.append(chunk)
            if not msg.get("more_body", False):
                break
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)

    def watch_disconnect(self) -> None:
        """Start noticing the client going away. Call only once the body has been read."""
        if self._disconnect is None:
            self._disconnect = self._gone()

    @property
    def disconnected(self) -> asyncio.Future[None] | None:
        return self._disconnect

    async def race(self, aw: Awaitable[T]) -> T:
        """Await aw unless the client disconnects first (then aw is cancelled where it waits).

        aw runs in this task, not a task of its own: the disconnect cancels this task, and the
        cancellation is told apart from any other (the request's deadline) by who asked for it."""
        d = self._disconnect
        if d is None:
            return await aw
        if d.done() and not d.cancelled():
            if asyncio.iscoroutine(aw):
                aw.close()
            raise ClientDisconnected()
        task = asyncio.current_task()
        assert task is not None
        state = [True, False]  # racing, disconnected

        def on_disconnect(f: asyncio.Future[None]) -> None:
            # a callback already scheduled when the race ends must not cancel what follows it
            if state[0] and not f.cancelled():
                state[1] = True
                task.cancel()

        d.add_done_callback(on_disconnect)
        try:
            result = await aw
        except asyncio.CancelledError:
            if state[1] and task.uncancel() == 0:
                raise ClientDisconnected() from None
            raise
        finally:
            state[0] = False
            d.remove_done_callback(on_disconnect)
        if state[1]:  # aw swallowed the cancellation: it is over all the same
            task.uncancel()
        return result

    def connection_lost(self) -> bool:
        """The client's connection is closed (or closing) under this request."""
        transport = (self.scope.get("extensions") or {}).get(CONNECTION_EXTENSION)
        return transport is not None and transport.is_closing()

    def close(self) -> None:
        # the reading task, if it is one; never the connection's future, which outlives the request
        if isinstance(self._disconnect, asyncio.Task) and not self._disconnect.done():
            self._disconnect.cancel()

    # responses ---------------------------------------------------------------------

    def _start_headers(self, content_type: str, headers: list[tuple[bytes, bytes]] | None) -> list:
        out = [(b"content-type", content_type.encode()), (b"audit-id", self.audit_id.encode())]
        if self.timings:
            out.append((b"server-timing", self.server_timing()))
        out.extend(self.extra_headers)
        if headers:
            out.extend(headers)
        return out

    async def respond(self, code: int, body: bytes, content_type: str = JSON,
                      headers: list[tuple[bytes, bytes]] | None = None) -> None:
        if content_type == JSON and self.pretty:
            body = indent_json(body)
        hdrs = self._start_headers(content_type, headers)
        hdrs.append((b"content-length", str(len(body)).encode()))
        self.code = code
        self.response_started = True
        if self.response_chunks is not None and content_type == JSON:
            self.response_chunks.append(body)
        await self.send({"type": "http.response.start", "status": code, "headers": hdrs})
        await self.send({"type": "http.response.body", "body": body})

    async def start_stream(self, code: int, content_type: str,
                           headers: list[tuple[bytes, bytes]] | None = None) -> None:
        self.code = code
        self.response_started = True
        await self.send({"type": "http.response.start", "status": code,
                         "headers": self._start_headers(content_type, headers)})

    async def write(self, chunk: bytes) -> None:
        if self.response_chunks is not None:
            self.response_chunks.append(chunk)
        await self.send({"type": "http.response.body", "body": chunk, "more_body": True})

    def chunk_transport(self) -> asyncio.WriteTransport | None:
        """The connection under a chunked answer already started, for a stream that writes its HTTP/1.1
        chunks itself without a task switch per write (a watch); None where the server does not hand
        it over, for HTTP/1.0, or when the body is kept for the audit."""
        transport = (self.scope.get("extensions") or {}).get(CONNECTION_EXTENSION)
        if (transport is None or not self.response_started or self.response_chunks is not None
                or self.scope.get("http_version") != "1.1" or self.method == "HEAD"):
            return None
        return transport

    async def end_stream(self, last: bytes = b"") -> None:
        """The answer's end, with its last part when it is at hand (one send less)."""
        if last and self.response_chunks is not None:
            self.response_chunks.append(last)
        await self.send({"type": "http.response.body", "body": last, "more_body": False})

    async def error(self, err: APIError) -> None:
        if self.response_started:
            return
        headers = [(k.lower().encode(), str(v).encode()) for k, v in err.headers.items()]
        if err.warnings:
            headers += warning_headers(err.warnings)
        body, content_type = encode_error(err, self.output)
        await self.respond(err.code, body, content_type, headers)
