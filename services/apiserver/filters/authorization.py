"""Authorization: kube's WithAuthorization, and the Forbidden it answers (responsewriters.Forbidden).

The authorizer (the proxy's: the auth service with a decision cache; the kit's: delegated
SubjectAccessReview) is passed in.
"""
from __future__ import annotations

from collections.abc import Awaitable
from typing import Any, Protocol

from apiary_pb import envelope_pb2 as pb
from services.apiserver.requestinfo import RequestInfo
from services.common import tracing
from services.common.errors import Forbidden

from . import Handler, RequestContext
from .traces import sampled, stage, step


class Authorizer(Protocol):
    async def decide(self, user: pb.UserInfo, info: RequestInfo) -> tuple[bool, str]:
        """(allowed, the authorizer's reason)."""


def _decides_here(authorizer: Authorizer, user: pb.UserInfo, info: RequestInfo) -> bool:
    """Whether the authorizer answers without a call (an authorizer's optional decides_here())."""
    decides_here = getattr(authorizer, "decides_here", None)
    return decides_here is not None and decides_here(user, info)


def forbidden_error(user: str, info: RequestInfo, reason: str = "") -> Forbidden:
    """responsewriters.ForbiddenStatusError: the same message, reason and details as kube-apiserver."""
    msg = f'User "{user}" cannot {info.verb}'
    if info.is_resource_request:
        res = f"{info.resource}/{info.subresource}" if info.subresource else info.resource
        msg += f' resource "{res}" in API group "{info.api_group}"'
        msg += f' in the namespace "{info.namespace}"' if info.namespace else " at the cluster scope"
    else:
        msg += f' path "{info.path}"'
    if reason:
        msg += f": {reason}"
    # apierrors.NewForbidden with the GroupResource of the request
    group, resource, name = info.api_group, info.resource, info.name
    if not group and not resource:
        message = f"forbidden: {msg}"
    else:
        qualified = f"{resource}.{group}" if group else resource
        message = f'{qualified} "{name}" is forbidden: {msg}' if name else f"{qualified} is forbidden: {msg}"
    details: dict[str, Any] = {}
    if name:
        details["name"] = name
    if group:
        details["group"] = group
    if resource:
        details["kind"] = resource
    return Forbidden(message, details=details)


def with_authorization(handler: Handler, authorizer: Authorizer) -> Handler:
    """ctx.user may do ctx.info, or the request is Forbidden; the decision is annotated on the audit event."""
    decide = authorizer.decide if not tracing.ENABLED else _traced(authorizer)

    async def authorization(ctx: RequestContext) -> None:
        allowed, reason = await decide(ctx.user, ctx.info)
        if ctx.audit is not None:
            ctx.audit.authorized(allowed, reason)
        if not allowed:
            raise forbidden_error(ctx.user.name, ctx.info, reason)
        ctx.timing("authz", ctx.mark)
        await handler(ctx)
    return authorization


def _traced(authorizer: Authorizer) -> Any:
    """The authorizer's decide() in an `authorization` span with the decision (the audit annotation's); an
    event instead when the authorizer decides without a call (system:masters, a cached decision)."""
    async def in_span(user: pb.UserInfo, info: RequestInfo) -> tuple[bool, str]:
        with (step if _decides_here(authorizer, user, info) else stage)("authorization") as span:
            allowed, reason = await authorizer.decide(user, info)
            if span is not None:
                span.set_attributes({"decision": "allow" if allowed else "forbid", "reason": reason} if reason
                                    else {"decision": "allow" if allowed else "forbid"})
        return allowed, reason

    def decide(user: pb.UserInfo, info: RequestInfo) -> Awaitable[tuple[bool, str]]:
        return in_span(user, info) if sampled() else authorizer.decide(user, info)
    return decide
