"""kube's WithTracing: the request's root span, made once the user is known, and the spans of the stages
after it that call another service (kube's filters).

A client's `traceparent` is continued only for system:masters and system:monitoring (kube 1.33); any
other caller's becomes a link of a new root span, so no untrusted client picks trace IDs or sampling.
The root span is backdated to the request's arrival, so it covers the filters before this one, and
authentication (timed before the root existed) is an event on it with its duration. A stage that makes
no call to another service (step(): authorization decided in process, an exempt request's apf wait) is
such an event too, as kube's utiltrace steps are: a span would say nothing more, and cost more (so is the
apf execution, which the handler's call runs in). The handler is the registry's (or an aggregated server's):
its span (kube's Get, Create, ...: verb, resource, namespace) is the root's child, and the root carries the
response code, also when the request failed (the error is answered by with_panic_recovery, outside it),
and is marked failed on a 5xx. A long-running request (a watch) is traced for its setup only: its
handler calls established() once it streams, which ends the root and the stages still open.
Without a tracing configuration none of this is in the chain at all.
A server behind an authenticating front proxy (the kit) also continues the context its verified front
proxy sends (`trusted_peer`), whoever the user is: the proxy has applied this rule already and sends
its own span's context, never the client's.
"""
from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Mapping
from contextvars import ContextVar
from typing import Any, TypeVar

from services.common import tracing
from services.common.errors import APIError

from . import ClientDisconnected, Handler, RequestContext

TRUSTED_GROUPS = frozenset({"system:masters", "system:monitoring"})
T = TypeVar("T")
_NULL = contextlib.nullcontext()


class RequestTrace:
    """The sampled request's root span and the stage spans open under it (in this request's task)."""

    __slots__ = ("open", "root", "trace_id")

    def __init__(self, root: Any) -> None:
        self.root = root
        self.open: list[Any] = []
        self.trace_id = f"{root.get_span_context().trace_id:032x}"

    def finish(self, code: int) -> None:
        """End what is open and the root, with the response code where it belongs."""
        for span in reversed(self.open):
            tracing.end(span)
        self.open.clear()
        _code(self.root, code)
        tracing.end(self.root, _error(code))


# the current request's trace, set in its task by with_tracing (each request has a task of its own)
_REQUEST: ContextVar[RequestTrace | None] = ContextVar("apiary_request_trace", default=None)


def _code(span: Any, code: int) -> None:
    if code and span.is_recording():
        span.set_attribute("http.status_code", code)


def _error(code: int) -> str:
    return f"HTTP {code}" if code >= 500 else ""


def span_name(ctx: RequestContext) -> str:
    """kube's span name: the method and, for a resource request, its path with the names left out."""
    info = ctx.info
    if info is None or not info.is_resource_request:
        return ctx.method
    name = "/" + info.api_prefix + (f"/{info.api_group}" if info.api_group else "") + f"/{info.api_version}"
    if info.namespace:
        name += "/namespaces/{:namespace}"
    name += "/" + info.resource
    if info.name:
        name += "/{:name}"
    if info.subresource:
        name += "/" + info.subresource
    return f"{ctx.method} {name}"


def _ns(perf: float) -> int:
    """A time.perf_counter() reading as ns since the epoch (span times)."""
    return time.time_ns() - int((time.perf_counter() - perf) * 1e9)


def _authentication(ctx: RequestContext) -> None:
    """Authentication, timed before the root existed (its Server-Timing stage, ended at ctx.mark): an event
    on the root with its duration (no call it made is in the trace: there was none to continue yet)."""
    ms = next((d for stage, d in reversed(ctx.timings) if stage == "authn"), None)  # type: ignore[attr-defined]
    if ms is not None:
        tracing.add_event("authentication", {"duration_ms": round(ms, 3)}, _ns(ctx.mark))


