"""One-shot resource requests (get, list, create, update, patch, delete, deletecollection).

Each becomes one Registry.Handle call; the registry's JSON answer is sent on untouched, or in the
negotiated form (encoding.py: YAML, PartialObjectMetadata, protobuf); a list comes in parts, each
made into that form as it arrives (listparts.py).
"""
from __future__ import annotations

import time

from apiary_pb import envelope_pb2 as pb
from apiary_pb import registry_pb2 as rpb
from apiary_pb import registry_pb2_grpc as rgrpc
from services.apiserver.filters import ClientDisconnected
from services.apiserver.filters.timeout import REQUEST_TIMEOUT
from services.apiserver.negotiation import Output
from services.apiserver.requestinfo import RequestInfo
from services.common import mux, pacing, tracing
from services.common.runtime import after_large_answer

from .. import listparts
from ..context import Context, warning_headers
from ..encoding import encode_answer


def api_request(info: RequestInfo, ctx: Context, query: dict[str, str], user: pb.UserInfo, *,
                body: bytes = b"", content_type: str = "", table: bool = False) -> rpb.APIRequest:
    # A namespace's own name is parsed into RequestInfo.namespace (for authorization); to the
    # registry, namespaces are cluster-scoped objects.
    namespace = "" if info.parts and info.parts[0] == "namespaces" else info.namespace
    agent = ""
    if info.verb in WRITES:
        agent = ctx.header(b"user-agent")
    return rpb.APIRequest(
        verb=info.verb, group=info.api_group, version=info.api_version, resource=info.resource,
        subresource=info.subresource, namespace=namespace, name=info.path_name, query=query, body=body,
        content_type=content_type, table=table, user=user, audit_id=ctx.audit_id, user_agent=agent,
        traceparent=tracing.traceparent(),
    )


WRITES = frozenset({"create", "update", "patch"})


class ResourceHandler:
    def __init__(self, registry: rgrpc.RegistryStub, timeout: float = REQUEST_TIMEOUT, replicas: int = 1) -> None:
        self.registry = registry
        self.timeout = timeout
        # Every request shares one long-lived stream to the registry (services/common/mux/).
        self.calls = mux.MuxClient(registry.Calls, "registry", {"Handle": rpb.APIResponse}, replicas)

    async def handle(self, ctx: Context, req: rpb.APIRequest, output: Output) -> None:
        t = time.perf_counter()
        # (a person's indented JSON is made from the whole answer)
        if req.verb == "list" and listparts.streams(output) and not ctx.pretty:
            await self._handle_parts(ctx, req, output, t)
            return
        resp = await ctx.race(self.calls.call("Handle", req, timeout=self.timeout))
        ctx.timing("registry", t)
        headers = self._headers(ctx, resp)
        body, content_type = encode_answer(resp.body, output)
        await ctx.respond(resp.code or 200, body, content_type, headers)

    @staticmethod
    def _headers(ctx: Context, resp: rpb.APIResponse) -> list[tuple[bytes, bytes]]:
        for stage, ms in resp.timing.items():
            ctx.timings.append((stage, ms))
        if resp.audit_annotations and ctx.audit is not None:
            ctx.audit.annotations.update(resp.audit_annotations)
        headers = warning_headers(resp.warnings) if resp.warnings else []
        headers.append((b"cache-control", b"no-cache, private"))
        return headers

    async def _handle_parts(self, ctx: Context, req: rpb.APIRequest, output: Output, t: float) -> None:
        """A list (JSON, a Table, metadata only, protobuf), sent on as its parts arrive from the
        registry (APIRequest.chunked), each made into the negotiated form as it comes
        (listparts.py): the client receives the first items while the registry and storage still
        work on the rest, and no part holds this loop longer than its own conversion.
        A failure after the first part cuts the response off (the client sees it incomplete)."""
        req.chunked = True
        parts = self.calls.call_stream("Handle", req, timeout=self.timeout)
        sent = 0
        try:
            payload, more = await ctx.race(anext(parts))
            ctx.timing("registry", t)
            resp = rpb.APIResponse.FromString(payload)
            headers = self._headers(ctx, resp)
            if not more:
                body, content_type = encode_answer(resp.body, output)
                await ctx.respond(resp.code or 200, body, content_type, headers)
                return
            form = listparts.ListParts(output) if output.transforms else None
            first = resp.body if form is None else form.first(resp.body)
            pacing.large()  # its parts give way to small requests in flight
            await ctx.start_stream(resp.code or 200, output.content_type, headers)
            if first:
                await ctx.write(first)
            sent = len(first)
            gone = ctx.disconnected
            async for body, _ in parts:  # the body's next part itself
                if form is not None:
                    body = form.part(body)
                if body:
                    sent += len(body)
                    await ctx.write(body)
                await pacing.next_part()  # before the next part is taken (and credited)
                if gone is not None and gone.done():  # the rest is not read: cancel the call
                    raise ClientDisconnected()
            for body in form.end() if form is not None else ():
                sent += len(body)
                await ctx.write(body)
                await pacing.next_part()
            await ctx.end_stream()
        finally:
            await parts.aclose()
            after_large_answer(sent)
