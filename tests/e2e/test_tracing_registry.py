"""The registry's and the admission service's spans in one request's trace (issue 27): the handler span named
after the verb, with decode, admission (each phase, each plug-in and policy binding below it), strategy
validation, the field manager and the storage calls as its children. kubectl sends no traceparent: the admin
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


REGISTRY, ADMISSION = "apiary-registry", "apiary-admission"


def configmap(name: str, data: dict[str, str] | None = None) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": data or {"a": "1"}}


def test_a_create_is_one_trace_through_the_registry_and_admission(admin: httpx.Client,
                                                                  traces: Receiver) -> None:
    trace_id, client_span, tp = new_traceparent()
    name = f"traced-{uuid.uuid4().hex[:6]}"
    r = admin.post("/api/v1/namespaces/default/configmaps", json=configmap(name), headers={"traceparent": tp})
    assert r.status_code == 201, r.text
    spans = traced(traces, trace_id, client_span, (REGISTRY, "Create"), (REGISTRY, "storage Create"),
                   (ADMISSION, "mutating admission"))
    create = one(spans, REGISTRY, "Create")
    assert create["attributes"]["audit-id"] == r.headers["audit-id"]
    assert create["attributes"]["resource"] == "configmaps" and create["attributes"]["namespace"] == "default"
    assert create["attributes"]["code"] == 201
    assert {(REGISTRY, n) for n in ("decode", "admission Admit", "field manager", "strategy validation",
                                    "storage Create")} <= children(spans, create), tree(spans)
    assert one(spans, REGISTRY, "storage Create")["attributes"]["key"].endswith(f"/configmaps/default/{name}")
    # the admission service's mutating phase runs under the registry's call to it, each plug-in a child
    admit = one(spans, REGISTRY, "admission Admit")
    phase = one(spans, ADMISSION, "mutating admission")
    assert phase["parent_span_id"] == admit["span_id"]
    lifecycle = one(spans, ADMISSION, "admission plugin", plugin="NamespaceLifecycle")
    assert lifecycle["parent_span_id"] == phase["span_id"]
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
        spans = traced(traces, trace_id, client_span, (REGISTRY, "Update"), (REGISTRY, "storage Update"))
        update = one(spans, REGISTRY, "Update")
        assert {(REGISTRY, n) for n in ("decode", "field manager", "strategy validation", "storage Get",
                                        "storage Update")} <= children(spans, update), tree(spans)
        assert one(spans, REGISTRY, "field manager")["attributes"]["operation"] == "Update"

        trace_id, client_span, tp = new_traceparent()
        applied = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"b": "3"}}
        r = admin.patch(path, params={"fieldManager": "tracer"}, content=json.dumps(applied),
                        headers={"traceparent": tp, "content-type": "application/apply-patch+yaml"})
        assert r.status_code == 200, r.text
        spans = traced(traces, trace_id, client_span, (REGISTRY, "Patch"), (REGISTRY, "storage Update"))
        patch = one(spans, REGISTRY, "Patch")
        assert (REGISTRY, "decode") in children(spans, patch), tree(spans)
        # the apply runs where the guaranteed update transforms the object it read
        assert one(spans, REGISTRY, "field manager", operation="Apply")["parent_span_id"] == patch["span_id"]
    finally:
        admin.delete(path)


def test_a_validating_policy_is_a_child_of_its_plugin(kubectl: Any, admin: httpx.Client,
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
            spans = traced(traces, trace_id, client_span, (REGISTRY, "admission Validate"),
                           (ADMISSION, "admission policy"))
            validate = one(spans, REGISTRY, "admission Validate")
            assert validate["parent_span_id"] == one(spans, REGISTRY, "Create")["span_id"]
            phase = one(spans, ADMISSION, "validating admission")
            assert phase["parent_span_id"] == validate["span_id"]
            plugin = one(spans, ADMISSION, "admission plugin", plugin="ValidatingAdmissionPolicy")
            assert plugin["parent_span_id"] == phase["span_id"]
            bound = one(spans, ADMISSION, "admission policy", policy=policy)
            assert bound["parent_span_id"] == plugin["span_id"]
            assert bound["attributes"]["binding"] == policy
            assert bound["attributes"]["kind"] == "ValidatingAdmissionPolicy"
        finally:
            kubectl.run("delete", "validatingadmissionpolicybinding", policy, check=False)
            kubectl.run("delete", "validatingadmissionpolicy", policy, check=False)


def test_a_list_reads_storage_under_its_span(admin: httpx.Client, traces: Receiver) -> None:
    trace_id, client_span, tp = new_traceparent()
    r = admin.get("/api/v1/namespaces/default/configmaps", params={"limit": "5"}, headers={"traceparent": tp})
    assert r.status_code == 200
    spans = traced(traces, trace_id, client_span, (REGISTRY, "List"), (REGISTRY, "storage List"))
    listed = one(spans, REGISTRY, "storage List")
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
