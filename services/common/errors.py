"""Typed API errors that become kube-apiserver's Status JSON, locally and across gRPC."""
from __future__ import annotations

from typing import Any

import grpc
import orjson
from google.protobuf import any_pb2
from google.rpc import status_pb2 as rpc_status_pb2

from apiary_pb import envelope_pb2 as pb

STATUS_DETAILS_KEY = "grpc-status-details-bin"


class APIError(Exception):
    """An error with a Kubernetes Status: code, reason, message, details."""

    code = 500
    reason = "InternalError"

    def __init__(
        self,
        message: str,
        *,
        code: int | None = None,
        reason: str | None = None,
        details: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
        list_continue: str = "",
    ) -> None:
        super().__init__(message)
        self.list_continue = list_continue
        self.message = message
        if code is not None:
            self.code = code
        if reason is not None:
            self.reason = reason
        self.details = details
        self.headers = headers or {}
        # What a refused request still carries to the proxy (Status fields 7 and 8, never in the body):
        # the audit annotations and warnings admission gave before refusing it, as kube keeps both.
        self.audit_annotations: dict[str, str] = {}
        self.warnings: list[str] = []

    def status(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {"continue": self.list_continue} if self.list_continue else {},
            "status": "Failure",
            "message": self.message,
        }
        if self.reason:
            out["reason"] = self.reason
        if self.details:
            out["details"] = self.details
        out["code"] = self.code
        return out

    def body(self) -> bytes:
        return orjson.dumps(self.status()) + b"\n"

    def to_pb(self) -> pb.Status:
        st = pb.Status(status="Failure", message=self.message, reason=self.reason or "", code=self.code,
                       list_continue=self.list_continue, audit_annotations=self.audit_annotations,
                       warnings=self.warnings)
        d = self.details
        if d:
            st.details.name = d.get("name", "")
            st.details.group = d.get("group", "")
            st.details.kind = d.get("kind", "")
            st.details.uid = d.get("uid", "")
            st.details.retry_after_seconds = int(d.get("retryAfterSeconds", 0))
            for c in d.get("causes", []):
                st.details.causes.add(reason=c.get("reason", ""), message=c.get("message", ""), field=c.get("field", ""))
        return st

    @staticmethod
    def from_pb(st: pb.Status) -> "APIError":
        details: dict[str, Any] | None = None
        if st.HasField("details"):
            details = {}
            for k in ("name", "group", "kind", "uid"):
                v = getattr(st.details, k)
                if v:
                    details[k] = v
            if st.details.causes:
                details["causes"] = [
                    {k: v for k, v in (("reason", c.reason), ("message", c.message), ("field", c.field)) if v}
                    for c in st.details.causes
                ]
            if st.details.retry_after_seconds:
                details["retryAfterSeconds"] = st.details.retry_after_seconds
        cls = _BY_REASON.get(st.reason) or _BY_CODE.get(st.code, APIError)
        err = cls(st.message, code=st.code, reason=st.reason, details=details, list_continue=st.list_continue)
        if st.audit_annotations:
            err.audit_annotations = dict(st.audit_annotations)
        if st.warnings:
            err.warnings = list(st.warnings)
        if details and details.get("retryAfterSeconds"):
            err.headers["Retry-After"] = str(details["retryAfterSeconds"])
        return err

    @staticmethod
    def from_status_dict(st: dict[str, Any]) -> "APIError":
        code = int(st.get("code") or 500)
        cls = _BY_REASON.get(st.get("reason", "")) or _BY_CODE.get(code, APIError)
        return cls(st.get("message", ""), code=code, reason=st.get("reason", ""), details=st.get("details"))

    # gRPC transport ---------------------------------------------------------

    def grpc_code(self) -> grpc.StatusCode:
        return _GRPC_CODES.get(self.code, grpc.StatusCode.UNKNOWN)

    def grpc_trailers(self) -> tuple[tuple[str, bytes], ...]:
        detail = any_pb2.Any()
        detail.Pack(self.to_pb())
        rich = rpc_status_pb2.Status(code=self.grpc_code().value[0], message=self.message, details=[detail])
        return ((STATUS_DETAILS_KEY, rich.SerializeToString()),)


class BadRequest(APIError):
    code, reason = 400, "BadRequest"


class Unauthorized(APIError):
    code, reason = 401, "Unauthorized"


class Forbidden(APIError):
    code, reason = 403, "Forbidden"


class NotFound(APIError):
    code, reason = 404, "NotFound"


class MethodNotAllowed(APIError):
    code, reason = 405, "MethodNotAllowed"


class NotAcceptable(APIError):
    code, reason = 406, "NotAcceptable"


class AlreadyExists(APIError):
    code, reason = 409, "AlreadyExists"


class Conflict(APIError):
    code, reason = 409, "Conflict"


class Gone(APIError):
    code, reason = 410, "Gone"


class RequestEntityTooLarge(APIError):
    code, reason = 413, "RequestEntityTooLarge"


class UnsupportedMediaType(APIError):
    code, reason = 415, "UnsupportedMediaType"


