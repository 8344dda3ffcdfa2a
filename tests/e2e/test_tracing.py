"""One trace per request through the services (issue 27): the session's stack exports to the session's
OTLP receiver (tests/conftest.py `traces`) at samplingRatePerMillion 0, so only a request whose trusted
caller sends a sampled traceparent is traced."""
from __future__ import annotations

import ssl

import httpx

from services.cluster.otlpreceiver import Receiver, new_traceparent
from services.cluster.stack import Stack


def test_a_masters_traceparent_is_continued(admin: httpx.Client, traces: Receiver) -> None:
    trace_id, _, tp = new_traceparent()
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


def proxy_spans(spans: list[dict]) -> dict[str, dict]:
    return {s["name"]: s for s in spans if s["service"] == "apiary-proxy"}


def event(span: dict, name: str) -> dict:
    """The attributes of the event `name` on `span` (a stage that made no call)."""
    (got,) = [e for e in span["events"] if e["name"] == name]
    return got["attributes"]


def test_the_proxy_filters_are_spans_under_the_root(admin: httpx.Client, traces: Receiver) -> None:
    trace_id, _, tp = new_traceparent()
    # impersonating an ordinary user: the impersonation span, and a seat from the apf service (whose span
    # joins); the traceparent is trusted for the authenticated user, system:masters
    r = admin.get("/api/v1/namespaces/default/configmaps", headers={"traceparent": tp, "Impersonate-User": "alice"})
    assert r.status_code == 403
    spans = traces.wait_for(lambda s: s["trace_id"] == trace_id)
    by_name = proxy_spans(spans)
    root = by_name["GET /api/v1/namespaces/{:namespace}/configmaps"]
    assert root["parent_span_id"] == tp.split("-")[2]
    assert root["attributes"]["audit-id"] == r.headers["audit-id"]
    assert root["attributes"]["http.status_code"] == 403
    for name in ("impersonation", "apf wait"):  # stages that call another service: spans
        assert by_name[name]["parent_span_id"] == root["span_id"], name
    # authorization asks the auth service (a span), unless alice's decision is in the proxy's cache (an event)
    if "authorization" in by_name:
        assert by_name["authorization"]["parent_span_id"] == root["span_id"]
        assert by_name["authorization"]["attributes"]["decision"] == "forbid"
    else:
        assert event(root, "authorization")["decision"] == "forbid"
    # authentication ran before the root span was made (from the proxy's cache or the client certificate):
    # an event on the root, within it, with its duration
    (authn,) = [e for e in root["events"] if e["name"] == "authentication"]
    assert root["start"] <= authn["time"] <= root["end"] and authn["attributes"]["duration_ms"] >= 0
    # the execution makes no call of its own (the handler's is the registry's span, the root's child): an event
    assert "apf execution" not in by_name and event(root, "apf execution")["duration_ms"] >= 0
    assert by_name["apf wait"]["attributes"]["priority_level"] not in ("", "exempt")
    (seat,) = [s for s in spans if s["service"] == "apiary-apf"]
    assert seat["name"] == "apf seat" and seat["parent_span_id"] == by_name["apf wait"]["span_id"]
    assert seat["attributes"]["decision"] == "granted"
    assert seat["attributes"]["priority_level"] == by_name["apf wait"]["attributes"]["priority_level"]
    # no orphans: every span of the trace has its parent in it, but the root (the client's span)
    ids = {s["span_id"] for s in spans}
    assert [s["name"] for s in spans if s["parent_span_id"] not in ids] == [root["name"]]


def test_one_span_per_service(admin: httpx.Client, traces: Receiver) -> None:
    trace_id, _, tp = new_traceparent()
    r = admin.get("/api/v1/namespaces/default/configmaps", headers={"traceparent": tp})
    assert r.status_code == 200
    spans = traces.wait_for(lambda s: s["trace_id"] == trace_id)
    (root,) = proxy_spans(spans).values()
    assert root["name"] == "GET /api/v1/namespaces/{:namespace}/configmaps"
    assert root["attributes"]["http.status_code"] == 200
    # decided in the proxy, with no call: system:masters's authorization, its exempt seat and its execution are events
    assert event(root, "authorization") == {"decision": "allow", "duration_ms": event(root, "authorization")["duration_ms"]}
    assert event(root, "apf wait")["priority_level"] == "exempt" and event(root, "apf execution")["duration_ms"] >= 0
    # the handler is the registry's (kube's List span), the root's child; storage's span is the registry's child
    (handler,) = [s for s in spans if s["service"] == "apiary-registry"]
    assert handler["name"] == "List" and handler["parent_span_id"] == root["span_id"]
    assert {k: handler["attributes"][k] for k in ("verb", "resource", "namespace", "code")} == {
        "verb": "list", "resource": "configmaps", "namespace": "default", "code": 200}
    (storage,) = [s for s in spans if s["service"] == "apiary-storage"]
    assert storage["name"] == "apiary.Storage/List" and storage["parent_span_id"] == handler["span_id"]
    assert len(spans) == 3


