"""Priority and fairness: kube's WithPriorityAndFairness, a seat held while the request is served.

The seat source (the proxy's: the apf service's seat stream, with kube's max-in-flight limits as its
fallback) is passed in; it answers TooManyRequests when the request is rejected. A LIST or WATCH
carries the options its work estimate reads. A long-running request's handler gives its seats back
once it is initialized (a watch: its initial events out; release is idempotent).

Traced, the wait for the seat and the execution on it are spans of their own (`apf wait`, `apf execution`)
with the seat's priority level and flow schema (the wait an event on the root when the seat is given
without a call: an exempt request); a watch's execution span ends once it is established.
"""
from __future__ import annotations

from typing import Protocol

from apiary_pb import envelope_pb2 as pb
from services.common import tracing

from . import Handler, RequestContext
from .traces import sampled, stage, step


class Seat(Protocol):
    def headers(self) -> list[tuple[bytes, bytes]]:
        """X-Kubernetes-PF-FlowSchema-UID and X-Kubernetes-PF-PriorityLevel-UID, when known."""


class FlowControl(Protocol):
    """A seat source; one that gives system:masters its seat in process may say so before the request's digest
    is made (an optional exempt_seat(user) -> Seat | None)."""

    async def acquire(self, digest: pb.RequestAttributes) -> Seat: ...

    def release(self, seat: Seat) -> None: ...


def _seats_here(flowcontrol: FlowControl, digest: pb.RequestAttributes) -> bool:
    """Whether the seat is given without a call (an exempt request; a seat source's optional seats_here())."""
    seats_here = getattr(flowcontrol, "seats_here", None)
    return seats_here is not None and seats_here(digest)


def list_options(query: dict[str, str]) -> pb.ListOptions:
    """What the work estimate of a LIST or WATCH reads of its query (a bad limit counts as none: the
    request fails later with its 400)."""
    limit = query.get("limit", "")
    return pb.ListOptions(
        limit=int(limit) if limit.isascii() and limit.isdigit() and len(limit) < 19 else 0,
        resource_version=query.get("resourceVersion", ""),
        resource_version_match=query.get("resourceVersionMatch", ""),
        label_selector=query.get("labelSelector", ""), field_selector=query.get("fieldSelector", ""),
        send_initial_events=query.get("sendInitialEvents", "").lower() in ("true", "1"), **{"continue": query.get("continue", "")})


def _digest(ctx: RequestContext) -> pb.RequestAttributes:
    """What the seat's flow is classified by: the user and the request's attributes (a LIST's or WATCH's options)."""
    info = ctx.info
    digest = pb.RequestAttributes(
        user=ctx.user, verb=info.verb, resource_request=info.is_resource_request,
        api_group=info.api_group, api_version=info.api_version, resource=info.resource,
        subresource=info.subresource, namespace=info.namespace, name=info.name, path=info.path)
    if info.verb in ("list", "watch") and ctx.query:
        digest.list_options.CopyFrom(list_options(ctx.query))
    return digest


def with_priority_and_fairness(handler: Handler, flowcontrol: FlowControl) -> Handler:
    """ctx.seat for the request's flow, waited for unless the client goes away first."""
    exempt_seat = getattr(flowcontrol, "exempt_seat", None)

    async def priority_and_fairness(ctx: RequestContext) -> None:
        traced = tracing.ENABLED and sampled()
        # system:masters: the seat without the request's digest (an optional exempt_seat(user))
        seat = exempt_seat(ctx.user) if exempt_seat is not None and not traced else None
        if seat is None:
            digest = _digest(ctx)
            if not traced:
                seat = await ctx.race(flowcontrol.acquire(digest))
            else:
                with (step if _seats_here(flowcontrol, digest) else stage)("apf wait") as span:
                    seat = await ctx.race(flowcontrol.acquire(digest))
                    if span is not None:
                        span.set_attributes(_seat_attributes(seat))
        ctx.seat = seat
        ctx.extra_headers.extend(seat.headers())
        ctx.mark = ctx.timing("apf", ctx.mark)
        try:
            if not traced:
                await handler(ctx)
            else:
                # an event (the handler's call to the registry is the root's child), its duration only: where
                # the seat was is apf wait's
                with step("apf execution"):
                    await handler(ctx)
        finally:
            flowcontrol.release(seat)
    return priority_and_fairness


def _seat_attributes(seat: Seat) -> dict[str, str]:
    """The span attributes of a seat: where the apf service (or the exempt shortcut) put the request."""
    return {"priority_level": getattr(seat, "priority_level", ""), "flow_schema": getattr(seat, "flow_schema", "")}
