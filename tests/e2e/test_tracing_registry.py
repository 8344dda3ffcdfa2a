"""The registry's and the admission service's spans in one request's trace (issue 27): the handler span named
after the verb, one span per service: decode, strategy validation and the field manager are events on it
(stages that call no other service), the admission service's phase spans (each plug-in an event, each
policy binding a child) and the storage service's spans its children. kubectl sends no traceparent: the admin
client (system:masters, whose sampled traceparent the proxy continues) makes the traced requests."""
from __future__ import annotations

import json
import uuid
from typing import Any

import httpx

from services.cluster.otlpreceiver import Receiver, new_traceparent, tree
from tests.kubectls import deny_in_namespace, namespace, until_refused

Span = dict[str, Any]


def traced(traces: Receiver, trace_id: str, client_span: str, *wanted: tuple[str, str]) -> list[Span]:
    """The request's whole trace once the (service, span name) pairs wanted are in it (each service exports
    in batches of its own), checked to be one tree: a single root (the proxy's, the client's span its
    parent) and every other span's parent in the trace."""
    for service, name in wanted:
        traces.wait_for(lambda s, service=service, name=name: s["trace_id"] == trace_id
                        and s["service"] == service and s["name"] == name)
    spans = traces.wait_for(lambda s: s["trace_id"] == trace_id)
    shown = tree(spans)
    ids = {s["span_id"] for s in spans}
    roots = [s for s in spans if s["parent_span_id"] not in ids]
    assert [(r["service"], r["parent_span_id"]) for r in roots] == [("apiary-proxy", client_span)], shown
    assert set(wanted) <= {(s["service"], s["name"]) for s in spans}, shown
    return spans


def one(spans: list[Span], service: str, name: str, **attributes: Any) -> Span:
    found = [s for s in spans if s["service"] == service and s["name"] == name
             and all(s["attributes"].get(k) == v for k, v in attributes.items())]
    assert len(found) == 1, (service, name, attributes, tree(spans))
    return found[0]


def children(spans: list[Span], parent: Span) -> set[tuple[str, str]]:
    return {(s["service"], s["name"]) for s in spans if s["parent_span_id"] == parent["span_id"]}


def events(span: Span, name: str) -> list[dict[str, Any]]:
    """The attributes of the events `name` on `span` (the stages that made no call), each with its duration."""
    found = [e["attributes"] for e in span["events"] if e["name"] == name]
    assert all(e["duration_ms"] >= 0 for e in found), span
    return found


STORAGE = "apiary-storage"


REGISTRY, ADMISSION = "apiary-registry", "apiary-admission"


def configmap(name: str, data: dict[str, str] | None = None) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": data or {"a": "1"}}


def test_a_create_is_one_trace_through_the_registry_and_admission(admin: httpx.Client,
                                                                  traces: Receiver) -> None:
    trace_id, client_span, tp = new_traceparent()
    name = f"traced-{uuid.uuid4().hex[:6]}"
    r = admin.post("/api/v1/namespaces/default/configmaps", json=configmap(name), headers={"traceparent": tp})
    assert r.status_code == 201, r.text
    spans = traced(traces, trace_id, client_span, (REGISTRY, "Create"), (STORAGE, "apiary.Storage/Create"),
                   (ADMISSION, "mutating admission"))
    create = one(spans, REGISTRY, "Create")
    assert create["attributes"]["audit-id"] == r.headers["audit-id"]
    assert create["attributes"]["resource"] == "configmaps" and create["attributes"]["namespace"] == "default"
    assert create["attributes"]["code"] == 201
    (root,) = [s for s in spans if s["service"] == "apiary-proxy"]  # the proxy's one span: the handler is ours
    assert create["parent_span_id"] == root["span_id"]
    for step in ("decode", "field manager", "strategy validation"):
        assert len(events(create, step)) == 1, (step, tree(spans))
    # the next services' spans are the registry's span's children: no client span between
    assert {(ADMISSION, "mutating admission"), (STORAGE, "apiary.Storage/Create")} <= children(spans, create), tree(spans)
    assert [s["service"] for s in spans if s["service"] == REGISTRY] == [REGISTRY]
    assert one(spans, STORAGE, "apiary.Storage/Create")["attributes"]["key"].endswith(f"/configmaps/default/{name}")
    # the admission service's mutating phase, each plug-in an event on it
    phase = one(spans, ADMISSION, "mutating admission")
    assert "NamespaceLifecycle" in [e["plugin"] for e in events(phase, "admission plugin")], tree(spans)
    admin.delete(f"/api/v1/namespaces/default/configmaps/{name}")