def test_an_ordinary_users_traceparent_is_not_continued(stack: Stack, tokens: dict[str, str], traces: Receiver) -> None:
    trace_id, _, tp = new_traceparent()
    verify = ssl.create_default_context(cafile=str(stack.state / "pki" / "ca.crt"))
    with httpx.Client(base_url=stack.server, verify=verify, timeout=30) as alice:
        r = alice.get("/api/v1/namespaces/default/configmaps",
                      headers={"traceparent": tp, "Authorization": f"Bearer {tokens['alice']}"})
    assert r.status_code in (200, 403)
    # only a link of a new root, which the front door does not sample at rate 0: nothing under that id
    assert traces.wait_for(lambda s: s["trace_id"] == trace_id, timeout=3) == []


def test_a_malformed_traceparent_is_ignored(admin: httpx.Client, traces: Receiver) -> None:
    trace_id, _, tp = new_traceparent()
    r = admin.get("/api/v1/namespaces/default/configmaps", headers={"traceparent": tp.upper()})
    assert r.status_code == 200
    assert traces.wait_for(lambda s: s["trace_id"] == trace_id, timeout=3) == []


def test_a_failed_request_has_its_code(admin: httpx.Client, traces: Receiver) -> None:
    trace_id, _, tp = new_traceparent()
    r = admin.get("/api/v1/namespaces/default/configmaps/no-such-thing", headers={"traceparent": tp})
    assert r.status_code == 404
    by_name = proxy_spans(traces.wait_for(lambda s: s["trace_id"] == trace_id))
    root = by_name["GET /api/v1/namespaces/{:namespace}/configmaps/{:name}"]
    assert root["attributes"]["http.status_code"] == 404
    assert root["status"] == 0  # a 404 is no error of the server's (unset)
    (handler,) = [s for s in traces.trace(trace_id) if s["name"] == "Get"]
    assert handler["service"] == "apiary-registry" and handler["attributes"]["code"] == 404


def test_a_watch_is_traced_for_its_setup(admin: httpx.Client, traces: Receiver) -> None:
    trace_id, _, tp = new_traceparent()
    with admin.stream("GET", "/api/v1/namespaces/default/configmaps",
                      params={"watch": "true", "timeoutSeconds": "60"}, headers={"traceparent": tp}) as w:
        assert w.status_code == 200
        # exported while the watch is still open: the spans ended once it was established
        by_name = proxy_spans(traces.wait_for(lambda s: s["trace_id"] == trace_id and s["parent_span_id"] == tp.split("-")[2]))
        assert not w.is_closed
    root = by_name["GET /api/v1/namespaces/{:namespace}/configmaps"]
    assert root["attributes"]["http.status_code"] == 200
    (handler,) = [s for s in traces.trace(trace_id) if s["name"] == "Watch"]  # the registry's
    assert handler["service"] == "apiary-registry" and handler["parent_span_id"] == root["span_id"]
    assert handler["attributes"]["verb"] == "watch"


def test_metrics_carry_a_traced_requests_id_as_exemplar(admin: httpx.Client, traces: Receiver) -> None:
    trace_id, _, tp = new_traceparent()
    assert admin.get("/api/v1/namespaces/default/secrets", headers={"traceparent": tp}).status_code == 200
    r = admin.get("/metrics", headers={"Accept": "application/openmetrics-text;version=1.0.0,text/plain;q=0.5"})
    assert r.headers["content-type"].startswith("application/openmetrics-text")
    assert r.text.endswith("# EOF\n")
    lines = [ln for ln in r.text.splitlines()
             if ln.startswith("apiserver_request_duration_seconds_bucket{") and 'resource="secrets"' in ln
             and f'trace_id="{trace_id}"' in ln]
    assert lines and all('verb="LIST"' in ln for ln in lines)
    plain = admin.get("/metrics")
    assert plain.headers["content-type"].startswith("text/plain") and "# EOF" not in plain.text
