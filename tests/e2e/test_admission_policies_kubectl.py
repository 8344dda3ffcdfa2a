"""ValidatingAdmissionPolicy and MutatingAdmissionPolicy with kubectl, on the real stack."""
from __future__ import annotations

import json
import uuid
from typing import Any

import httpx

from tests.kubectls import deny_in_namespace, until_refused
from tests.waiting import wait_for

RULES = """    resourceRules:
    - apiGroups: [""]
      apiVersions: ["v1"]
      operations: ["CREATE", "UPDATE"]
      resources: ["configmaps"]
"""


def max_keys_policy(name: str, ns: str, actions: str, extra: str = "") -> str:
    """A policy limiting configmaps' data keys to params.data.maxKeys, bound to namespace ns with actions."""
    return f"""apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata:
  name: {name}
spec:
  failurePolicy: Fail
  paramKind:
    apiVersion: v1
    kind: ConfigMap
  matchConstraints:
{RULES}  validations:
  - expression: "!has(object.data) || size(object.data) <= int(params.data.maxKeys)"
    messageExpression: "'configmap ' + object.metadata.name + ' has ' + string(size(object.data)) + ' keys, at most ' + params.data.maxKeys + ' allowed'"
    reason: Forbidden
{extra}---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata:
  name: {name}-binding
spec:
  policyName: {name}
  validationActions: [{actions}]
  paramRef:
    name: limits
    namespace: {ns}
    parameterNotFoundAction: Deny
  matchResources:
    namespaceSelector:
      matchLabels:
        kubernetes.io/metadata.name: {ns}
    objectSelector:
      matchExpressions:
      - {{key: exempt, operator: DoesNotExist}}
"""


def new_namespace(kubectl: Any, prefix: str) -> str:
    ns = f"{prefix}-{uuid.uuid4().hex[:6]}"
    kubectl.run("create", "namespace", ns)
    kubectl.run("label", "namespace", ns, f"kubernetes.io/metadata.name={ns}", "--overwrite")
    kubectl.run("-n", ns, "create", "configmap", "limits", "--from-literal=maxKeys=2")
    return ns


def create_until_refused(kubectl: Any, ns: str, name: str, *args: str) -> Any:
    """Create a configmap (deleting it again) until the policy, which arrives by watch, refuses it."""
    return until_refused(kubectl, ("-n", ns, "create", "configmap", name, *args),
                         ("-n", ns, "delete", "configmap", name))


