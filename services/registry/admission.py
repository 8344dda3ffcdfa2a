"""The registry's side of admission: the mutating (Admit) and validating (Validate) phases."""
from __future__ import annotations

import time
import uuid
from typing import Any

import orjson
from prometheus_client import Histogram

from apiary_pb import admission_pb2 as apb
from apiary_pb import admission_pb2_grpc as agrpc
from apiary_pb import envelope_pb2 as pb
from services.common import envelope, mux

from .catalogue import ResourceInfo

ADMISSION_DURATION = Histogram(
    "apiary_registry_admission_call_duration_seconds", "Time the registry waits on the admission service.",
    ["phase", "operation"], buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5),
)

Obj = dict[str, Any]


class AdmissionClient:
    def __init__(self, stub: agrpc.AdmissionStub, timeout: float = 30.0) -> None:
        self.stub = stub
        self.timeout = timeout
        self.calls = mux.MuxClient(stub.Calls, "admission",
                                   {"Admit": apb.AdmissionResponse, "Validate": apb.AdmissionResponse})

    async def _run(self, phase: str, info: ResourceInfo, subresource: str, operation: str, namespace: str,
                   name: str, obj: Obj | None, old: Obj | None, user: pb.UserInfo, dry_run: bool,
                   options: Obj, timing: dict[str, float], warnings: list[str]) -> tuple[Obj | None, bool]:
        req = apb.AdmissionRequest(
            uid=str(uuid.uuid4()), operation=operation,
            kind=info.kind if not subresource else (info.subresource(subresource) or info).kind,
            attributes=pb.RequestAttributes(user=user, resource_request=True, api_group=info.group,
                                            api_version=info.version, resource=info.plural,
                                            subresource=subresource, namespace=namespace, name=name),
            dry_run=dry_run, options=orjson.dumps(options),
        )
        if obj is not None:
            req.object.CopyFrom(envelope.to_envelope(obj))
        if old is not None:
            req.old_object.CopyFrom(envelope.to_envelope(old))
        method = "Admit" if phase == "mutating" else "Validate"
        t0 = time.perf_counter()
        try:
            resp = await self.calls.call(method, req, timeout=self.timeout)
        finally:
            dt = time.perf_counter() - t0
            ADMISSION_DURATION.labels(phase, operation).observe(dt)
            timing["admission"] = timing.get("admission", 0.0) + dt * 1000
        warnings.extend(resp.warnings)
        if obj is not None and resp.HasField("object") and resp.object.kind:
            return envelope.from_envelope(resp.object), resp.no_validators
        return obj, resp.no_validators

    async def admit(self, *args: Any, **kwargs: Any) -> tuple[Obj | None, bool]:
        """The mutated object, and whether the validating phase has nothing to run."""
        return await self._run("mutating", *args, **kwargs)

    async def validate(self, *args: Any, **kwargs: Any) -> None:
        await self._run("validating", *args, **kwargs)