class Invalid(APIError):
    code, reason = 422, "Invalid"


class TooManyRequests(APIError):
    code, reason = 429, "TooManyRequests"


class InternalError(APIError):
    code, reason = 500, "InternalError"


class ServiceUnavailable(APIError):
    code, reason = 503, "ServiceUnavailable"


class Timeout(APIError):
    code, reason = 504, "Timeout"


_BY_CODE: dict[int, type[APIError]] = {
    400: BadRequest, 401: Unauthorized, 403: Forbidden, 404: NotFound, 405: MethodNotAllowed,
    406: NotAcceptable, 409: Conflict, 410: Gone, 413: RequestEntityTooLarge, 415: UnsupportedMediaType,
    422: Invalid, 429: TooManyRequests, 500: InternalError, 503: ServiceUnavailable, 504: Timeout,
}

_BY_REASON: dict[str, type[APIError]] = {c.reason: c for c in _BY_CODE.values()}
_BY_REASON["AlreadyExists"] = AlreadyExists

_GRPC_CODES = {
    400: grpc.StatusCode.INVALID_ARGUMENT, 401: grpc.StatusCode.UNAUTHENTICATED,
    403: grpc.StatusCode.PERMISSION_DENIED, 404: grpc.StatusCode.NOT_FOUND,
    405: grpc.StatusCode.UNIMPLEMENTED, 406: grpc.StatusCode.INVALID_ARGUMENT,
    409: grpc.StatusCode.ALREADY_EXISTS, 410: grpc.StatusCode.OUT_OF_RANGE,
    413: grpc.StatusCode.RESOURCE_EXHAUSTED, 415: grpc.StatusCode.INVALID_ARGUMENT,
    422: grpc.StatusCode.INVALID_ARGUMENT, 429: grpc.StatusCode.RESOURCE_EXHAUSTED,
    500: grpc.StatusCode.INTERNAL, 503: grpc.StatusCode.UNAVAILABLE, 504: grpc.StatusCode.DEADLINE_EXCEEDED,
}


# Constructors with kube-apiserver's exact messages ------------------------------


def qualified(resource: str, group: str) -> str:
    return f"{resource}.{group}" if group else resource


def not_found(resource: str, group: str, name: str) -> NotFound:
    return NotFound(
        f'{qualified(resource, group)} "{name}" not found',
        details={"name": name, "group": group, "kind": resource} if group else {"name": name, "kind": resource},
    )


def already_exists(resource: str, group: str, name: str) -> AlreadyExists:
    return AlreadyExists(
        f'{qualified(resource, group)} "{name}" already exists',
        details={"name": name, "group": group, "kind": resource} if group else {"name": name, "kind": resource},
    )


def conflict(resource: str, group: str, name: str, why: str) -> Conflict:
    return Conflict(
        f'Operation cannot be fulfilled on {qualified(resource, group)} "{name}": {why}',
        details={"name": name, "group": group, "kind": resource} if group else {"name": name, "kind": resource},
    )


MODIFIED = "the object has been modified; please apply your changes to the latest version and try again"


def invalid(kind: str, group: str, name: str, causes: list[dict[str, str]]) -> Invalid:
    """causes: [{"reason": "FieldValueInvalid", "message": "Invalid value: ...", "field": "metadata.name"}]."""
    text = ", ".join(f"{c['field']}: {c['message']}" if c.get("field") else c["message"] for c in causes)
    if len(causes) > 1:
        text = f"[{text}]"
    details: dict[str, Any] = {"name": name, "kind": kind, "causes": causes}
    if group:
        details["group"] = group
    return Invalid(f'{kind}{"." + group if group else ""} "{name}" is invalid: {text}', details=details)


def forbidden(resource: str, group: str, name: str, why: str) -> Forbidden:
    target = f'{qualified(resource, group)} "{name}"' if name else qualified(resource, group)
    details: dict[str, Any] = {"kind": resource}
    if name:
        details["name"] = name
    if group:
        details["group"] = group
    return Forbidden(f"{target} is forbidden: {why}", details=details)


def error_from_rpc(err: grpc.aio.AioRpcError | grpc.RpcError, peer: str = "") -> APIError:
    """Rebuild the APIError a peer raised; transport failures become 503/504."""
    md = err.trailing_metadata() or ()
    for key, value in md:
        if key == STATUS_DETAILS_KEY:
            rich = rpc_status_pb2.Status.FromString(value)
            for detail in rich.details:
                st = pb.Status()
                if detail.Unpack(st):
                    return APIError.from_pb(st)
    code = err.code()
    where = f" ({peer})" if peer else ""
    if code == grpc.StatusCode.DEADLINE_EXCEEDED:
        return Timeout(f"the server was unable to return a response in the time allotted{where}",
                       headers={"Retry-After": "1"})
    if code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED):
        return ServiceUnavailable(f"service unavailable{where}: {err.details()}", headers={"Retry-After": "1"},
                                  details={"retryAfterSeconds": 1})
    return InternalError(f"internal error{where}: {err.details()}")
