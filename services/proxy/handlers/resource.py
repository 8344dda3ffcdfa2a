"""One-shot resource requests (get, list, create, update, patch, delete, deletecollection).

Each becomes one Registry.Handle call; the registry's JSON answer is sent on untouched (or as YAML).
"""
from __future__ import annotations

import time

from apiary_pb import envelope_pb2 as pb
from apiary_pb import registry_pb2 as rpb
from apiary_pb import registry_pb2_grpc as rgrpc
from services.common import mux

from ..context import Context
from ..negotiation import Output, json_to_yaml
from ..requestinfo import RequestInfo

# kube-apiserver's --request-timeout
REQUEST_TIMEOUT = 60.0


def api_request(info: RequestInfo, ctx: Context, query: dict[str, str], user: pb.UserInfo, *,
                body: bytes = b"", content_type: str = "", table: bool = False) -> rpb.APIRequest:
    # A namespace's own name is parsed into RequestInfo.namespace (for authorization); to the
    # registry, namespaces are cluster-scoped objects.
    namespace = "" if info.parts and info.parts[0] == "namespaces" else info.namespace
    return rpb.APIRequest(
        verb=info.verb, group=info.api_group, version=info.api_version, resource=info.resource,
        subresource=info.subresource, namespace=namespace, name=info.path_name, query=query, body=body,
        content_type=content_type, table=table, user=user, audit_id=ctx.audit_id,
    )


def warning_headers(warnings: list[str] | object) -> list[tuple[bytes, bytes]]:
    """RFC 7234 Warning headers as kube writes them: 299 - "<text>"."""
    out = []
    for w in warnings:  # type: ignore[attr-defined]
        text = w.replace("\\", "\\\\").replace('"', '\\"')
        out.append((b"warning", f'299 - "{text}"'.encode()))
    return out


class ResourceHandler:
    def __init__(self, registry: rgrpc.RegistryStub, timeout: float = REQUEST_TIMEOUT) -> None:
        self.registry = registry
        self.timeout = timeout
        # Every request shares one long-lived stream to the registry (services/common/mux.py).
        self.calls = mux.MuxClient(registry.Calls, "registry", {"Handle": rpb.APIResponse})

    async def handle(self, ctx: Context, req: rpb.APIRequest, output: Output) -> None:
        t = time.perf_counter()
        resp = await ctx.race(self.calls.call("Handle", req, timeout=self.timeout))
        ctx.timing("registry", t)
        for stage, ms in resp.timing.items():
            ctx.timings.append((stage, ms))
        headers = warning_headers(resp.warnings) if resp.warnings else []
        headers.append((b"cache-control", b"no-cache, private"))
        body = resp.body
        if output.format == "yaml" and body:
            body = json_to_yaml(body)
        await ctx.respond(resp.code or 200, body, output.content_type, headers)
