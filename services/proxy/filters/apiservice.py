"""Who serves the request: apiary's registry, or a remote APIService's server (kube-aggregator's
proxy handler). Known before the body is read, because a remote APIService's body is not read here
but streamed to its server."""
from __future__ import annotations

from collections.abc import Awaitable
from typing import TYPE_CHECKING

from services.apiserver.filters import Handler

from ..aggregator.apiserver import Aggregator

if TYPE_CHECKING:
    from ..context import Context


def with_remote_apiservice(handler: Handler, aggregator: Aggregator) -> Handler:
    """ctx.remote: the APIService whose server answers the request, None for the registry."""
    def apiservice(ctx: Context) -> Awaitable[None]:
        ctx.remote = aggregator.remote_apiservice(ctx.info)
        return handler(ctx)
    return apiservice