def with_tracing(handler: Handler, trusted_peer: Callable[[RequestContext], bool] | None = None) -> Handler:
    if not tracing.ENABLED:
        return handler

    async def traced(ctx: RequestContext) -> None:
        sent = ctx.headers.get(b"traceparent")
        trusted = sent is not None and (not TRUSTED_GROUPS.isdisjoint(ctx.user.groups)
                                        or (trusted_peer is not None and trusted_peer(ctx)))
        if not tracing.may_record(trusted):  # rate 0 and no trusted parent: nothing to make
            await handler(ctx)
            return
        started = getattr(ctx, "started", None)
        start = None if started is None else _ns(started)
        with tracing.root(span_name(ctx), sent.decode("latin-1") if sent else "", trusted, start,
                          {"audit-id": ctx.audit_id, "http.method": ctx.method, "http.target": ctx.path}) as span:
            if span is None:  # not sampled: the downstream services follow, nothing to record here
                await handler(ctx)
                return
            trace = RequestTrace(span)
            _REQUEST.set(trace)
            _authentication(ctx)
            code = 0
            try:
                await handler(ctx)
                code = ctx.code
            except APIError as e:  # answered by with_panic_recovery, after this span
                code = e.code
                raise
            except ClientDisconnected:
                code = 499
                raise
            except Exception:
                code = 500  # with_panic_recovery's answer
                raise
            except asyncio.CancelledError:
                code = 504  # the request's deadline cancelled it (kube's timeout filter answers 504)
                raise
            finally:
                trace.finish(code)
    return traced


def sampled() -> bool:
    """Whether the current request is traced here (its stages are worth a span): a cheap test before
    a stage() for the filters that run on every request."""
    return _REQUEST.get() is not None


def established(code: int = 200) -> None:
    """A long-running request is set up (a watch streams): its root span and the stages open end now,
    not when it ends hours later."""
    trace = _REQUEST.get() if tracing.ENABLED else None
    if trace is not None:
        trace.finish(code)


def trace_id() -> str:
    """The current request's trace ID when it is sampled ("" otherwise), for an exemplar; still known
    once the request's spans have ended."""
    trace = _REQUEST.get() if tracing.ENABLED else None
    return "" if trace is None else trace.trace_id


class _Stage:
    """A span for one stage of a sampled request, current for the block (a class, not a generator: every
    stage of a sampled request pays for it); it ends with the block, or earlier when the request is
    established. Marked failed when a 5xx escapes it."""

    __slots__ = ("_span", "_token", "_trace")

    def __init__(self, trace: RequestTrace, span: Any) -> None:
        self._trace, self._span = trace, span

    def __enter__(self) -> Any:
        self._trace.open.append(self._span)
        self._token = tracing.make_current(self._span)
        return self._span

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: object) -> None:
        tracing.restore(self._token)
        error = ""
        if isinstance(exc, APIError):
            error = _error(exc.code)
        elif isinstance(exc, Exception) and not isinstance(exc, ClientDisconnected):
            error = type(exc).__name__
        open_ = self._trace.open
        if self._span in open_:
            open_.remove(self._span)
        tracing.end(self._span, error)


class _Step(tracing.Step):
    """A step of the request (traces.step()): a client that went away is no failure of the stage's."""

    __slots__ = ()
    quiet = (ClientDisconnected,)


def stage(name: str, attributes: Mapping[str, Any] | None = None) -> contextlib.AbstractContextManager[Any]:
    """A span for one stage of a sampled request (None otherwise), current for the block; it ends with
    the block, or earlier when the request is established. Marked failed when a 5xx escapes it."""
    trace = _REQUEST.get()
    span = tracing.start_span(name, attributes) if trace is not None else None
    return _NULL if span is None else _Stage(trace, span)  # type: ignore[arg-type]


def step(name: str, attributes: Mapping[str, Any] | None = None) -> contextlib.AbstractContextManager[Any]:
    """A stage of a sampled request that makes no call to another service: an event with its duration on
    the current span (what set_attributes() puts on it goes with it), None when the request is not sampled."""
    return _NULL if _REQUEST.get() is None else _Step(name, attributes)


def traced(name: str, call: Callable[..., Awaitable[T]]) -> Callable[..., Awaitable[T]]:
    """`call` in a stage span of its own (a filter's one await: impersonation's checks)."""
    async def call_in_span(*args: Any) -> T:
        with stage(name):
            return await call(*args)

    def in_span(*args: Any) -> Awaitable[T]:
        return call_in_span(*args) if _REQUEST.get() is not None else call(*args)
    return in_span