def test_update_and_apply_show_the_field_manager(admin: httpx.Client, traces: Receiver) -> None:
    name = f"traced-{uuid.uuid4().hex[:6]}"
    path = f"/api/v1/namespaces/default/configmaps/{name}"
    assert admin.post("/api/v1/namespaces/default/configmaps", json=configmap(name)).status_code == 201
    try:
        trace_id, client_span, tp = new_traceparent()
        current = admin.get(path).json()
        current["data"] = {"a": "2"}
        r = admin.put(path, json=current, headers={"traceparent": tp})
        assert r.status_code == 200, r.text
        spans = traced(traces, trace_id, client_span, (REGISTRY, "Update"), (STORAGE, "apiary.Storage/Update"))
        update = one(spans, REGISTRY, "Update")
        for step in ("decode", "field manager", "strategy validation"):
            assert len(events(update, step)) == 1, (step, tree(spans))
        assert {(STORAGE, "apiary.Storage/Get"), (STORAGE, "apiary.Storage/Update")} <= children(spans, update)
        assert events(update, "field manager")[0]["operation"] == "Update"

        trace_id, client_span, tp = new_traceparent()
        applied = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"b": "3"}}
        r = admin.patch(path, params={"fieldManager": "tracer"}, content=json.dumps(applied),
                        headers={"traceparent": tp, "content-type": "application/apply-patch+yaml"})
        assert r.status_code == 200, r.text
        spans = traced(traces, trace_id, client_span, (REGISTRY, "Patch"), (STORAGE, "apiary.Storage/Update"))
        patch = one(spans, REGISTRY, "Patch")
        assert len(events(patch, "decode")) == 1, tree(spans)
        # the apply runs where the guaranteed update transforms the object it read: an event on the handler's span
        assert [e["operation"] for e in events(patch, "field manager")] == ["Apply"], tree(spans)
    finally:
        admin.delete(path)


def test_a_validating_policy_is_a_child_of_its_phase(kubectl: Any, admin: httpx.Client,
                                                      traces: Receiver) -> None:
    with namespace(kubectl, "traced-vap") as ns:
        kubectl.run("label", "namespace", ns, f"kubernetes.io/metadata.name={ns}", "--overwrite")
        policy = f"no-forbidden-{ns}"
        kubectl.run("apply", "-f", "-", input=f"""apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata:
  name: {policy}
spec:
  failurePolicy: Fail
  matchConstraints:
    resourceRules:
    - apiGroups: [""]
      apiVersions: ["v1"]
      operations: ["CREATE"]
      resources: ["configmaps"]
  validations:
  - expression: "!has(object.data) || !('forbidden' in object.data)"
""" + deny_in_namespace(policy, ns))
        try:
            until_refused(kubectl, ("-n", ns, "create", "configmap", "probe", "--from-literal=forbidden=1"),
                          ("-n", ns, "delete", "configmap", "probe"))
            trace_id, client_span, tp = new_traceparent()
            r = admin.post(f"/api/v1/namespaces/{ns}/configmaps", json=configmap("allowed"),
                           headers={"traceparent": tp})
            assert r.status_code == 201, r.text
            spans = traced(traces, trace_id, client_span, (ADMISSION, "validating admission"),
                           (ADMISSION, "admission policy"))
            phase = one(spans, ADMISSION, "validating admission")
            assert phase["parent_span_id"] == one(spans, REGISTRY, "Create")["span_id"]
            assert "ValidatingAdmissionPolicy" in [e["plugin"] for e in events(phase, "admission plugin")]
            # the plug-in is an event on its phase's span; each policy binding it evaluates a child span
            bound = one(spans, ADMISSION, "admission policy", policy=policy)
            assert bound["parent_span_id"] == phase["span_id"]
            assert bound["attributes"]["binding"] == policy
            assert bound["attributes"]["kind"] == "ValidatingAdmissionPolicy"
        finally:
            kubectl.run("delete", "validatingadmissionpolicybinding", policy, check=False)
            kubectl.run("delete", "validatingadmissionpolicy", policy, check=False)


def test_a_list_reads_storage_under_its_span(admin: httpx.Client, traces: Receiver) -> None:
    trace_id, client_span, tp = new_traceparent()
    r = admin.get("/api/v1/namespaces/default/configmaps", params={"limit": "5"}, headers={"traceparent": tp})
    assert r.status_code == 200
    spans = traced(traces, trace_id, client_span, (REGISTRY, "List"), (STORAGE, "apiary.Storage/List"))
    listed = one(spans, STORAGE, "apiary.Storage/List")
    assert listed["parent_span_id"] == one(spans, REGISTRY, "List")["span_id"]
    assert listed["attributes"]["key"].endswith("/configmaps/default/")


def test_a_watch_has_a_span_for_its_setup(admin: httpx.Client, traces: Receiver) -> None:
    trace_id, client_span, tp = new_traceparent()
    with admin.stream("GET", "/api/v1/namespaces/default/configmaps",
                      params={"watch": "1", "timeoutSeconds": "1"}, headers={"traceparent": tp}) as r:
        assert r.status_code == 200
        r.read()
    spans = traced(traces, trace_id, client_span, (REGISTRY, "Watch"))
    watch = one(spans, REGISTRY, "Watch")
    assert watch["attributes"]["resource"] == "configmaps" and watch["attributes"]["namespace"] == "default"
