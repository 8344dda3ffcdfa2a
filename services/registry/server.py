"""The apiary.Registry servicer: Handle, Watch, Discovery."""
from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from typing import Any

import grpc
from prometheus_client import Counter, Histogram

from apiary_pb import envelope_pb2 as pb
from apiary_pb import registry_pb2 as rpb
from apiary_pb import registry_pb2_grpc as rgrpc
from services.apis import schemas
from services.apiserver import discovery, openapi
from services.apiserver.catalogue import Catalogue
from services.apiserver.endpoints.handlers import Handlers, span_attributes
from services.common import auditid, errors, grpcutil, mux, tracing, watchmux

from . import watch
from .storage_client import StorageClient

REQUEST_DURATION = Histogram(
    "apiserver_registry_request_duration_seconds", "Time the registry spends on a request, by verb and resource.",
    ["verb", "group", "resource", "code"],
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5),
)
# (verb, group, resource, code) -> the histogram's child: labels() validates its arguments on every call
_durations: dict[tuple[str, str, str, int], Any] = {}
WATCH_EVENTS = Counter("apiserver_watch_events_total", "Watch events sent by the registry.",
                       ["group", "version", "kind"])


def discovery_response(catalogue: Catalogue) -> rpb.DiscoveryResponse:
    docs = discovery.documents(catalogue)
    return rpb.DiscoveryResponse(
        aggregated_core=docs["aggregated_core"], aggregated_groups=docs["aggregated_groups"],
        api_versions=docs["api_versions"], api_group_list=docs["api_group_list"],
        resource_lists=docs["resource_lists"], openapi=openapi.documents(catalogue, schemas),
    )


async def _parts(first: rpb.APIResponse, more: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    """An answer in parts (APIRequest.chunked): the first APIResponse, then the body's next parts
    themselves (a list's items as storage sent them: passed on, not parsed or copied here)."""
    yield first.SerializeToString()
    async with contextlib.aclosing(more):  # given up on (mux cancel): the storage call goes at once
        async for part in more:
            yield part


class RegistryServicer(rgrpc.RegistryServicer):
    def __init__(self, handlers: Handlers[StorageClient]) -> None:
        self.handlers = handlers
        self._discovery = discovery_response(handlers.catalogue)
        handlers.catalogue.subscribe(self._catalogue_changed)
        self._mux_methods = {"Handle": (rpb.APIRequest, self._handle)}

    def _catalogue_changed(self, catalogue: Catalogue) -> None:
        """Discovery and OpenAPI are encoded once per version of the catalogue."""
        self._discovery = discovery_response(catalogue)

    @grpcutil.api_method
    async def Handle(self, request: rpb.APIRequest, context: grpc.aio.ServicerContext) -> rpb.APIResponse:
        request.chunked = False  # an answer in parts exists only on the Calls stream
        return await self._handle(request, context)  # type: ignore[return-value]

    async def _handle(self, request: rpb.APIRequest, context: grpc.aio.ServicerContext
                      ) -> rpb.APIResponse | mux.Streamed:
        t0 = time.perf_counter()
        code = 500
        try:
            resp, timing = await self.handlers.handle(request)
            code = resp.code
            out = rpb.APIResponse(code=resp.code, body=resp.body, warnings=resp.warnings, timing=timing,
                                  audit_annotations=resp.audit_annotations)
            if resp.more is None:
                return out
            return mux.Streamed(_parts(out, resp.more))
        except errors.APIError as e:
            code = e.code
            raise
        finally:
            key = (request.verb, request.group, request.resource, code)
            child = _durations.get(key)
            if child is None:
                child = _durations[key] = REQUEST_DURATION.labels(request.verb, request.group, request.resource,
                                                                  str(code))
            child.observe(time.perf_counter() - t0)

    @grpcutil.api_stream
    async def Watch(self, request: rpb.APIRequest, context: grpc.aio.ServicerContext
                    ) -> AsyncIterator[rpb.WatchFrame]:
        counter = WATCH_EVENTS.labels(request.group, request.version, request.resource)
        async for data in watch.frames(self.handlers, request):
            counter.inc()
            yield rpb.WatchFrame(data=data)

    async def Watches(self, request_iterator: AsyncIterator[pb.WatchControl], context: grpc.aio.ServicerContext
                      ) -> AsyncIterator[pb.WatchBatch]:
        """Watch, multiplexed on the proxy's long-lived stream: a frame shared by several watches
        (watch.SHARED) crosses once with all their ids."""
        async for batch in watchmux.serve(request_iterator, self._mux_watch):
            yield batch

    async def _mux_watch(self, wid: int, raw: bytes, sink: watchmux.Sink) -> None:
        request = rpb.APIRequest.FromString(raw)
        if request.audit_id:  # this watch's task
            auditid.AUDIT_ID.set(request.audit_id)
        tracing.attach(request.traceparent)
        counter = WATCH_EVENTS.labels(request.group, request.version, request.resource)
        # a long-running request's span covers its setup only (kube's), not the hours it may stay open
        with tracing.span("Watch", span_attributes(request) if tracing.recording() else None):
            plan = watch.Plan(self.handlers, request)
        if request.table or plan.info.converts_remotely:
            # Table rows are built per watch (column definitions go with its first event); objects converted by
            # a webhook wait for it in this watch's task.
            async with contextlib.aclosing(watch.frames(self.handlers, request, plan)) as frames:
                async for data in frames:
                    counter.inc()
                    while not sink.send(wid, data):
                        await sink.taken()  # a task can wait for room (storage cuts it off if it lags)
            return
        # Relayed: each storage event becomes a frame once (watch.SHARED) and goes to the sink as
        # the storage stream's batch is read, with no task switch for this watch.
        done = asyncio.Event()

        def on_event(event: bytes, initial: bool) -> bool:
            frame, last = plan.frame(event)
            if frame is not None:
                counter.inc()
                if not sink.send(wid, frame, force=initial):
                    done.set()  # the proxy cannot keep up: ended, the client watches again from its rv
                    return False
            if last:
                done.set()
                return False
            return True

        def on_end(error: errors.APIError | None) -> None:
            if error is not None:  # after the start, a failure is an ERROR event, as kube sends it
                sink.send(wid, watch.error_frame(error), force=True)
            done.set()

        relay = self.handlers.store.watches.relay(plan.storage_request, on_event, on_end)
        try:
            await done.wait()
        finally:
            relay.cancel()

    async def Calls(self, request_iterator: AsyncIterator[pb.Frames], context: grpc.aio.ServicerContext
                    ) -> AsyncIterator[bytes]:
        """Handle, multiplexed on the caller's long-lived stream (the proxy's hot path)."""
        async for frame in mux.serve_mux(request_iterator, context, self._mux_methods):
            yield frame

    @grpcutil.api_method
    async def Discovery(self, request: rpb.DiscoveryRequest, context: grpc.aio.ServicerContext
                        ) -> rpb.DiscoveryResponse:
        return self._discovery
