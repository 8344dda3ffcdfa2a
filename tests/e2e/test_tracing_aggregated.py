"""One trace across the proxy and what it calls out to (issue 27): the stack's pizza server (services/kit)
behind the aggregator, and an admission webhook (tools/fakeservers.py). The session's stack exports to the
session's OTLP receiver at samplingRatePerMillion 0, so only a trusted caller's sampled traceparent is traced;
the kit continues the trace its front proxy sends for every user, and a client's own traceparent never
reaches it."""
from __future__ import annotations

import base64
import ssl
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from services.cluster.aggregated import PIZZA, PIZZA_GROUP
from services.cluster.otlpreceiver import Receiver, new_traceparent, tree
from services.cluster.stack import Stack
from tests.waiting import wait_for
from tools.fakeservers import AdmissionWebhook

pytestmark = pytest.mark.stack

PIZZAS = f"/apis/{PIZZA_GROUP}/v1beta1/namespaces/default/pizzas"
PROXY, KIT = "apiary-proxy", "apiary-pizza"
READER = "tracing-pizza-reader"


def trace_of(traces: Receiver, trace_id: str, services: set[str]) -> list[dict[str, Any]]:
    """The trace's spans once every one of `services` has exported some (each exports on its own schedule)."""
    wait_for(lambda: services <= {s["service"] for s in traces.trace(trace_id)}, timeout=20,
             what=f"spans of {sorted(services)} in trace {trace_id}")
    return traces.wait_for(lambda s: s["trace_id"] == trace_id)


def assert_one_tree(spans: list[dict[str, Any]], parent: str) -> dict[str, dict[str, Any]]:
    """One root, child of the client's span `parent`; every other span's parent is in the trace (no
    orphan, no second root). The spans by ID."""
    by_id = {s["span_id"]: s for s in spans}
    roots = [s for s in spans if s["parent_span_id"] not in by_id]
    assert [r["parent_span_id"] for r in roots] == [parent], tree(spans)
    return by_id


def only(spans: list[dict[str, Any]], service: str, name: str) -> dict[str, Any]:
    found = [s for s in spans if s["service"] == service and s["name"] == name]
    assert len(found) == 1, (service, name, tree(spans))
    return found[0]


def ancestors(span: dict[str, Any], by_id: dict[str, dict[str, Any]]) -> list[str]:
    out = []
    while span["parent_span_id"] in by_id:
        span = by_id[span["parent_span_id"]]
        out.append(span["span_id"])
    return out


