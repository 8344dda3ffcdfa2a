"""Storage's and the auth service's spans in one request's trace (issue 27), on the session's stack (traced
at samplingRatePerMillion 0: only a system:masters client's sampled traceparent makes a request traced).

Storage: a span per call served (apiary.Storage/<Method>; a watch's cacher.Watch), the registry's span its
parent; on it, as events with their durations, the watch cache's part (kube's cacher.Get), each etcd call as kube's etcd
client names it (etcdserverpb.KV/Range, etcdserverpb.KV/Txn) with key and revision, encryption as
TransformToStorage; a watch's trace holds its setup only. Auth: the call, each authenticator
tried and each authorizer asked as its children."""
from __future__ import annotations

import asyncio
import uuid
from typing import Any

import httpx
import pytest

from apiary_pb import auth_pb2 as apb
from apiary_pb import auth_pb2_grpc as agrpc
from services.cluster.otlpreceiver import Receiver, new_traceparent
from services.cluster.stack import Stack
from services.common import grpcutil
from services.common.config import TLSFiles

NS = "tracing-storage"


def spans_of(traces: Receiver, trace_id: str, service: str, name: str) -> list[dict[str, Any]]:
    """The trace's spans once `name` of `service` arrived (and the batch settled), then all of the trace's."""
    traces.wait_for(lambda s: s["trace_id"] == trace_id and s["service"] == service and s["name"] == name)
    return traces.trace(trace_id)


def events(span: dict[str, Any]) -> list[dict[str, Any]]:
    """The span's events in time order, each with a duration."""
    got = sorted(span["events"], key=lambda e: e["time"])
    assert all(e["attributes"]["duration_ms"] >= 0 for e in got), span
    return got


def one(spans: list[dict[str, Any]], service: str, name: str) -> dict[str, Any]:
    found = [s for s in spans if s["service"] == service and s["name"] == name]
    assert len(found) == 1, f"{service} {name}: {[(s['service'], s['name']) for s in spans]}"
    return found[0]


def children(spans: list[dict[str, Any]], parent: dict[str, Any]) -> list[dict[str, Any]]:
    return [s for s in spans if s["parent_span_id"] == parent["span_id"]]


@pytest.fixture(scope="module")
def ns(admin: httpx.Client) -> str:
    r = admin.post("/api/v1/namespaces", json={"metadata": {"name": NS}})
    assert r.status_code in (201, 409), r.text
    return NS


def test_a_get_from_the_watch_cache(admin: httpx.Client, traces: Receiver, ns: str) -> None:
    r = admin.post(f"/api/v1/namespaces/{ns}/configmaps", json={"metadata": {"name": "cached"}, "data": {"a": "b"}})
    assert r.status_code in (201, 409), r.text
    trace_id, _, tp = new_traceparent()
    r = admin.get(f"/api/v1/namespaces/{ns}/configmaps/cached", headers={"traceparent": tp})
    assert r.status_code == 200, r.text
    spans = spans_of(traces, trace_id, "apiary-storage", "apiary.Storage/Get")
    call = one(spans, "apiary-storage", "apiary.Storage/Get")
    assert call["attributes"]["key"] == f"/registry/configmaps/{ns}/cached"
    assert call["parent_span_id"] == one(spans, "apiary-registry", "Get")["span_id"]
    assert children(spans, call) == []
    # the cache answered: its lookup an event, no etcd read of the object itself
    steps = events(call)
    assert [e["name"] for e in steps] == ["cacher.Get"], steps
    (cache,) = steps
    # served at a revision no older than the object's
    assert cache["attributes"]["revision"] >= int(r.json()["metadata"]["resourceVersion"])


def test_a_create_is_an_etcd_txn_with_key_and_revision(admin: httpx.Client, traces: Receiver, ns: str) -> None:
    name = f"created-{uuid.uuid4().hex[:8]}"
    trace_id, _, tp = new_traceparent()
    r = admin.post(f"/api/v1/namespaces/{ns}/configmaps", json={"metadata": {"name": name}},
                   headers={"traceparent": tp})
    assert r.status_code == 201, r.text
    spans = spans_of(traces, trace_id, "apiary-storage", "apiary.Storage/Create")
    call = one(spans, "apiary-storage", "apiary.Storage/Create")
    (txn,) = [e for e in events(call) if e["name"] == "etcdserverpb.KV/Txn"]
    assert txn["attributes"]["key"] == f"/registry/configmaps/{ns}/{name}"
    assert txn["attributes"]["op"] == "create" and txn["attributes"]["succeeded"] is True
    assert str(txn["attributes"]["revision"]) == r.json()["metadata"]["resourceVersion"]
    # the storage span is in the request's one trace: the registry's child, under the proxy's root
    root = one(spans, "apiary-proxy", "POST /api/v1/namespaces/{:namespace}/configmaps")
    assert root["parent_span_id"] == tp.split("-")[2]
    create = one(spans, "apiary-registry", "Create")
    assert call["parent_span_id"] == create["span_id"] and create["parent_span_id"] == root["span_id"]


