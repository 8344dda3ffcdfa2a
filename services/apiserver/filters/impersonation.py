"""Impersonation: kube's WithImpersonation filter (after authentication, before priority and fairness).

Impersonate-User, Impersonate-Group (repeatable), Impersonate-Uid and Impersonate-Extra-<key>
headers each need the real user to be allowed the verb "impersonate" on users, groups, uids or
userextras/<key> (serviceaccounts in the namespace, for a service account user name); the request
then goes on as the impersonated user.
"""
from __future__ import annotations

import re
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass

from apiary_pb import envelope_pb2 as pb
from services.apiserver.requestinfo import RequestInfo
from services.common import tracing
from services.common.errors import BadRequest
from services.common.identity import AUTHENTICATED, UNAUTHENTICATED

from . import Handler, RequestContext
from .authorization import Authorizer, forbidden_error
from .requestheader import ANONYMOUS, header_text, unescape_extra_key
from .traces import traced

USER_HEADER = b"impersonate-user"
GROUP_HEADER = b"impersonate-group"
UID_HEADER = b"impersonate-uid"
EXTRA_PREFIX = b"impersonate-extra-"
PREFIX = b"impersonate-"
AUTHENTICATION_GROUP = "authentication.k8s.io"
SA_PREFIX = "system:serviceaccount:"
SA_GROUP = "system:serviceaccounts"

_DNS1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_DNS1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def split_service_account(username: str) -> tuple[str, str] | None:
    """serviceaccount.SplitUsername: (namespace, name) of system:serviceaccount:<ns>:<name>, or None."""
    if not username.startswith(SA_PREFIX):
        return None
    parts = username[len(SA_PREFIX):].split(":")
    if len(parts) != 2:
        return None
    ns, name = parts
    if len(ns) > 63 or not _DNS1123_LABEL.fullmatch(ns):
        return None
    if len(name) > 253 or not _DNS1123_SUBDOMAIN.fullmatch(name):
        return None
    return ns, name


@dataclass(slots=True)
class Request:
    """One thing to impersonate, as the v1.ObjectReference kube builds for it."""

    kind: str  # ServiceAccount, User, Group, UserExtra, UID
    name: str
    namespace: str = ""
    field_path: str = ""  # the extra key

    @property
    def api_version(self) -> str:
        return "authentication.k8s.io/v1" if self.kind in ("UserExtra", "UID") else ""

    def go_string(self) -> str:
        """%v of the ObjectReference, as kube's BadRequest message prints it."""
        fields = (self.kind, self.namespace, self.name, "", self.api_version, "", self.field_path)
        return "{" + " ".join(fields) + "}"

    def attributes(self) -> RequestInfo:
        """What the real user must be allowed: verb impersonate on this resource."""
        group, version = (AUTHENTICATION_GROUP, "v1") if self.api_version else ("", "")
        resource, subresource = {
            "ServiceAccount": ("serviceaccounts", ""), "User": ("users", ""), "Group": ("groups", ""),
            "UserExtra": ("userextras", self.field_path), "UID": ("uids", ""),
        }[self.kind]
        return RequestInfo(path="", verb="impersonate", is_resource_request=True, api_group=group,
                           api_version=version, namespace=self.namespace, resource=resource,
                           subresource=subresource, name=self.name)


def impersonation_requests(headers: Sequence[tuple[bytes, bytes]]) -> list[Request]:
    """buildImpersonationRequests; headers are the request's impersonate-* headers (lower-case names)."""
    out: list[Request] = []
    user = next((header_text(v) for k, v in headers if k == USER_HEADER), "")
    if user:
        sa = split_service_account(user)
        out.append(Request("ServiceAccount", sa[1], sa[0]) if sa else Request("User", user))
    has_groups = has_extra = False
    for k, v in headers:
        if k == GROUP_HEADER:
            has_groups = True
            out.append(Request("Group", header_text(v)))
    for k, v in headers:
        if k.startswith(EXTRA_PREFIX):
            has_extra = True
            key = unescape_extra_key(header_text(k[len(EXTRA_PREFIX):]))
            out.append(Request("UserExtra", header_text(v), field_path=key))
    uid = next((header_text(v) for k, v in headers if k == UID_HEADER), "")
    if uid:
        out.append(Request("UID", uid))
    if (has_groups or has_extra or uid) and not user:
        listed = " ".join(r.go_string() for r in out)
        raise BadRequest(f"requested [{listed}] without impersonating a user")
    return out


class Impersonator:
    def __init__(self, authz: Authorizer) -> None:
        self.authz = authz

    async def impersonate(self, requestor: pb.UserInfo,
                          headers: Sequence[tuple[bytes, bytes]]) -> pb.UserInfo:
        """The user to act as; requestor itself without impersonation headers. Forbidden when not allowed."""
        requests = impersonation_requests(headers)
        if not requests:
            return requestor
        groups_specified = any(k == GROUP_HEADER for k, _ in headers)
        username, uid = "", ""
        groups: list[str] = []
        extra: dict[str, list[str]] = {}
        for r in requests:
            if r.kind == "ServiceAccount":
                username = f"{SA_PREFIX}{r.namespace}:{r.name}"
                if not groups_specified:
                    groups = [SA_GROUP, f"{SA_GROUP}:{r.namespace}"]
            elif r.kind == "User":
                username = r.name
            elif r.kind == "Group":
                groups.append(r.name)
            elif r.kind == "UserExtra":
                extra.setdefault(r.field_path, []).append(r.name)
            else:
                uid = r.name
            # Forbidden with kube's message, e.g. users "bob" is forbidden: User "alice" cannot
            # impersonate resource "users" in API group "" at the cluster scope
            attributes = r.attributes()
            allowed, reason = await self.authz.decide(requestor, attributes)
            if not allowed:
                raise forbidden_error(requestor.name, attributes, reason)
        if username != ANONYMOUS:
            if AUTHENTICATED not in groups and UNAUTHENTICATED not in groups:
                groups.append(AUTHENTICATED)
        elif UNAUTHENTICATED not in groups:
            groups.append(UNAUTHENTICATED)
        user = pb.UserInfo(name=username, uid=uid, groups=groups)
        for key, values in extra.items():
            user.extra[key].values.extend(values)
        return user


def with_impersonation(handler: Handler, impersonator: Impersonator) -> Handler:
    """From here on the request acts as the user its Impersonate-* headers name (the audit event's
    impersonatedUser); without them it goes on untouched."""
    act_as = impersonator.impersonate if not tracing.ENABLED else traced("impersonation", impersonator.impersonate)

    async def impersonate(ctx: RequestContext) -> None:
        user = await act_as(ctx.user, ctx.impersonation)
        ctx.user_name = f"{ctx.user_name} as {user.name}"
        ctx.user = user
        if ctx.audit is not None:
            ctx.audit.impersonated(user)
        ctx.mark = ctx.timing("impersonation", ctx.mark)
        await handler(ctx)

    def impersonation(ctx: RequestContext) -> Awaitable[None]:
        return impersonate(ctx) if ctx.impersonation else handler(ctx)
    return impersonation
