"""The audit filters, as kube's endpoints/filters/audit.go: with_audit_init (outermost but the request
log) completes the event once the answer is written, with_audit begins it after authentication,
failed_authentication_audit for a request that authentication refused. The policy and the backends
are the Auditor passed in (services/apiserver/audit).
"""
from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from apiary_pb import envelope_pb2 as pb
from services.common.errors import InternalError

from ..audit import metrics as audit_metrics
from ..audit.policy import Auditor, Event, now
from ..requestinfo import RequestInfo
from . import Handler, RequestContext


def new_event(auditor: Auditor, audit_id: str, info: RequestInfo, user: pb.UserInfo | None, path: str,
              query_string: bytes, raw_headers: list[tuple[bytes, bytes]], scope: dict[str, Any]) -> Event | None:
    """A request's audit event as the policy decides it (None: not audited): the request URI, the
    source IPs (X-Forwarded-For, then the ASGI scope's peer), the user agent."""
    qs = query_string.decode("latin-1")
    forwarded, agent = [], ""
    for k, v in raw_headers:
        if k == b"x-forwarded-for":
            forwarded += [ip.strip() for ip in v.decode("latin-1").split(",") if ip.strip()]
        elif k == b"user-agent":
            agent = v.decode("latin-1")
    client = scope.get("client")
    if client and client[0] not in forwarded:
        forwarded.append(client[0])
    return auditor.begin(audit_id, info, user, f"{path}?{qs}" if qs else path, forwarded, agent, now())


def _begin(auditor: Auditor, ctx: RequestContext, user: pb.UserInfo | None) -> bool:
    """Begin the request's audit event; False when its RequestReceived stage could not be stored."""
    ev = new_event(auditor, ctx.audit_id, ctx.info, user, ctx.path, ctx.query_string, ctx.raw_headers, ctx.scope)
    if ev is None:
        return True
    ctx.audit = ev
    if ev.wants_response and ctx.info.verb != "watch":
        ctx.response_chunks = []
    return ev.stage("RequestReceived")


def with_audit(handler: Handler, auditor: Auditor | None) -> Handler:
    """kube's WithAudit: the event begins once the user is known (before impersonation)."""
    if auditor is None:
        return handler

    def audit(ctx: RequestContext) -> Awaitable[None]:
        if not _begin(auditor, ctx, ctx.user):
            audit_metrics.REQUEST_REJECTED.inc()  # blocking-strict: kube fails the request
            raise InternalError("Internal error occurred: failed to store audit event")
        return handler(ctx)
    return audit


def failed_authentication_audit(auditor: Auditor | None) -> Callable[[RequestContext], None] | None:
    """kube's WithFailedAuthenticationAudit: a request refused 401 is audited too, without a user."""
    if auditor is None:
        return None

    def failed(ctx: RequestContext) -> None:
        _begin(auditor, ctx, None)
    return failed


def with_audit_init(handler: Handler, auditor: Auditor | None) -> Handler:
    """The request's audit context (kube's WithAuditInit): the event with_audit or a failed
    authentication began inside is completed here, once the answer (a Status, a 504) is written."""
    if auditor is None:
        return handler

    async def audit_init(ctx: RequestContext) -> None:
        try:
            await handler(ctx)
        finally:
            if ctx.audit is not None:
                _complete(ctx)
    return audit_init


def _complete(ctx: RequestContext) -> None:
    ev, failure = ctx.audit, ctx.failure
    if failure is not None and failure.audit_annotations:  # a refusal's admission annotations
        ev.annotations.update(failure.audit_annotations)
    chunks = ctx.response_chunks
    if chunks:
        ev.set_response(b"".join(chunks))
    code = failure.code if failure is not None and not ctx.response_started else (ctx.code or 500)
    ev.stage("Panic" if ctx.panic else "ResponseComplete", code,
             failure if failure is not None and code >= 400 else None)
