"""kube's WithRequestInfo: ctx.info and ctx.query, parsed once for every filter after it."""
from __future__ import annotations

import json
from collections.abc import Awaitable

from services.apiserver.requestinfo import needs_raw_split, parse, parse_query, split_raw
from services.apiserver.validation import is_valid_path_segment_name
from services.common.errors import BadRequest

from . import Handler, RequestContext


def with_request_info(handler: Handler) -> Handler:
    def request_info(ctx: RequestContext) -> Awaitable[None]:
        ctx.query = query = parse_query(ctx.query_string)
        raw = ctx.scope.get("raw_path") or b""
        segments = split_raw(raw) if needs_raw_split(raw) else None
        try:
            ctx.info = info = parse(ctx.method, ctx.path, query, segments)
        except ValueError as e:
            raise BadRequest(str(e)) from None
        if segments is not None and info.path_name and (msgs := is_valid_path_segment_name(info.path_name)):
            # as storage's NamespaceKeyFunc refuses it, before any backend is asked
            raise BadRequest(f"Name parameter invalid: {json.dumps(info.path_name)}: {';'.join(msgs)}")
        return handler(ctx)
    return request_info
