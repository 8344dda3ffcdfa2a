"""The request log and metrics (kube's WithHTTPLogging and its endpoints/metrics instrumentation):
apiserver_current_inflight_requests while the request runs, apiserver_request_total and
apiserver_request_duration_seconds once it has been answered (with the trace ID as the exemplar of a
sampled request), and the log line at -v 2.

The request also counts as a small call in flight in this process while it runs (services.common.
pacing): large answers give way to it; a watch, and a LIST once its parts come, no longer count.
"""
from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

from services.apiserver.filters import Handler
from services.apiserver.filters.traces import trace_id
from services.common import pacing, tracing

from .. import metrics

if TYPE_CHECKING:
    from ..context import Context

log = logging.getLogger("services.proxy")

_READ_METHODS = frozenset(("GET", "HEAD", "OPTIONS"))


def with_http_logging(handler: Handler, verbosity: int) -> Handler:
    async def http_logging(ctx: Context) -> None:
        method = ctx.method
        inflight = metrics.READ_ONLY if method in _READ_METHODS else metrics.MUTATING
        inflight.inc()
        small = pacing.begin()
        try:
            await handler(ctx)
        finally:
            small.end()
            inflight.dec()
            elapsed = time.perf_counter() - ctx.started
            metrics.observe(ctx.info, method, ctx.code or 500, elapsed, ctx.apply,
                            trace_id() if tracing.ENABLED else "")
            if verbosity >= 2:
                qs = ctx.query_string.decode("latin-1")
                log.info('%s %s%s code=%d user="%s" %.1fms', method, ctx.path,  # + audit-id (LogFilter)
                         f"?{qs}" if qs else "", ctx.code, ctx.user_name, elapsed * 1000)
    return http_logging
