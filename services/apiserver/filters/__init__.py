"""The handler chain's filters, as k8s.io/apiserver's endpoints/filters and server/filters.

A Handler takes a request's context and answers it. A filter is a function `with_x(handler, deps...)`
that returns a Handler wrapping `handler`, as kube's `WithX(handler, ...) http.Handler`; a server
assembles its chain in one function (the proxy's build_handler_chain), which reads top to bottom
from the outermost filter to the API handler as kube's DefaultBuildHandlerChain does bottom to top.

What kube keeps in the request's context.Context (RequestInfo, the user, the audit event, the
deadline) lives on the per-request object the server makes (RequestContext below: the attributes
the filters read and set), so a filter allocates nothing per request but its own coroutine, and a
filter whose work before the next handler is synchronous not even that: it returns the next
handler's awaitable. Errors are raised (services.common.errors.APIError) and answered once, by
with_panic_recovery (past the deadline, with_timeout_for_non_long_running_requests answers 504).
Backends (the authenticator, the authorizer, the seat source, the audit policy and sinks) are
passed in where the chain is built, never imported here.
"""
from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from apiary_pb import envelope_pb2 as pb
from services.common.errors import APIError


class ClientDisconnected(Exception):
    """The client went away; nothing more is to be written."""


class RequestContext(Protocol):
    """What the filters read and set on a request (the proxy's Context is one)."""

    scope: dict[str, Any]  # the ASGI scope
    audit_id: str
    method: str
    path: str
    query_string: bytes
    headers: dict[bytes, bytes]
    impersonation: list[tuple[bytes, bytes]]
    extra_headers: list[tuple[bytes, bytes]]
    code: int
    response_started: bool
    response_chunks: list[bytes] | None  # the answer's bytes, kept when the audit level is RequestResponse
    # set by the filters, for those after them and the handler
    info: Any  # RequestInfo
    query: dict[str, str]
    user: pb.UserInfo
    user_name: str  # as the request log shows it: "<user>" or "<user> as <impersonated user>"
    seat: Any  # the priority-and-fairness seat
    audit: Any  # the audit event, when the policy audits the request
    failure: APIError | None
    panic: bool
    mark: float  # perf_counter of the last Server-Timing stage's end

    @property
    def raw_headers(self) -> list[tuple[bytes, bytes]]: ...

    @property
    def client_cert(self) -> dict[str, Any] | None: ...

    def timing(self, stage: str, since: float) -> float: ...

    async def race(self, aw: Awaitable[Any]) -> Any: ...

    async def error(self, err: APIError) -> None: ...

    async def abort(self) -> None: ...

    async def send(self, message: dict[str, Any]) -> None: ...


Handler = Callable[[RequestContext], Awaitable[None]]
