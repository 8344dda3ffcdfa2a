"""The request body, read whole within kube's MaxRequestBodyBytes before the request goes on.

The declared size is checked first, then what actually arrives (413 beyond). A remote APIService's
body streams to its server instead, which sets its own limits. Once the body is read, the client
going away is noticed (Context.watch_disconnect), so that waits further on can end early.
"""
from __future__ import annotations

from collections.abc import Awaitable
from typing import TYPE_CHECKING

from services.apiserver.filters import Handler

if TYPE_CHECKING:
    from ..context import Context

BODY_METHODS = frozenset(("POST", "PUT", "PATCH", "DELETE"))


def with_request_body(handler: Handler) -> Handler:
    async def read(ctx: Context) -> None:
        ctx.body = await ctx.read_body()
        ctx.watch_disconnect()
        await handler(ctx)

    def body(ctx: Context) -> Awaitable[None]:
        if ctx.remote is not None:
            return handler(ctx)
        if ctx.method in BODY_METHODS:
            return read(ctx)
        ctx.watch_disconnect()
        return handler(ctx)
    return body
