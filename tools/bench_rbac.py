"""RBAC decision rates with 1,000 Roles and 1,000 RoleBindings loaded (plus the bootstrap policy).

  rbac_inprocess  RBACIndex.authorize on one core, no I/O          (goal: >= 50,000 decisions/s)
  auth_grpc       apiary.Auth/Authorize over gRPC (plaintext, loopback, 64 in flight) against the
                  servicer started in this process with the same index; client and server share the core

    python -m tools.bench_rbac        prints the JSON that run() returns
"""
from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import grpc

from apiary_pb import auth_pb2 as apb
from apiary_pb import auth_pb2_grpc as agrpc
from apiary_pb import envelope_pb2 as pb
from services.auth.__main__ import build, parse_args
from services.auth.authorizers.rbac import Attributes, RBACIndex
from services.auth.policy import load_bootstrap_policy
from services.common.identity import AUTHENTICATED, user_pb

ROLES = 1000
NAMESPACES = 100
GRPC_CONCURRENCY = 64


def load(index: RBACIndex) -> RBACIndex:
    """1,000 Roles (three rules each) in 100 namespaces, each bound to its own user and a shared group."""
    load_bootstrap_policy(index)
    for i in range(ROLES):
        ns = f"ns-{i % NAMESPACES}"
        index.apply("Role", {"metadata": {"name": f"role-{i}", "namespace": ns}, "rules": [
            {"verbs": ["get", "list", "watch"], "apiGroups": [""], "resources": ["configmaps", "secrets"]},
            {"verbs": ["*"], "apiGroups": ["apps"], "resources": ["deployments", "deployments/scale"]},
            {"verbs": ["get"], "apiGroups": [""], "resources": ["pods"], "resourceNames": [f"pod-{i}"]},
        ]})
        index.apply("RoleBinding", {
            "metadata": {"name": f"binding-{i}", "namespace": ns},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": f"role-{i}"},
            "subjects": [{"kind": "User", "name": f"user-{i}"}, {"kind": "Group", "name": f"team-{i % 10}"}],
        })
    return index


def workload(n: int = 1000) -> list[Attributes]:
    """A mix of allowed (about two thirds) and denied requests from users with two groups each."""
    out = []
    for i in range(n):
        ns = f"ns-{i % NAMESPACES}"
        groups = (f"team-{i % 10}", AUTHENTICATED)
        kind = i % 3
        if kind == 0:
            out.append(Attributes(f"user-{i}", groups, "get", True, ns, "", "configmaps", name="c"))
        elif kind == 1:
            out.append(Attributes(f"user-{i}", groups, "update", True, ns, "apps", "deployments", "scale", "d"))
        else:
            out.append(Attributes(f"user-{i}", groups, "delete", True, ns, "", "secrets", name="s"))
    return out


def bench_inprocess(index: RBACIndex, seconds: float = 1.0) -> dict[str, Any]:
    attrs = workload()
    authorize = index.authorize
    count, allowed = 0, 0
    start = time.perf_counter()
    deadline = start + seconds
    while time.perf_counter() < deadline:
        for a in attrs:
            allowed += authorize(a)[0]
        count += len(attrs)
    elapsed = time.perf_counter() - start
    return {"rate": round(count / elapsed), "decisions": count, "allowed_share": round(allowed / count, 3)}


def _pb(a: Attributes) -> apb.AuthorizeRequest:
    return apb.AuthorizeRequest(attributes=pb.RequestAttributes(
        user=user_pb(a.user, list(a.groups)), verb=a.verb, resource_request=a.resource_request,
        namespace=a.namespace, api_group=a.api_group, api_version="v1", resource=a.resource,
        subresource=a.subresource, name=a.name, path=a.path))


async def bench_grpc(seconds: float = 2.0) -> dict[str, Any]:
    servicer = build(parse_args(["--insecure-internal", "--authorization-mode", "RBAC"]))
    load(servicer.index)
    server = grpc.aio.server()
    agrpc.add_AuthServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    requests = [_pb(a) for a in workload()]
    count = 0
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = agrpc.AuthStub(channel)
            await stub.Authorize(requests[0])
            deadline = time.perf_counter() + seconds

            async def worker(offset: int) -> None:
                nonlocal count
                i = offset
                while time.perf_counter() < deadline:
                    await stub.Authorize(requests[i % len(requests)])
                    count += 1
                    i += GRPC_CONCURRENCY

            start = time.perf_counter()
            await asyncio.gather(*(worker(k) for k in range(GRPC_CONCURRENCY)))
            elapsed = time.perf_counter() - start
    finally:
        await server.stop(None)
    return {"rate": round(count / elapsed), "calls": count, "concurrency": GRPC_CONCURRENCY}


def run() -> dict[str, Any]:
    index = load(RBACIndex())
    inprocess = bench_inprocess(index)
    inprocess.update(roles=ROLES, bindings=len(index.bindings))
    return {"rbac_inprocess": inprocess, "auth_grpc": asyncio.run(bench_grpc())}


if __name__ == "__main__":
    print(json.dumps(run(), indent=2))
