"""The apiary.FlowControl servicer: one bidirectional Seats stream per proxy.

Protocol (request ids are the proxy's, unique on its stream):
- SeatRequest{id, acquire}: classify, estimate its work (the seats it takes: services/apf/workestimator.py)
  and take them. Exactly one SeatResponse with
  that id answers it, at once (granted, or rejected for concurrency-limit /
  queue-full) or later when the request leaves its queue (granted, or rejected
  for time-out). A rejected id is forgotten.
- SeatRequest{id, release}: the request is over (a watch: initialized); its seats are freed (a
  write's final seats a little later), or, if it is still queued, it leaves its queue and gets no
  answer. Unknown ids are ignored.
- When the stream ends or breaks, every seat it holds is freed and everything it
  has queued is withdrawn.

A sampled request's seat decision is a span (`apf seat`: flow schema, priority level, seats, decision),
a child of the proxy's span that the SeatRequest's traceparent names; the requests share the stream, so
each span is made with its own parent and never becomes the stream's current span.

Dump answers /debug/api_priority_and_fairness/<what> for the proxy (debug.py): this replica's state.
"""
from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

import grpc

from apiary_pb import apf_pb2 as fpb
from apiary_pb import apf_pb2_grpc as fgrpc
from services.common import auditid, grpcutil, tracing
from services.common.errors import NotFound

from .controller import FlowController, Ticket
from .debug import DUMPS, dump
from .queueset import WAITING

log = logging.getLogger(__name__)


def _responses(responses: list[fpb.SeatResponse]) -> fpb.SeatResponses:
    return fpb.SeatResponses(responses=responses)


class FlowControlServicer(fgrpc.FlowControlServicer):
    def __init__(self, controller: FlowController) -> None:
        self.controller = controller
        self.streams = 0

    @grpcutil.api_stream
    async def Seats(self, request_iterator: AsyncIterator[fpb.SeatRequests],
                    context: grpc.aio.ServicerContext) -> AsyncIterator[fpb.SeatResponses]:
        out: asyncio.Queue[fpb.SeatResponse | None] = asyncio.Queue()
        tickets: dict[int, Ticket] = {}
        spans: dict[int, Any] = {}  # the seat spans of the sampled requests still waiting

        def decided(request_id: int, t: Ticket) -> None:
            if tickets.get(request_id) is not t:
                return  # released or superseded meanwhile
            if not t.granted:
                del tickets[request_id]
            if spans:
                _seat_decided(spans.pop(request_id, None), t)
            out.put_nowait(t.response(request_id))

        async def read() -> None:
            try:
                async for batch in request_iterator:
                    for msg in batch.requests:
                        kind = msg.WhichOneof("kind")
                        if kind == "acquire":
                            self._acquire(msg, tickets, out, decided, spans)
                        elif kind == "release":
                            t = tickets.pop(msg.id, None)
                            if t is not None:
                                self.controller.finish(t)
                            if spans:
                                _seat_decided(spans.pop(msg.id, None), None)
            except (asyncio.CancelledError, grpc.aio.AioRpcError):
                pass
            finally:
                out.put_nowait(None)

        self.streams += 1
        reader = asyncio.create_task(read(), name="apf-seats-reader")
        try:
            # everything decided meanwhile in one message
            async for responses in grpcutil.batches(out, _responses, one_turn=True):
                yield responses
        finally:
            self.streams -= 1
            reader.cancel()
            # withdraw the queued ones first, so freed seats never go to this dead stream
            held = sorted(tickets.values(), key=lambda t: t.granted)
            tickets.clear()
            for t in held:
                self.controller.finish(t)
            for span in spans.values():
                _seat_decided(span, None)
            spans.clear()
            if held:
                log.info("seats stream ended; released %d requests", len(held))

    @grpcutil.api_method
    async def Dump(self, request: fpb.DumpRequest, context: grpc.aio.ServicerContext) -> fpb.DumpResponse:
        if request.what not in DUMPS:
            raise NotFound("the server could not find the requested resource")
        return fpb.DumpResponse(text=dump(self.controller, request.what, request.include_request_details))

    def _acquire(self, msg: fpb.SeatRequest, tickets: dict[int, Ticket],
                 out: asyncio.Queue[fpb.SeatResponse | None], decided: Callable[[int, Ticket], None],
                 spans: dict[int, Any]) -> None:
        old = tickets.pop(msg.id, None)
        if old is not None:
            # A reused id means the proxy forgot a release; do not leak the old seat.
            log.warning("seats stream reused request id %d; releasing the previous request", msg.id)
            self.controller.finish(old)
        span = tracing.start_span("apf seat", traceparent=msg.traceparent) if msg.traceparent else None
        token = auditid.AUDIT_ID.set(msg.audit_id)  # log lines about this request carry its audit ID
        try:
            t = self.controller.start(msg.acquire, lambda t, i=msg.id: decided(i, t), msg.wait_limit)
            if log.isEnabledFor(logging.DEBUG):
                log.debug("seat request %d: %s (flow schema %s, priority level %s)", msg.id, t.state,
                          t.flow_schema.name, t.priority_level.name)
        finally:
            auditid.AUDIT_ID.reset(token)
        if t.state == WAITING:
            tickets[msg.id] = t
            if span is not None:
                spans[msg.id] = span
            return
        if span is not None:
            _seat_decided(span, t)
        if t.granted:
            tickets[msg.id] = t
        out.put_nowait(t.response(msg.id))


def _seat_decided(span: Any, t: Ticket | None) -> None:
    """End a request's seat span once its seats are decided (None: it left before, withdrawn)."""
    if span is None:
        return
    if t is None:
        span.set_attribute("decision", "withdrawn")
    else:
        span.set_attributes({"flow_schema": t.flow_schema.name, "priority_level": t.priority_level.name,
                             "seats": t.seats, "decision": "granted" if t.granted else "rejected",
                             "reason": t.reason})
    tracing.end(span)
