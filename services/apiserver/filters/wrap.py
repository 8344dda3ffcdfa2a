"""kube's WithPanicRecovery: every failure of the filters and handlers after it answered once.

An APIError is answered as its Status (in the negotiated form, once there is one); anything else is
a 500 and a panic (the audit event's Panic stage); a client gone away gets nothing more (499 in the
request log). ctx.failure and ctx.panic are left for the filters before this one (audit, metrics).
"""
from __future__ import annotations

import logging

from services.common.errors import APIError, InternalError

from . import ClientDisconnected, Handler, RequestContext

log = logging.getLogger(__name__)


def with_panic_recovery(handler: Handler) -> Handler:
    async def recovery(ctx: RequestContext) -> None:
        try:
            await handler(ctx)
        except ClientDisconnected:
            ctx.code = 499
        except APIError as e:
            ctx.failure = e
            await ctx.error(e)
        except Exception as e:  # noqa: BLE001 - never crash: answer 500
            log.exception("%s %s failed", ctx.method, ctx.path)
            ctx.failure = failure = InternalError(f"an error on the server ({type(e).__name__}) has "
                                                  "prevented the request from succeeding")
            ctx.panic = True
            await ctx.error(failure)
    return recovery
