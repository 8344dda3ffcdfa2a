"""Admission of custom resources end to end with kubectl: a real HTTPS webhook (tools/fakeservers.py) whose rules
name a CRD's group and resource sees create, update, delete and /status of custom objects with kube's
AdmissionReview (object, oldObject, kind, resource, subResource; a request in another version of the CRD
matched through matchPolicy Equivalent), and a ValidatingAdmissionPolicy's CEL rule refuses a custom object."""
from __future__ import annotations

import base64
import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.kubectls import RUN, namespace, refused, until_refused
from tests.waiting import wait_for
from tools.fakeservers import AdmissionWebhook

pytestmark = pytest.mark.stack
GROUP = f"adm{RUN}.example.com"
NAME = f"widgets.{GROUP}"


def crd() -> dict[str, Any]:
    schema = {"type": "object", "properties": {
        "spec": {"type": "object", "properties": {"size": {"type": "integer"}, "color": {"type": "string"}}},
        "status": {"type": "object", "properties": {"phase": {"type": "string"}}}}}
    return {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition", "metadata": {"name": NAME},
            "spec": {"group": GROUP, "scope": "Namespaced",
                     "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
                     "versions": [{"name": v, "served": True, "storage": v == "v1",
                                   "schema": {"openAPIV3Schema": schema}, "subresources": {"status": {}}}
                                  for v in ("v1", "v2")]}}


def widget(name: str, version: str = "v1", **spec: Any) -> str:
    return yaml.safe_dump({"apiVersion": f"{GROUP}/{version}", "kind": "Widget", "metadata": {"name": name},
                           "spec": {"size": 1, **spec}})


@pytest.fixture(scope="module", autouse=True)
def widgets(kubectl: Any) -> Iterator[None]:
    kubectl.run("apply", "-f", "-", input=json.dumps(crd()))
    kubectl.run("wait", "--for=condition=Established", f"crd/{NAME}", "--timeout=30s")
    wait_for(lambda: kubectl.run("get", f"widgets.{GROUP}", "-A", check=False).returncode == 0, 10,
             "widgets served")
    yield
    kubectl.run("delete", "crd", NAME, "--wait=false", check=False)


def _patch(ops: list[dict[str, Any]]) -> dict[str, Any]:
    return {"patchType": "JSONPatch", "patch": base64.b64encode(json.dumps(ops).encode()).decode()}


def decide(req: dict[str, Any]) -> dict[str, Any]:
    """Refuses a widget larger than 10, labels every created one, allows the rest."""
    obj = req.get("object") or {}
    if ((obj.get("spec") or {}).get("size") or 0) > 10:
        return {"allowed": False, "status": {"code": 403, "message": "widgets are at most 10 big"}}
    if req["operation"] == "CREATE":
        return {"allowed": True, **_patch([{"op": "add", "path": "/metadata/labels", "value": {"seen": "webhook"}}])}
    return {"allowed": True}


