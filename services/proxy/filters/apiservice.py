"""Who serves the request: apiary's registry, or a remote APIService's server (kube-aggregator's
proxy handler). Known before the body is read, because a remote APIService's body is not read here
but streamed to its server.

Until the APIService informer has listed once, a path under /apis may belong to a remote server the
proxy does not know of yet: sent to the registry, it would be answered 404, which garbage collection and
namespace deletion act on. Kube answers such requests 503 until every known path is installed
(k8s.io/apiserver's notfoundhandler); the proxy holds them for that first list instead, up to
ROUTING_WAIT, and answers kube's 503 after it. /api (the core group) is never remote and never waits."""
from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TYPE_CHECKING

from services.apiserver.filters import Handler
from services.common.errors import ServiceUnavailable

from ..aggregator.apiserver import Aggregator

if TYPE_CHECKING:
    from ..context import Context

# kube's Retry-After on its 503 before the paths are installed; the proxy's first APIService list comes
# within a fraction of that after the registry answers
ROUTING_WAIT = 5.0


def with_remote_apiservice(handler: Handler, aggregator: Aggregator) -> Handler:
    """ctx.remote: the APIService whose server answers the request, None for the registry."""
    synced = aggregator.apiservices.synced

    async def once_known(ctx: Context) -> None:
        try:
            await asyncio.wait_for(synced.wait(), ROUTING_WAIT)
        except TimeoutError:
            raise ServiceUnavailable(
                "the request has been made before all known HTTP paths have been installed, please try again",
                headers={"Retry-After": str(int(ROUTING_WAIT))},
                details={"retryAfterSeconds": int(ROUTING_WAIT)}) from None
        ctx.remote = aggregator.remote_apiservice(ctx.info)
        await handler(ctx)

    def apiservice(ctx: Context) -> Awaitable[None]:
        if not synced.is_set() and ctx.info.api_prefix == "apis":
            return once_known(ctx)
        ctx.remote = aggregator.remote_apiservice(ctx.info)
        return handler(ctx)
    return apiservice