def test_deny_with_params_message_expression_and_selectors(kubectl: Any, admin: httpx.Client) -> None:
    ns = new_namespace(kubectl, "vap-deny")
    name = f"max-keys-{ns}"
    kubectl.run("apply", "-f", "-", input=max_keys_policy(name, ns, "Deny"))
    three = ("--from-literal=a=1", "--from-literal=b=2", "--from-literal=c=3")
    refused = create_until_refused(kubectl, ns, "big", *three)
    assert (f'configmaps "big" is forbidden: ValidatingAdmissionPolicy \'{name}\' with binding \'{name}-binding\' '
            "denied request: configmap big has 3 keys, at most 2 allowed") in refused.stderr
    # the reason sets the code; the Status is kube's
    r = admin.post(f"/api/v1/namespaces/{ns}/configmaps", json={
        "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "big"}, "data": {"a": "1", "b": "2", "c": "3"}})
    assert r.status_code == 403, r.text
    body = r.json()
    assert body["reason"] == "Forbidden" and body["details"]["causes"][0]["message"].startswith(
        f"ValidatingAdmissionPolicy '{name}'")
    # within the limit: created; the object selector exempts; the namespace selector limits to ns
    kubectl.run("-n", ns, "create", "configmap", "small", "--from-literal=a=1", "--from-literal=b=2")
    kubectl.run("-n", ns, "apply", "-f", "-", input=(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: exempted\n  labels: {exempt: 'yes'}\n"
        "data: {a: '1', b: '2', c: '3'}\n"))
    other = f"vap-other-{uuid.uuid4().hex[:6]}"
    kubectl.run("create", "namespace", other)
    kubectl.run("-n", other, "create", "configmap", "big", *three)
    # the limit comes from the params: raised to 3, the create goes through
    kubectl.run("-n", ns, "patch", "configmap", "limits", "-p", '{"data":{"maxKeys":"3"}}')
    wait_for(lambda: kubectl.run("-n", ns, "create", "configmap", "big", *three, check=False).returncode == 0,
             what="the new limit")
    # params gone and parameterNotFoundAction Deny: refused
    kubectl.run("-n", ns, "delete", "configmap", "limits")
    refused = create_until_refused(kubectl, ns, "any")
    assert "no params found for policy binding with `Deny` parameterNotFoundAction" in refused.stderr
    kubectl.run("delete", "validatingadmissionpolicybinding", f"{name}-binding")
    kubectl.run("delete", "validatingadmissionpolicy", name)
    kubectl.run("delete", "namespace", ns, other, "--wait=false")


def audit_events(stack: Any) -> list[dict[str, Any]]:
    path = stack.logs / "audit.log"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


def test_warn_and_audit(kubectl: Any, stack: Any) -> None:
    ns = new_namespace(kubectl, "vap-warn")
    name = f"max-keys-{ns}"
    kubectl.run("apply", "-f", "-", input=max_keys_policy(name, ns, "Warn, Audit"))
    three = ("--from-literal=a=1", "--from-literal=b=2", "--from-literal=c=3")

    def warned() -> Any:
        proc = kubectl.run("-n", ns, "create", "configmap", "big", *three)
        kubectl.run("-n", ns, "delete", "configmap", "big")
        return proc if "Validation failed" in proc.stderr else None
    proc = wait_for(warned, what="the warning")
    assert (f"Warning: Validation failed for ValidatingAdmissionPolicy '{name}' with binding '{name}-binding': "
            "configmap big has 3 keys, at most 2 allowed") in proc.stderr
    # Audit: the failure is in the create's audit event, as kube's validation_failure annotation

    def audited() -> Any:
        for ev in audit_events(stack):
            ref = ev.get("objectRef") or {}
            value = (ev.get("annotations") or {}).get("validation.policy.admission.k8s.io/validation_failure")
            if value and ref.get("namespace") == ns and ev.get("stage") == "ResponseComplete":
                return json.loads(value)
        return None
    failures = wait_for(audited, what="the audit event")
    assert failures[0] == {"message": "configmap big has 3 keys, at most 2 allowed", "policy": name,
                           "binding": f"{name}-binding", "expressionIndex": 0,
                           "validationActions": ["Warn", "Audit"]}
    kubectl.run("delete", "validatingadmissionpolicybinding", f"{name}-binding")
    kubectl.run("delete", "validatingadmissionpolicy", name)
    kubectl.run("delete", "namespace", ns, "--wait=false")


def test_refused_request_keeps_audit_annotations_and_warnings(kubectl: Any, stack: Any) -> None:
    """A create refused by one binding (Deny, Audit) and warned by another (Warn): kubectl prints the
    warning with the refusal, and the refused request's audit event has the validation failure."""
    ns = new_namespace(kubectl, "vap-refused")
    name = f"max-keys-{ns}"
    kubectl.run("apply", "-f", "-", input=max_keys_policy(name, ns, "Deny, Audit"))
    kubectl.run("apply", "-f", "-", input=f"""apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata:
  name: {name}-warn
spec:
  policyName: {name}
  validationActions: [Warn]
  paramRef:
    name: limits
    namespace: {ns}
    parameterNotFoundAction: Deny
  matchResources:
    namespaceSelector:
      matchLabels:
        kubernetes.io/metadata.name: {ns}
""")
    three = ("--from-literal=a=1", "--from-literal=b=2", "--from-literal=c=3")

    proc = until_refused(kubectl, ("-n", ns, "create", "configmap", "big", *three),
                         ("-n", ns, "delete", "configmap", "big"), accept=lambda p: "Warning:" in p.stderr,
                         what="both bindings")
    assert (f"Warning: Validation failed for ValidatingAdmissionPolicy '{name}' with binding '{name}-warn': "
            "configmap big has 3 keys, at most 2 allowed") in proc.stderr
    assert f"binding '{name}-binding' denied request" in proc.stderr

    def audited() -> Any:
        for ev in audit_events(stack):
            ref = ev.get("objectRef") or {}
            value = (ev.get("annotations") or {}).get("validation.policy.admission.k8s.io/validation_failure")
            if value and ref.get("namespace") == ns and ev.get("stage") == "ResponseComplete":
                return ev
        return None
    ev = wait_for(audited, what="the refused create's audit event")
    assert ev["responseStatus"]["code"] == 403 and ev["verb"] == "create"
    assert json.loads(ev["annotations"]["validation.policy.admission.k8s.io/validation_failure"])[0] == {
        "message": "configmap big has 3 keys, at most 2 allowed", "policy": name, "binding": f"{name}-binding",
        "expressionIndex": 0, "validationActions": ["Deny", "Audit"]}
    kubectl.run("delete", "validatingadmissionpolicybinding", f"{name}-binding", f"{name}-warn")
    kubectl.run("delete", "validatingadmissionpolicy", name)
    kubectl.run("delete", "namespace", ns, "--wait=false")


def test_policy_validation_and_failure_policy(kubectl: Any) -> None:
    ns = new_namespace(kubectl, "vap-fail")
    # a syntax error is refused at create, with kube's field path
    bad = kubectl.run("apply", "-f", "-", check=False, input=f"""apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata:
  name: broken-{ns}
spec:
  matchConstraints:
{RULES}  validations:
  - expression: "size(object.data) <"
""")
    assert bad.returncode != 0
    assert "spec.validations[0].expression: Invalid value: \"size(object.data) <\": compilation failed:" in bad.stderr
    bad = kubectl.run("apply", "-f", "-", check=False, input=f"""apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata:
  name: broken-{ns}
spec:
  policyName: p
  validationActions: [Deny, Warn]
""")
    assert bad.returncode != 0 and "must not contain both Deny and Warn" in bad.stderr

    def policy(name: str, failure_policy: str) -> str:
        return f"""apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata:
  name: {name}
spec:
  failurePolicy: {failure_policy}
  matchConstraints:
{RULES}  validations:
  - expression: "object.nonexistent == 'x'"
{deny_in_namespace(name, ns)}"""
    fail, ignore = f"fail-{ns}", f"ignore-{ns}"
    kubectl.run("apply", "-f", "-", input=policy(ignore, "Ignore"))
    kubectl.run("apply", "-f", "-", input=policy(fail, "Fail"))
    # the type checker reports the unknown field in status, as kube's does where the schema is known
    status = wait_for(lambda: kubectl.run("get", "validatingadmissionpolicy", fail, "-o",
                                          "jsonpath={.status.typeChecking.expressionWarnings[0].warning}").stdout,
                      what="status.typeChecking")
    assert "v1, Kind=ConfigMap: ERROR: <input>:1:7: undefined field 'nonexistent'" in status
    refused = create_until_refused(kubectl, ns, "c1")
    assert (f"ValidatingAdmissionPolicy '{fail}' with binding '{fail}' denied request: "
            "expression 'object.nonexistent == 'x'' resulted in error: no such key: nonexistent") in refused.stderr
    assert ignore not in refused.stderr
    kubectl.run("delete", "validatingadmissionpolicybinding", fail)
    wait_for(lambda: kubectl.run("-n", ns, "create", "configmap", "c2", check=False).returncode == 0,
             what="the Ignore policy alone to let the create through")
    kubectl.run("delete", "validatingadmissionpolicybinding", ignore)
    kubectl.run("delete", "validatingadmissionpolicy", fail, ignore)
    kubectl.run("delete", "namespace", ns, "--wait=false")


def test_mutating_policies_json_patch_and_apply_configuration(kubectl: Any) -> None:
    ns = new_namespace(kubectl, "map")
    name = f"stamp-{ns}"
    kubectl.run("apply", "-f", "-", input=f"""apiVersion: admissionregistration.k8s.io/v1
kind: MutatingAdmissionPolicy
metadata:
  name: {name}
spec:
  matchConstraints:
{RULES}  mutations:
  - patchType: JSONPatch
    jsonPatch:
      expression: >
        (has(object.metadata.annotations) ? [] :
          [JSONPatch{{op: "add", path: "/metadata/annotations", value: {{}}}}]) +
        [JSONPatch{{op: "add", path: "/metadata/annotations/" + jsonpatch.escapeKey("example.com/keys"),
                   value: string(has(object.data) ? size(object.data) : 0)}}]
  - patchType: ApplyConfiguration
    applyConfiguration:
      expression: >
        Object{{metadata: Object.metadata{{labels: {{"stamped-on": request.operation.lowerAscii() + "-" + "a.b".split(".")[1]}}}}}}
---
apiVersion: admissionregistration.k8s.io/v1beta1
kind: MutatingAdmissionPolicyBinding
metadata:
  name: {name}
spec:
  policyName: {name}
  matchResources:
    namespaceSelector:
      matchLabels:
        kubernetes.io/metadata.name: {ns}
""")

    def stamped() -> Any:
        kubectl.run("-n", ns, "delete", "configmap", "cm", "--ignore-not-found")
        out = kubectl.run("-n", ns, "create", "configmap", "cm", "--from-literal=a=1", "--from-literal=b=2",
                          "-o", "jsonpath={.metadata.annotations}|{.metadata.labels}").stdout
        return out if "example.com/keys" in out else None
    annotations, labels = wait_for(stamped, what="the mutating policy").split("|")
    assert '"example.com/keys":"2"' in annotations
    assert '"stamped-on":"create-b"' in labels
    got = kubectl.run("-n", ns, "get", "configmap", "cm", "-o",
                      "jsonpath={.metadata.annotations.example\\.com/keys}").stdout
    assert got == "2"
    kubectl.run("delete", "mutatingadmissionpolicybinding", name)
    kubectl.run("delete", "mutatingadmissionpolicy", name)
    kubectl.run("delete", "namespace", ns, "--wait=false")


def test_mutating_policy_versions(kubectl: Any) -> None:
    """v1, v1beta1 and v1alpha1 are one object: each read converted to the version asked for; v1 preferred."""
    name = f"versions-{uuid.uuid4().hex[:6]}"
    kubectl.run("create", "-f", "-", input=f"""apiVersion: admissionregistration.k8s.io/v1alpha1
kind: MutatingAdmissionPolicy
metadata:
  name: {name}
spec:
  reinvocationPolicy: IfNeeded
  matchConstraints:
{RULES}  mutations:
  - patchType: JSONPatch
    jsonPatch:
      expression: "[]"
""")
    try:
        group = "admissionregistration.k8s.io"
        assert kubectl.run("get", "mutatingadmissionpolicy", name, "-o", "jsonpath={.apiVersion}").stdout == \
            f"{group}/v1"
        for version in ("v1beta1", "v1alpha1"):
            got = json.loads(kubectl.run("get", f"mutatingadmissionpolicies.{version}.{group}", name,
                                         "-o", "json").stdout)
            assert got["apiVersion"] == f"{group}/{version}"
            assert got["spec"]["reinvocationPolicy"] == "IfNeeded" and got["spec"]["failurePolicy"] == "Fail"
        out = kubectl.run("get", "mutatingadmissionpolicies", name).stdout
        assert out.split("\n")[0].split() == ["NAME", "MUTATIONS", "PARAMKIND", "AGE"]
        assert "reinvocationPolicy" in kubectl.run("explain", "mutatingadmissionpolicy.spec").stdout
        assert "VERSION:    v1beta1" in kubectl.run("explain", "mutatingadmissionpolicybinding",
                                                    f"--api-version={group}/v1beta1").stdout
        # an update through v1beta1 of what v1alpha1 created
        kubectl.run("label", f"mutatingadmissionpolicies.v1beta1.{group}", name, "changed=yes")
        assert kubectl.run("get", "mutatingadmissionpolicy", name, "-o",
                           "jsonpath={.metadata.labels.changed}").stdout == "yes"
    finally:
        kubectl.run("delete", "mutatingadmissionpolicy", name, "--ignore-not-found")


def test_kube_cel_libraries_in_a_policy(kubectl: Any) -> None:
    """quantity(), cidr()/ip() and url() in a ValidatingAdmissionPolicy's validations (services/common/cellib.py)."""
    ns = new_namespace(kubectl, "vap-cel")
    name = f"cel-libs-{ns}"
    kubectl.run("apply", "-f", "-", input=f"""apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata:
  name: {name}
spec:
  failurePolicy: Fail
  matchConstraints:
{RULES}  validations:
  - expression: "!has(object.data.memory) || quantity(object.data.memory).isLessThan(quantity('1Gi'))"
    message: "memory must be less than 1Gi"
  - expression: "!has(object.data.address) || cidr('10.0.0.0/8').containsIP(object.data.address)"
    message: "address must be in 10.0.0.0/8"
  - expression: "!has(object.data.endpoint) || url(object.data.endpoint).getScheme() == 'https'"
    message: "endpoint must be https"
{deny_in_namespace(name, ns)}""")
    refused = create_until_refused(kubectl, ns, "big", "--from-literal=memory=2Gi")
    assert "memory must be less than 1Gi" in refused.stderr
    kubectl.run("-n", ns, "create", "configmap", "ok", "--from-literal=memory=1000Mi",
                "--from-literal=address=10.1.2.3", "--from-literal=endpoint=https://example.com/x")
    out = kubectl.run("-n", ns, "create", "configmap", "far", "--from-literal=address=192.168.0.1", check=False)
    assert out.returncode != 0 and "address must be in 10.0.0.0/8" in out.stderr
    out = kubectl.run("-n", ns, "create", "configmap", "plain", "--from-literal=endpoint=http://example.com",
                      check=False)
    assert out.returncode != 0 and "endpoint must be https" in out.stderr
    kubectl.run("delete", "validatingadmissionpolicybinding", name)
    kubectl.run("delete", "validatingadmissionpolicy", name)
    kubectl.run("delete", "namespace", ns, "--wait=false")


def test_authorizer_checks_the_requesting_user(kubectl: Any, tokens: dict[str, str]) -> None:
    ns = new_namespace(kubectl, "vap-authz")
    name = f"authz-{ns}"
    kubectl.run("-n", ns, "create", "role", "cm-writer", "--verb=create,get", "--resource=configmaps")
    kubectl.run("-n", ns, "create", "rolebinding", "alice-cm", "--role=cm-writer", "--user=alice")
    kubectl.run("apply", "-f", "-", input=f"""apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata:
  name: {name}
spec:
  matchConstraints:
{RULES}  validations:
  - expression: >
      authorizer.group("").resource("secrets").namespace(object.metadata.namespace).check("list").allowed()
    messageExpression: "request.userInfo.username + ' may not list secrets here'"
  - expression: "authorizer.requestResource.check('get').allowed()"
    message: "creators must be able to read what they create"
{deny_in_namespace(name, ns)}""")
    alice = kubectl.with_token(tokens["alice"], "alice")
    refused = create_until_refused(alice, ns, "by-alice")
    assert f"ValidatingAdmissionPolicy '{name}' with binding '{name}' denied request: " \
           "alice may not list secrets here" in refused.stderr
    kubectl.run("-n", ns, "create", "configmap", "by-admin")  # system:masters may list secrets
    # granted the right, alice's create passes both checks
    kubectl.run("-n", ns, "create", "role", "secret-lister", "--verb=list", "--resource=secrets")
    kubectl.run("-n", ns, "create", "rolebinding", "alice-secrets", "--role=secret-lister", "--user=alice")
    wait_for(lambda: alice.run("-n", ns, "create", "configmap", "by-alice", check=False).returncode == 0,
             what="the new role to be seen by the authorizer")
    kubectl.run("delete", "validatingadmissionpolicybinding", name)
    kubectl.run("delete", "validatingadmissionpolicy", name)
    kubectl.run("delete", "namespace", ns, "--wait=false")