def test_an_encrypted_create_shows_the_transformer(admin: httpx.Client, traces: Receiver, ns: str) -> None:
    name = f"secret-{uuid.uuid4().hex[:8]}"
    trace_id, _, tp = new_traceparent()
    r = admin.post(f"/api/v1/namespaces/{ns}/secrets", json={"metadata": {"name": name}, "stringData": {"k": "v"}},
                   headers={"traceparent": tp})
    assert r.status_code == 201, r.text
    spans = spans_of(traces, trace_id, "apiary-storage", "apiary.Storage/Create")
    call = one(spans, "apiary-storage", "apiary.Storage/Create")
    steps = events(call)
    assert [e["name"] for e in steps] == ["TransformToStorage", "etcdserverpb.KV/Txn"]
    assert {k: v for k, v in steps[0]["attributes"].items() if k != "duration_ms"} == {
        "key": f"/registry/secrets/{ns}/{name}", "provider": "aescbc:key1"}


def test_a_watch_traces_its_setup_only(admin: httpx.Client, traces: Receiver, ns: str) -> None:
    trace_id, _, tp = new_traceparent()
    with admin.stream("GET", f"/api/v1/namespaces/{ns}/configmaps",
                      params={"watch": "1", "timeoutSeconds": "2"}, headers={"traceparent": tp}) as r:
        assert r.status_code == 200
        for _ in r.iter_bytes():  # the initial ADDED events, then the end at the timeout
            pass
    spans = spans_of(traces, trace_id, "apiary-storage", "cacher.Watch")
    setup = one(spans, "apiary-storage", "cacher.Watch")  # the storage service's one span of a watch
    assert setup["attributes"]["key"] == f"/registry/configmaps/{ns}/"
    assert setup["attributes"]["resource"] == "configmaps"
    # in the request's trace (the registry opens it once its own Watch span, the plan, is over: the root's
    # child), ended with the setup: before the watch (the root span) ends
    root = one(spans, "apiary-proxy", "GET /api/v1/namespaces/{:namespace}/configmaps")
    assert setup["parent_span_id"] == root["span_id"]
    assert setup["end"] < root["end"]


def test_the_authorizers_asked_for_an_impersonated_user(admin: httpx.Client, traces: Receiver, ns: str) -> None:
    # system:masters is authorized in the proxy; the user it impersonates is asked of the auth service (a
    # resource name nobody asked for before: no decision cached in the proxy)
    trace_id, _, tp = new_traceparent()
    name = f"nobody-{uuid.uuid4().hex[:8]}"
    r = admin.get(f"/api/v1/namespaces/{ns}/configmaps/{name}",
                  headers={"traceparent": tp, "Impersonate-User": "tracing-alice"})
    assert r.status_code == 403, r.text
    spans = spans_of(traces, trace_id, "apiary-auth", "authorizer RBAC")
    call = one(spans, "apiary-auth", "apiary.Auth/Authorize")
    assert call["attributes"]["decision"] == "NoOpinion"
    asked = sorted(children(spans, call), key=lambda s: s["start"])
    assert [s["name"] for s in asked] == ["authorizer Privileged", "authorizer RBAC"]
    assert [s["attributes"]["decision"] for s in asked] == ["NoOpinion", "NoOpinion"]


def test_the_authenticators_tried_for_a_token(stack: Stack, tokens: dict[str, str], traces: Receiver) -> None:
    # The proxy authenticates before the request's root span exists (the user decides whether a
    # traceparent is trusted), so the auth service is called here as the proxy calls it, with the trace.
    trace_id, _, tp = new_traceparent()

    async def authenticate() -> apb.AuthenticateResponse:
        pki = stack.state / "pki"
        channel = grpcutil.make_channel(TLSFiles(str(pki / "proxy.crt"), str(pki / "proxy.key"),
                                                 str(pki / "internal-ca.crt")), stack.addresses("auth"))
        try:
            return await agrpc.AuthStub(channel).Authenticate(apb.AuthenticateRequest(token=tokens["alice"]),
                                                             timeout=10, metadata=(("traceparent", tp),))
        finally:
            await channel.close()

    resp = asyncio.run(authenticate())
    assert resp.authenticated and resp.user.name == "alice"
    spans = spans_of(traces, trace_id, "apiary-auth", "apiary.Auth/Authenticate")
    call = one(spans, "apiary-auth", "apiary.Auth/Authenticate")
    assert call["parent_span_id"] == tp.split("-")[2]
    assert call["attributes"] == {"authenticated": True, "user": "alice"}
    tried = sorted(children(spans, call), key=lambda s: s["start"])
    assert [s["name"] for s in tried] == ["authenticator x509", "authenticator token-file"]
    assert tried[0]["attributes"] == {"result": "not mine"}
    assert tried[1]["attributes"] == {"result": "authenticated", "user": "alice"}
