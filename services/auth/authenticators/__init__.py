"""Authenticators turn the credentials the proxy saw into a user, as kube's request authenticators do.

Each authenticator answers one of three ways: a user (authenticated), None (these
credentials are not mine: ask the next one), or AuthenticationFailed (the
credentials are mine and they are wrong: the request gets a 401).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from apiary_pb import auth_pb2 as apb
from apiary_pb import envelope_pb2 as pb
from services.common import tracing
from services.common.identity import AUTHENTICATED, UNAUTHENTICATED


class AuthenticationFailed(Exception):
    """Credentials were presented and rejected; the message becomes the response's reason."""


class Authenticator(Protocol):
    name: str

    async def authenticate(self, req: apb.AuthenticateRequest) -> pb.UserInfo | None: ...


@dataclass
class Result:
    user: pb.UserInfo | None
    errors: list[str] = field(default_factory=list)

    @property
    def authenticated(self) -> bool:
        return self.user is not None


class Union:
    """Try each authenticator in order (kube's union.New) and add system:authenticated to the winner.

    If none claims the request, `fallback` (the anonymous authenticator, when enabled)
    gets it, but only when nobody rejected the credentials: like kube's
    union.NewFailOnError, a wrong token is a 401, never an anonymous request.
    """

    def __init__(self, authenticators: list[Authenticator], fallback: Authenticator | None = None) -> None:
        self.authenticators = authenticators
        self.fallback = fallback

    async def authenticate(self, req: apb.AuthenticateRequest) -> Result:
        errors: list[str] = []
        traced = tracing.ENABLED and tracing.recording()
        for a in self.authenticators:
            try:
                user = await (tried(a, req) if traced else a.authenticate(req))
            except AuthenticationFailed as e:
                errors.append(str(e))
                continue
            if user is not None:
                return Result(add_authenticated_group(user))
        if req.token and not errors:
            # kube's bearer-token authenticator: a token nobody accepts is an error, never anonymous
            errors.append("invalid bearer token")
        if errors or self.fallback is None:
            return Result(None, errors)
        return Result(await (tried(self.fallback, req) if traced else self.fallback.authenticate(req)))


async def tried(a: Authenticator, req: apb.AuthenticateRequest) -> pb.UserInfo | None:
    """One authenticator of a sampled request's chain in its span ("authenticator token-file"): whether
    it took the credentials (the user), left them to the next one, or rejected them (why)."""
    with tracing.span(f"authenticator {a.name}") as span:
        try:
            user = await a.authenticate(req)
        except AuthenticationFailed as e:
            span.set_attributes({"result": "failed", "reason": str(e)})
            raise
        span.set_attributes({"result": "authenticated", "user": user.name} if user is not None
                            else {"result": "not mine"})
        return user


def add_authenticated_group(user: pb.UserInfo) -> pb.UserInfo:
    """kube's AuthenticatedGroupAdder: every authenticated user is in system:authenticated."""
    if AUTHENTICATED not in user.groups and UNAUTHENTICATED not in user.groups:
        user.groups.append(AUTHENTICATED)
    return user
