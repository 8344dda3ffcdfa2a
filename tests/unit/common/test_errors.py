"""APIError across gRPC: the Status and what a refused request still carries (never in the body)."""
from __future__ import annotations

import orjson

from services.common.errors import APIError, Forbidden


def test_refusal_carries_audit_annotations_and_warnings_across_the_hop() -> None:
    err = Forbidden("denied", details={"name": "x", "kind": "configmaps"})
    err.audit_annotations = {"hook.example.com/why": "prefix"}
    err.warnings = ["first", "second"]
    back = APIError.from_pb(err.to_pb())
    assert isinstance(back, Forbidden) and (back.code, back.message) == (403, "denied")
    assert back.audit_annotations == {"hook.example.com/why": "prefix"}
    assert back.warnings == ["first", "second"]
    # the Status body a client sees is kube's: neither field is in it
    assert set(orjson.loads(back.body())) == {"kind", "apiVersion", "metadata", "status", "message", "reason",
                                              "details", "code"}
    plain = APIError.from_pb(Forbidden("no").to_pb())
    assert plain.audit_annotations == {} and plain.warnings == []
