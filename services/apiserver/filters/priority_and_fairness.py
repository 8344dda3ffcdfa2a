"""Priority and fairness: kube's WithPriorityAndFairness, a seat held while the request is served.

The seat source (the proxy's: the apf service's seat stream, with kube's max-in-flight limits as its
fallback) is passed in; it answers TooManyRequests when the request is rejected. A long-running
request's handler may give its seat back as it starts (release is idempotent).
"""
from __future__ import annotations

from typing import Protocol

from apiary_pb import envelope_pb2 as pb

from . import Handler, RequestContext


class Seat(Protocol):
    def headers(self) -> list[tuple[bytes, bytes]]:
        """X-Kubernetes-PF-FlowSchema-UID and X-Kubernetes-PF-PriorityLevel-UID, when known."""


class FlowControl(Protocol):
    async def acquire(self, digest: pb.RequestAttributes) -> Seat: ...

    def release(self, seat: Seat) -> None: ...


def with_priority_and_fairness(handler: Handler, flowcontrol: FlowControl) -> Handler:
    """ctx.seat for the request's flow, waited for unless the client goes away first."""
    async def priority_and_fairness(ctx: RequestContext) -> None:
        info = ctx.info
        seat = await ctx.race(flowcontrol.acquire(pb.RequestAttributes(
            user=ctx.user, verb=info.verb, resource_request=info.is_resource_request,
            api_group=info.api_group, api_version=info.api_version, resource=info.resource,
            subresource=info.subresource, namespace=info.namespace, name=info.name, path=info.path)))
        ctx.seat = seat
        ctx.extra_headers.extend(seat.headers())
        ctx.mark = ctx.timing("apf", ctx.mark)
        try:
            await handler(ctx)
        finally:
            flowcontrol.release(seat)
    return priority_and_fairness
