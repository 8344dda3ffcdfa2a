"""The registry's side of admission: the admission service's client, and the mutating (Admit) and
validating (Validate) phases as a handler passes them down to the generic store (scope.AdmitFunc,
scope.ValidateFunc).

Admit sends the object once and gets back a JSON Patch (or nothing), not the object again; the old
object and the validating phase's object are the envelopes the store already holds (storage's answer,
and the one it writes), so admission costs no extra serialization of them.
"""
from __future__ import annotations

import time
from typing import Any

import orjson
from prometheus_client import Histogram

from apiary_pb import admission_pb2 as apb
from apiary_pb import admission_pb2_grpc as agrpc
from apiary_pb import envelope_pb2 as pb
from services.apiserver import patch as patches
from services.apiserver.registry.scope import Obj, Scope
from services.apiserver.resource import ResourceInfo
from services.common import envelope, mux
from services.common.errors import APIError
from services.common.uids import new_uid

ADMISSION_DURATION = Histogram(
    "apiary_registry_admission_call_duration_seconds", "Time the registry waits on the admission service.",
    ["phase", "operation"], buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5),
)
# (phase, operation) -> the histogram's child: labels() validates its arguments on every call
_durations: dict[tuple[str, str], Any] = {}


class AdmissionClient:
    def __init__(self, stub: agrpc.AdmissionStub, timeout: float = 30.0, replicas: int = 1) -> None:
        self.stub = stub
        self.timeout = timeout
        self.calls = mux.MuxClient(stub.Calls, "admission",
                                   {"Admit": apb.AdmissionResponse, "Validate": apb.AdmissionResponse}, replicas)

    async def _run(self, phase: str, info: ResourceInfo, subresource: str, operation: str, namespace: str,
                   name: str, obj: pb.Object | None, old: pb.Object | None, user: pb.UserInfo, dry_run: bool,
                   options: Obj, timing: dict[str, float], warnings: list[str],
                   annotations: dict[str, str] | None = None) -> apb.AdmissionResponse:
        req = apb.AdmissionRequest(
            uid=new_uid(), operation=operation,
            kind=info.kind if not subresource else (info.subresource(subresource) or info).kind,
            attributes=pb.RequestAttributes(user=user, resource_request=True, api_group=info.group,
                                            api_version=info.version, resource=info.plural,
                                            subresource=subresource, namespace=namespace, name=name),
            dry_run=dry_run, options=orjson.dumps(options), object=obj, old_object=old,
        )
        method = "Admit" if phase == "mutating" else "Validate"
        t0 = time.perf_counter()
        try:
            # the admission service's phase span is the current span's child (the frame carries its traceparent)
            resp = await self.calls.call(method, req, timeout=self.timeout)
        except APIError as e:  # a refusal still brings its audit annotations and warnings
            warnings.extend(e.warnings)
            if annotations is not None:
                annotations.update(e.audit_annotations)
            raise
        finally:
            dt = time.perf_counter() - t0
            child = _durations.get((phase, operation))
            if child is None:
                child = _durations[(phase, operation)] = ADMISSION_DURATION.labels(phase, operation)
            child.observe(dt)
            timing["admission"] = timing.get("admission", 0.0) + dt * 1000
        warnings.extend(resp.warnings)
        if annotations is not None and resp.audit_annotations:
            annotations.update(resp.audit_annotations)
        return resp

    async def admit(self, info: ResourceInfo, subresource: str, operation: str, namespace: str, name: str,
                    obj: Obj | None, old: pb.Object | None, user: pb.UserInfo, dry_run: bool, options: Obj,
                    timing: dict[str, float], warnings: list[str],
                    annotations: dict[str, str] | None = None) -> tuple[Obj | None, bool]:
        """The mutated object (the mutating plugins' patch applied to obj), and whether the validating
        phase has nothing to run."""
        env = envelope.to_envelope(obj) if obj is not None else None
        resp = await self._run("mutating", info, subresource, operation, namespace, name, env, old, user,
                               dry_run, options, timing, warnings, annotations)
        if obj is not None and resp.patch:
            obj = patches.apply_json_patch(obj, orjson.loads(resp.patch))
        return obj, resp.no_validators

    async def validate(self, info: ResourceInfo, subresource: str, operation: str, namespace: str, name: str,
                       obj: pb.Object | None, old: pb.Object | None, user: pb.UserInfo, dry_run: bool,
                       options: Obj, timing: dict[str, float], warnings: list[str],
                       annotations: dict[str, str] | None = None) -> None:
        await self._run("validating", info, subresource, operation, namespace, name, obj, old, user, dry_run,
                        options, timing, warnings, annotations)


class Admission:
    """Admission orchestration for one write: which operation, with which options, and whether to run at
    all (the server's own bootstrap writes skip it; Admit may say that no validating plugin applies)."""

    def __init__(self, client: AdmissionClient | None, operation: str, options: Obj) -> None:
        self.client = client
        self.operation = operation
        self.options = options

    async def admit(self, r: Scope, name: str, obj: Obj | None, old: pb.Object | None) -> Obj | None:
        if not r.admit or self.client is None:
            return obj
        obj, no_validators = await self.client.admit(
            r.info, r.req.subresource, self.operation, r.namespace, name, obj, old, r.req.user, r.dry_run,
            self.options, r.timing, r.warnings, r.audit_annotations)
        r.no_validators = no_validators
        return obj

    async def validate(self, r: Scope, name: str, obj: pb.Object | None, old: pb.Object | None) -> None:
        if not r.admit or self.client is None or r.no_validators:
            return
        await self.client.validate(r.info, r.req.subresource, self.operation, r.namespace, name, obj, old,
                                   r.req.user, r.dry_run, self.options, r.timing, r.warnings,
                                   r.audit_annotations)