def test_webhook_sees_custom_objects(kubectl: Any, admin: Any, tmp_path: Path) -> None:
    hook = AdmissionWebhook(tmp_path, "widgets", decide).start()
    config = f"crd-hook-{uuid.uuid4().hex[:6]}"
    with namespace(kubectl, "crd-adm") as ns:
        kubectl.run("label", "namespace", ns, f"crd-hook={config}")
        r = admin.post("/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations", json={
            "metadata": {"name": config}, "webhooks": [{
                "name": f"widgets.{config}.apiary.test", "sideEffects": "None", "admissionReviewVersions": ["v1"],
                "clientConfig": {"url": f"{hook.url}/widgets",
                                 "caBundle": base64.b64encode(hook.ca_pem.encode()).decode()},
                "namespaceSelector": {"matchLabels": {"crd-hook": config}},
                "rules": [{"operations": ["CREATE", "UPDATE", "DELETE"], "apiGroups": [GROUP],
                           "apiVersions": ["v1"], "resources": ["widgets", "widgets/status"]}]}]})
        assert r.status_code == 201, r.text
        try:
            err = until_refused(kubectl, ("-n", ns, "create", "-f", "-"), ("-n", ns, "delete", "widget", "big"),
                                input=widget("big", size=11), what="the webhook to take effect")
            assert 'admission webhook "widgets.' in err.stderr and "widgets are at most 10 big" in err.stderr
            hook.calls.clear()

            kubectl.run("-n", ns, "create", "-f", "-", input=widget("w1", size=3))
            got = json.loads(kubectl.run("-n", ns, "get", f"widgets.{GROUP}", "w1", "-o", "json").stdout)
            assert got["metadata"]["labels"] == {"seen": "webhook"}
            created = hook.calls[-1]["request"]
            assert created["operation"] == "CREATE" and created["namespace"] == ns and created["name"] == "w1"
            assert created["kind"] == {"group": GROUP, "version": "v1", "kind": "Widget"}
            assert created["resource"] == {"group": GROUP, "version": "v1", "resource": "widgets"}
            assert created["object"]["spec"] == {"size": 3} and created.get("oldObject") is None
            assert "subResource" not in created

            kubectl.run("-n", ns, "patch", f"widgets.{GROUP}", "w1", "--type=merge", "-p", '{"spec":{"size":4}}')
            updated = hook.calls[-1]["request"]
            assert updated["operation"] == "UPDATE"
            assert (updated["oldObject"]["spec"]["size"], updated["object"]["spec"]["size"]) == (3, 4)
            assert refused(kubectl, "-n", ns, "patch", f"widgets.{GROUP}", "w1", "--type=merge", "-p",
                           '{"spec":{"size":12}}').count("widgets are at most 10 big") == 1

            kubectl.run("-n", ns, "patch", f"widgets.{GROUP}", "w1", "--subresource=status", "--type=merge",
                        "-p", '{"status":{"phase":"Ready"}}')
            status = hook.calls[-1]["request"]
            assert status["subResource"] == "status" and status["requestSubResource"] == "status"
            assert status["kind"]["kind"] == "Widget" and status["resource"]["resource"] == "widgets"
            assert status["object"]["status"] == {"phase": "Ready"} and "status" not in status["oldObject"]

            # a request in v2 is matched through v1 (matchPolicy Equivalent): the webhook sees it in v1
            kubectl.run("-n", ns, "create", "-f", "-", input=widget("w2", "v2", size=5))
            other = hook.calls[-1]["request"]
            assert other["kind"] == {"group": GROUP, "version": "v1", "kind": "Widget"}
            assert other["requestKind"] == {"group": GROUP, "version": "v2", "kind": "Widget"}
            assert other["requestResource"]["version"] == "v2"
            assert other["object"]["apiVersion"] == f"{GROUP}/v1"
            got = json.loads(kubectl.run("-n", ns, "get", f"widgets.v2.{GROUP}", "w2", "-o", "json").stdout)
            assert got["apiVersion"] == f"{GROUP}/v2" and got["metadata"]["labels"] == {"seen": "webhook"}

            kubectl.run("-n", ns, "delete", f"widgets.{GROUP}", "w1")
            deleted = hook.calls[-1]["request"]
            assert deleted["operation"] == "DELETE" and deleted["name"] == "w1"
            assert deleted["oldObject"]["spec"]["size"] == 4 and deleted.get("object") is None
            assert deleted["options"]["kind"] == "DeleteOptions"
        finally:
            admin.delete(f"/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/{config}")
            hook.stop()


def policy(name: str, ns: str) -> str:
    return f"""apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata:
  name: {name}
spec:
  failurePolicy: Fail
  matchConstraints:
    resourceRules:
    - apiGroups: ["{GROUP}"]
      apiVersions: ["*"]
      operations: ["CREATE", "UPDATE"]
      resources: ["widgets"]
  validations:
  - expression: "!has(object.spec.color) || object.spec.color != 'red'"
    messageExpression: "'widget ' + object.metadata.name + ' may not be red'"
    reason: Invalid
  - expression: "oldObject == null || object.spec.size >= oldObject.spec.size"
    message: widgets do not shrink
  - expression: "!has(object.spec.shape) || object.spec.shape != 'square'"
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata:
  name: {name}-binding
spec:
  policyName: {name}
  validationActions: [Deny]
  matchResources:
    namespaceSelector:
      matchLabels:
        kubernetes.io/metadata.name: {ns}
"""


