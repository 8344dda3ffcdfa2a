"""kube's WithRequestInfo: ctx.info and ctx.query, parsed once for every filter after it."""
from __future__ import annotations

from collections.abc import Awaitable

from services.apiserver.requestinfo import needs_raw_split, parse, parse_query, split_raw
from services.common.errors import BadRequest

from . import Handler, RequestContext


def with_request_info(handler: Handler) -> Handler:
    def request_info(ctx: RequestContext) -> Awaitable[None]:
        ctx.query = query = parse_query(ctx.query_string)
        raw = ctx.scope.get("raw_path") or b""
        segments = split_raw(raw) if needs_raw_split(raw) else None
        try:
            ctx.info = parse(ctx.method, ctx.path, query, segments)
        except ValueError as e:
            raise BadRequest(str(e)) from None
        return handler(ctx)
    return request_info
