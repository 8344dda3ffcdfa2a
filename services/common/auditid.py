"""The audit ID of the request being handled, in every service: kube's request.AuditIDFrom(ctx).

The proxy sets it for each request (Audit-ID: the client's, or a new UUID); it travels on every hop
(mux.Frame.audit_id, apf's SeatRequest.audit_id, the `audit-id` metadata of unary gRPC calls), and
each service sets it again while it handles that call, so that LogFilter adds `audit-id=<id>` to
every log line emitted meanwhile and one grep follows a request through all services.
"""
from __future__ import annotations

import logging
from contextvars import ContextVar

AUDIT_ID: ContextVar[str] = ContextVar("audit_id", default="")
METADATA_KEY = "audit-id"


def current() -> str:
    return AUDIT_ID.get()


def metadata() -> tuple[tuple[str, str], ...] | None:
    """gRPC metadata carrying the current audit ID (None without one)."""
    aid = AUDIT_ID.get()
    return ((METADATA_KEY, aid),) if aid else None


def from_metadata(md: object) -> str:
    """The audit ID in a call's invocation metadata ("" without one)."""
    for item in md or ():  # type: ignore[attr-defined]
        if item[0] == METADATA_KEY:
            return item[1] if isinstance(item[1], str) else item[1].decode()
    return ""


class LogFilter(logging.Filter):
    """Gives each record `audit` (" audit-id=<id>" while a request is handled, else "") for the format."""

    def filter(self, record: logging.LogRecord) -> bool:
        aid = AUDIT_ID.get()
        record.audit = f" audit-id={aid}" if aid else ""
        return True