def test_policy_refuses_custom_objects(kubectl: Any) -> None:
    with namespace(kubectl, "crd-vap") as ns:
        name = f"no-red-{ns}"
        kubectl.run("apply", "-f", "-", input=policy(name, ns))
        try:
            err = until_refused(kubectl, ("-n", ns, "create", "-f", "-"), ("-n", ns, "delete", "widget", "red"),
                                input=widget("red", color="red"))
            # kube's admission.NewForbidden names the resource; with reason Invalid kubectl prints it as a 422
            assert (f'The widgets "red" is invalid: : ValidatingAdmissionPolicy \'{name}\' with binding '
                    f"'{name}-binding' denied request: widget red may not be red") in err.stderr, err.stderr
            kubectl.run("-n", ns, "create", "-f", "-", input=widget("blue", color="blue", size=5))
            err = refused(kubectl, "-n", ns, "patch", f"widgets.{GROUP}", "blue", "--type=merge", "-p",
                          '{"spec":{"size":2}}')
            assert "denied request: widgets do not shrink" in err
            kubectl.run("-n", ns, "patch", f"widgets.{GROUP}", "blue", "--type=merge", "-p", '{"spec":{"size":6}}')
            # in v2 too (the rule names every version)
            err = refused(kubectl, "-n", ns, "create", "-f", "-", input=widget("red2", "v2", color="red"))
            assert "widget red2 may not be red" in err
            # type checking reads the CRD's schema (a rule with a wildcard is not checked, as in kube: v1 named)
            kubectl.run("patch", "validatingadmissionpolicy", name, "--type=json", "-p", json.dumps([
                {"op": "replace", "path": "/spec/matchConstraints/resourceRules/0/apiVersions", "value": ["v1"]}]))

            def warnings() -> Any:
                got = json.loads(kubectl.run("get", "validatingadmissionpolicy", name, "-o", "json").stdout)
                status = got.get("status") or {}
                return status.get("observedGeneration") == got["metadata"]["generation"] and \
                    (status.get("typeChecking") or {}).get("expressionWarnings")
            found = wait_for(warnings, what="the policy's type checking")
            assert [w["fieldRef"] for w in found] == ["spec.validations[2].expression"]
            assert found[0]["warning"].startswith(f"{GROUP}/v1, Kind=Widget: ERROR: <input>:1:17: undefined field "
                                                  "'shape'"), found
        finally:
            kubectl.run("delete", "validatingadmissionpolicybinding", f"{name}-binding", check=False)
            kubectl.run("delete", "validatingadmissionpolicy", name, check=False)


def test_mutating_policy_with_custom_params(kubectl: Any) -> None:
    """A MutatingAdmissionPolicy on widgets whose paramKind is itself a custom kind (Widget): a JSON patch and an
    apply configuration set the created widget's color from the params object."""
    with namespace(kubectl, "crd-map") as ns:
        name = f"paint-{ns}"
        kubectl.run("-n", ns, "create", "-f", "-", input=widget("palette", color="green"))
        kubectl.run("apply", "-f", "-", input=f"""apiVersion: admissionregistration.k8s.io/v1beta1
kind: MutatingAdmissionPolicy
metadata:
  name: {name}
spec:
  paramKind:
    apiVersion: {GROUP}/v1
    kind: Widget
  matchConstraints:
    resourceRules:
    - apiGroups: ["{GROUP}"]
      apiVersions: ["v1"]
      operations: ["CREATE"]
      resources: ["widgets"]
  matchConditions:
  - name: not-the-palette
    expression: "object.metadata.name != 'palette'"
  mutations:
  - patchType: ApplyConfiguration
    applyConfiguration:
      expression: >
        Object{{spec: Object.spec{{color: params.spec.color}}}}
  - patchType: JSONPatch
    jsonPatch:
      expression: >
        [JSONPatch{{op: "add", path: "/metadata/annotations", value: {{"painted-from": params.metadata.name}}}}]
---
apiVersion: admissionregistration.k8s.io/v1beta1
kind: MutatingAdmissionPolicyBinding
metadata:
  name: {name}
spec:
  policyName: {name}
  paramRef:
    name: palette
    namespace: {ns}
    parameterNotFoundAction: Deny
  matchResources:
    namespaceSelector:
      matchLabels:
        kubernetes.io/metadata.name: {ns}
""")
        try:
            def painted() -> Any:
                kubectl.run("-n", ns, "delete", f"widgets.{GROUP}", "w", "--ignore-not-found")
                kubectl.run("-n", ns, "create", "-f", "-", input=widget("w", "v2", size=2))
                got = json.loads(kubectl.run("-n", ns, "get", f"widgets.v1.{GROUP}", "w", "-o", "json").stdout)
                return got if got["spec"].get("color") else None
            got = wait_for(painted, what="the mutating policy")
            assert got["spec"] == {"size": 2, "color": "green"}
            assert got["metadata"]["annotations"] == {"painted-from": "palette"}
        finally:
            kubectl.run("delete", "mutatingadmissionpolicybinding", name, check=False)
            kubectl.run("delete", "mutatingadmissionpolicy", name, check=False)
