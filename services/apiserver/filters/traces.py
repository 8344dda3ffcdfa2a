"""kube's WithTracing: the request's root span, made once the user is known.

A client's `traceparent` is continued only for system:masters and system:monitoring (kube 1.33); any
other caller's becomes a link of a new root span, so no untrusted client picks trace IDs or sampling.
The root span is backdated to the request's arrival, so it covers the filters before this one. Without
a tracing configuration the filter is not in the chain at all.
"""
from __future__ import annotations

import time

from services.common import tracing

from . import Handler, RequestContext

TRUSTED_GROUPS = frozenset({"system:masters", "system:monitoring"})


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


def with_tracing(handler: Handler) -> Handler:
    if not tracing.ENABLED:
        return handler

    async def traced(ctx: RequestContext) -> None:
        sent = ctx.headers.get(b"traceparent")
        trusted = sent is not None and not TRUSTED_GROUPS.isdisjoint(ctx.user.groups)
        if not tracing.may_record(trusted):  # rate 0 and no trusted parent: nothing to make
            await handler(ctx)
            return
        started = getattr(ctx, "started", None)
        start = None if started is None else time.time_ns() - int((time.perf_counter() - started) * 1e9)
        with tracing.root(span_name(ctx), sent.decode("latin-1") if sent else "", trusted, start,
                          {"audit-id": ctx.audit_id, "http.method": ctx.method, "http.target": ctx.path}) as span:
            await handler(ctx)
            if span is not None:
                span.set_attribute("http.status_code", ctx.code)
    return traced
