"""kube's WithRequestInfo: ctx.info and ctx.query, parsed once for every filter after it."""
from __future__ import annotations

from collections.abc import Awaitable

from services.common.errors import BadRequest
from services.apiserver.requestinfo import parse, parse_query

from . import Handler, RequestContext


def with_request_info(handler: Handler) -> Handler:
    def request_info(ctx: RequestContext) -> Awaitable[None]:
        ctx.query = query = parse_query(ctx.query_string)
        try:
            ctx.info = parse(ctx.method, ctx.path, query)
        except ValueError as e:
            raise BadRequest(str(e)) from None
        return handler(ctx)
    return request_info
