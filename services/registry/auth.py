"""The registry's side of the auth service: RBAC escalation checks, the reviews, TokenRequest."""
from __future__ import annotations

import time
from typing import Any

import orjson
from prometheus_client import Histogram

from apiary_pb import auth_pb2 as aupb
from apiary_pb import auth_pb2_grpc as augrpc
from apiary_pb import envelope_pb2 as pb
from services.apiserver.resource import ResourceInfo
from services.common import grpcutil

AUTH_DURATION = Histogram(
    "apiary_registry_auth_call_duration_seconds", "Time the registry waits on the auth service.",
    ["method"], buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5),
)

Obj = dict[str, Any]


class AuthClient:
    def __init__(self, stub: augrpc.AuthStub, timeout: float = 30.0) -> None:
        self.stub = stub
        self.timeout = timeout

    async def _call(self, method: str, req: Any, timing: dict[str, float]) -> Any:
        t0 = time.perf_counter()
        try:
            call = getattr(self.stub, method)(req, timeout=self.timeout, metadata=grpcutil.request_metadata())
            return await grpcutil.call(call, "auth")
        finally:
            dt = time.perf_counter() - t0
            AUTH_DURATION.labels(method).observe(dt)
            timing["auth"] = timing.get("auth", 0.0) + dt * 1000

    async def check_escalation(self, user: pb.UserInfo, namespace: str, kind: str, obj: bytes,
                               timing: dict[str, float]) -> bool:
        """True when allowed (obj: the object's JSON); a refusal normally arrives as the auth service's
        Forbidden APIError."""
        resp = await self._call("CheckEscalation", aupb.EscalationRequest(
            user=user, namespace=namespace, kind=kind, object=obj), timing)
        return bool(resp.allowed)

    async def review(self, info: ResourceInfo, namespace: str, obj: Obj, user: pb.UserInfo,
                     timing: dict[str, float]) -> bytes:
        resp = await self._call("Review", aupb.ReviewRequest(
            group=info.group, version=info.version, resource=info.plural, namespace=namespace,
            body=orjson.dumps(obj), user=user), timing)
        return bytes(resp.body)

    async def request_token(self, namespace: str, name: str, obj: Obj, service_account: pb.Object,
                            user: pb.UserInfo, timing: dict[str, float]) -> bytes:
        resp = await self._call("RequestToken", aupb.TokenRequestRequest(
            namespace=namespace, name=name, body=orjson.dumps(obj), service_account=service_account,
            user=user), timing)
        return bytes(resp.body)
