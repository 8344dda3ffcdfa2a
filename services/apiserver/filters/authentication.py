"""Authentication: kube's WithAuthentication, the user of the request from its credentials.

The authenticator (the proxy's: request-header identity, then the auth service; the kit's: delegated
TokenReview) is passed in. A request no authenticator accepts is 401; kube audits it too (its
failed handler, WithFailedAuthenticationAudit), which is `failed` here.
"""
from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from apiary_pb import envelope_pb2 as pb
from services.common.errors import APIError

from . import Handler, RequestContext


class Authenticator(Protocol):
    async def authenticate(self, token: str, cert: dict[str, Any] | None,
                           headers: Sequence[tuple[bytes, bytes]] = (), path: str = "") -> pb.UserInfo:
        """The caller's UserInfo; Unauthorized when no credential is accepted."""


def bearer_token(headers: dict[bytes, bytes]) -> str:
    value = headers.get(b"authorization")
    if not value:
        return ""
    scheme, _, token = value.decode("latin-1").strip().partition(" ")
    if scheme.lower() != "bearer":
        return ""
    return token.strip()


def with_authentication(handler: Handler, authenticator: Authenticator,
                        failed: Callable[[RequestContext], None] | None = None) -> Handler:
    """ctx.user from the request's bearer token, client certificate or request headers."""
    async def authentication(ctx: RequestContext) -> None:
        t = time.perf_counter()
        try:
            user = await authenticator.authenticate(bearer_token(ctx.headers), ctx.client_cert,
                                                    ctx.raw_headers, ctx.path)
        except APIError as e:
            if e.code == 401 and failed is not None:
                failed(ctx)
            raise
        ctx.user = user
        ctx.user_name = user.name
        ctx.mark = ctx.timing("authn", t)
        await handler(ctx)
    return authentication