@pytest.fixture(scope="module")
def alice(stack: Stack, admin: httpx.Client, tokens: dict[str, str]) -> Iterator[httpx.Client]:
    """An ordinary user (a bearer token) allowed to read pizzas, through the proxy."""
    rules = [{"apiGroups": [PIZZA_GROUP], "resources": ["pizzas"], "verbs": ["get", "list"]}]
    rbac = "/apis/rbac.authorization.k8s.io/v1"
    assert admin.post(f"{rbac}/clusterroles", json={"metadata": {"name": READER}, "rules": rules}).status_code == 201
    r = admin.post(f"{rbac}/clusterrolebindings", json={
        "metadata": {"name": READER}, "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                                                  "name": READER},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "alice"}]})
    assert r.status_code == 201, r.text
    pki = stack.state / "pki"
    with httpx.Client(base_url=stack.server, verify=ssl.create_default_context(cafile=str(pki / "ca.crt")),
                      headers={"Authorization": f"Bearer {tokens['alice']}"}, timeout=30) as c:
        try:
            wait_for(lambda: c.get(PIZZAS).status_code == 200, what="alice's RBAC on pizzas")
            yield c
        finally:
            admin.delete(f"{rbac}/clusterrolebindings/{READER}")
            admin.delete(f"{rbac}/clusterroles/{READER}")


def pizza(name: str, topping: str) -> dict[str, Any]:
    return {"apiVersion": f"{PIZZA_GROUP}/v1beta1", "kind": "Pizza", "metadata": {"name": name},
            "spec": {"toppings": [{"name": topping}]}}


@pytest.fixture(scope="module")
def topping(admin: httpx.Client) -> Iterator[str]:
    """A topping of the module's own (the pizza server refuses pizzas with unknown ones)."""
    name = f"traced-{uuid.uuid4().hex[:6]}"
    toppings = f"/apis/{PIZZA_GROUP}/v1beta1/toppings"
    r = admin.post(toppings, json={"apiVersion": f"{PIZZA_GROUP}/v1beta1", "kind": "Topping",
                                   "metadata": {"name": name}, "spec": {"cost": 1}})
    assert r.status_code == 201, r.text
    yield name
    admin.delete(f"{toppings}/{name}")


@pytest.fixture(scope="module")
def margherita(admin: httpx.Client, topping: str) -> Iterator[str]:
    name = f"traced-{uuid.uuid4().hex[:6]}"
    r = admin.post(PIZZAS, json=pizza(name, topping))
    assert r.status_code == 201, r.text
    yield name
    admin.delete(f"{PIZZAS}/{name}")


def test_a_masters_request_to_the_pizza_server_is_one_trace(admin: httpx.Client, topping: str,
                                                            traces: Receiver) -> None:
    trace_id, parent, tp = new_traceparent()
    name = f"traced-{uuid.uuid4().hex[:6]}"
    r = admin.post(PIZZAS, headers={"traceparent": tp}, json=pizza(name, topping))
    assert r.status_code == 201, r.text
    try:
        spans = trace_of(traces, trace_id, {PROXY, KIT})
    finally:
        admin.delete(f"{PIZZAS}/{name}")
    by_id = assert_one_tree(spans, parent)
    route = f"POST /apis/{PIZZA_GROUP}/v1beta1/namespaces/{{:namespace}}/pizzas"
    root = only(spans, PROXY, route)
    assert root["parent_span_id"] == parent
    forward = only(spans, PROXY, "proxy to APIService")
    assert root["span_id"] in ancestors(forward, by_id)
    assert forward["attributes"]["apiservice"] == f"v1beta1.{PIZZA_GROUP}"
    assert forward["attributes"]["service"] == f"{PIZZA.namespace}/{PIZZA.name}"
    assert forward["attributes"]["http.status_code"] == 201
    # the pizza server continues the proxy's trace: its root is the forwarding span's child
    kit_root = only(spans, KIT, route)
    assert kit_root["parent_span_id"] == forward["span_id"]
    assert kit_root["attributes"]["http.status_code"] == 201
    # its storage call, below its handler (the library's handlers span, services/apiserver/endpoints)
    stored = only(spans, KIT, "storage Create")
    assert kit_root["span_id"] in ancestors(stored, by_id)
    assert stored["attributes"]["resource"] == "pizzas" and stored["attributes"]["key"].endswith(f"/default/{name}")


def test_the_kit_continues_the_proxys_trace_for_an_ordinary_user(admin: httpx.Client, alice: httpx.Client,
                                                                  margherita: str, traces: Receiver) -> None:
    # a masters client impersonating alice: traced at the front door, alice's identity at the pizza server
    trace_id, parent, tp = new_traceparent()
    r = admin.get(f"{PIZZAS}/{margherita}", headers={"traceparent": tp, "Impersonate-User": "alice"})
    assert r.status_code == 200, r.text
    spans = trace_of(traces, trace_id, {PROXY, KIT})
    by_id = assert_one_tree(spans, parent)
    forward = only(spans, PROXY, "proxy to APIService")
    kit_root = only(spans, KIT, f"GET /apis/{PIZZA_GROUP}/v1beta1/namespaces/{{:namespace}}/pizzas/{{:name}}")
    assert kit_root["parent_span_id"] == forward["span_id"] and kit_root["links"] == []
    # alice is no system:masters: the pizza server asks the core API server, a span of the trace
    review = only(spans, KIT, "SubjectAccessReview")
    assert kit_root["span_id"] in ancestors(review, by_id) and review["attributes"]["allowed"] is True
    assert kit_root["span_id"] in ancestors(only(spans, KIT, "storage Get"), by_id)


def test_an_ordinary_clients_traceparent_never_reaches_the_pizza_server(alice: httpx.Client, margherita: str,
                                                                         traces: Receiver) -> None:
    # the proxy only links alice's context (a new root, not sampled at rate 0) and sends the pizza server
    # its own: were alice's forwarded, the kit (which trusts its front proxy) would continue and export it
    trace_id, _, tp = new_traceparent()
    r = alice.get(f"{PIZZAS}/{margherita}", headers={"traceparent": tp})
    assert r.status_code == 200, r.text
    time.sleep(2)  # past the services' export delay
    assert traces.wait_for(lambda s: s["trace_id"] == trace_id, timeout=3) == []


def test_a_direct_clients_traceparent_is_trusted_as_at_the_front_door(stack: Stack, tokens: dict[str, str],
                                                                       alice: httpx.Client, margherita: str,
                                                                       traces: Receiver) -> None:
    pki = stack.state / "pki"

    def client(cert: bool) -> httpx.Client:
        ctx = ssl.create_default_context(cafile=str(pki / "ca.crt"))
        ctx.check_hostname = False  # its certificate names its Service, pizza-apiserver.pizza-apiserver.svc
        if cert:
            ctx.load_cert_chain(str(pki / "admin.crt"), str(pki / "admin.key"))
        return httpx.Client(base_url=f"https://127.0.0.1:{stack.port(PIZZA.name, 'https')}", verify=ctx, timeout=30)

    path = f"{PIZZAS}/{margherita}"
    # alice straight to the pizza server (a bearer token, no front proxy): only linked, so not sampled
    untrusted, _, tp = new_traceparent()
    with client(cert=False) as direct:
        r = direct.get(path, headers={"traceparent": tp, "Authorization": f"Bearer {tokens['alice']}"})
        assert r.status_code == 200, r.text
    # system:masters (the admin certificate) straight to it: continued
    trusted, parent, tp = new_traceparent()
    with client(cert=True) as direct:
        assert direct.get(path, headers={"traceparent": tp}).status_code == 200
    spans = trace_of(traces, trusted, {KIT})
    assert_one_tree(spans, parent)
    assert {s["service"] for s in spans} == {KIT}
    assert traces.trace(untrusted) == []


@pytest.fixture
def hooked(admin: httpx.Client, tmp_path: Path) -> Iterator[tuple[str, str, AdmissionWebhook]]:
    """(namespace, webhook name, server): a validating webhook on configmaps of a namespace of the test's."""
    tag = uuid.uuid4().hex[:8]
    ns, hook = f"trace-{tag}", f"traced.{tag}.webhooks.apiary.test"
    assert admin.post("/api/v1/namespaces", json={"metadata": {"name": ns, "labels": {"trace-test": tag}}}
                      ).status_code == 201
    server = AdmissionWebhook(tmp_path, "traced", lambda req: {"allowed": True}).start()
    config = f"traced-{tag}"
    r = admin.post("/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations", json={
        "metadata": {"name": config}, "webhooks": [{
            "name": hook, "sideEffects": "None", "admissionReviewVersions": ["v1"],
            "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["configmaps"]}],
            "clientConfig": {"url": f"{server.url}/validate", "caBundle": base64.b64encode(server.ca_pem.encode()).decode()},
            "namespaceSelector": {"matchLabels": {"trace-test": tag}}}]})
    assert r.status_code == 201, r.text
    try:
        yield ns, hook, server
    finally:
        admin.delete(f"/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/{config}")
        server.stop()
        admin.delete(f"/api/v1/namespaces/{ns}")


def test_a_create_calling_a_validating_webhook_sends_it_the_trace(admin: httpx.Client, traces: Receiver,
                                                                 hooked: tuple[str, str, AdmissionWebhook]) -> None:
    ns, hook, server = hooked

    def create(name: str, headers: dict[str, str] | None = None) -> httpx.Response:
        return admin.post(f"/api/v1/namespaces/{ns}/configmaps", headers=headers,
                          json={"metadata": {"name": name}, "data": {"a": "b"}})

    wait_for(lambda: create(f"probe-{uuid.uuid4().hex[:6]}").status_code == 201 and server.calls,
             what="the webhook configuration to take effect")
    # untraced at samplingRatePerMillion 0: the front door made no span (tracing.may_record), so the
    # webhook is sent no trace context at all
    assert server.traceparents[-1] == ""
    trace_id, parent, tp = new_traceparent()
    r = create("traced", {"traceparent": tp})
    assert r.status_code == 201, r.text
    sent = next(t for c, t in zip(server.calls, server.traceparents) if c["request"]["name"] == "traced")
    _, sent_trace, sent_parent, flags = sent.split("-")
    assert (sent_trace, flags) == (trace_id, "01")
    wait_for(lambda: any(s["name"] == "admission webhook" for s in traces.trace(trace_id)), timeout=20,
             what="the webhook call's span")
    spans = traces.wait_for(lambda s: s["trace_id"] == trace_id)
    by_id = assert_one_tree(spans, parent)
    call = by_id[sent_parent]  # the webhook was sent the context of the span of its call
    assert call["name"] == "admission webhook" and call["attributes"]["webhook"] == hook
    assert call["attributes"]["http.status_code"] == 200
    assert call["attributes"]["http.url"].startswith(f"{server.url}/validate?timeout=")
    root = only(spans, PROXY, "POST /api/v1/namespaces/{:namespace}/configmaps")
    assert root["span_id"] in ancestors(call, by_id)
