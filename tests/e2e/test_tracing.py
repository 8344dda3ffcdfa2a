"""One trace per request through the services (issue 27): the session's stack exports to the session's
OTLP receiver (tests/conftest.py `traces`) at samplingRatePerMillion 0, so only a request whose trusted
caller sends a sampled traceparent is traced."""
from __future__ import annotations

import os

import httpx

from tools.otlpreceiver import Receiver


def new_traceparent() -> tuple[str, str]:
    trace_id = os.urandom(16).hex()
    return trace_id, f"00-{trace_id}-{os.urandom(8).hex()}-01"


def test_a_masters_traceparent_is_continued(admin: httpx.Client, traces: Receiver) -> None:
    trace_id, tp = new_traceparent()
    r = admin.get("/api/v1/namespaces/default/configmaps", headers={"traceparent": tp})
    assert r.status_code == 200
    spans = traces.wait_for(lambda s: s["trace_id"] == trace_id)
    (root,) = [s for s in spans if s["service"] == "apiary-proxy" and s["name"].startswith("GET ")]
    assert root["name"] == "GET /api/v1/namespaces/{:namespace}/configmaps"
    assert root["parent_span_id"] == tp.split("-")[2]
    assert root["attributes"]["audit-id"] == r.headers["audit-id"]
    assert root["attributes"]["http.status_code"] == 200


def test_no_traceparent_no_trace_at_rate_zero(admin: httpx.Client, traces: Receiver) -> None:
    r = admin.get("/api/v1/namespaces/default/configmaps")
    assert r.status_code == 200
    aid = r.headers["audit-id"]
    assert traces.wait_for(lambda s: s["attributes"].get("audit-id") == aid, timeout=3) == []
