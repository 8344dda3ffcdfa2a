"""Admission webhooks end to end: real HTTPS webhook servers on loopback (tools/fakeservers.py),
configured through MutatingWebhookConfiguration / ValidatingWebhookConfiguration, seen through kubectl
and the API as a user would see them."""
from __future__ import annotations

import base64
import json
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tools.fakeservers import AdmissionWebhook
from tests.waiting import wait_for

API = "/apis/admissionregistration.k8s.io/v1"
CM_RULE = {"operations": ["CREATE", "UPDATE"], "apiGroups": [""], "apiVersions": ["v1"],
           "resources": ["configmaps"]}


def patch_of(ops: list[dict[str, Any]]) -> dict[str, Any]:
    return {"patchType": "JSONPatch", "patch": base64.b64encode(json.dumps(ops).encode()).decode()}


def add_label(obj: dict[str, Any], key: str, value: str) -> list[dict[str, Any]]:
    if not (obj.get("metadata") or {}).get("labels"):
        return [{"op": "add", "path": "/metadata/labels", "value": {key: value}}]
    return [{"op": "add", "path": f"/metadata/labels/{key.replace('/', '~1')}", "value": value}]


class Env:
    """One test's namespace (labelled so only its webhooks see it), servers and configurations."""

    def __init__(self, admin: httpx.Client, tmp: Path) -> None:
        self.admin, self.tmp = admin, tmp
        self.id = uuid.uuid4().hex[:8]
        self.ns = f"wh-{self.id}"
        self.servers: list[AdmissionWebhook] = []
        self.configs: list[tuple[str, str]] = []
        r = admin.post("/api/v1/namespaces", json={"metadata": {"name": self.ns,
                                                                "labels": {"webhook-test": self.id}}})
        assert r.status_code == 201, r.text

    def server(self, name: str, decide: Callable[[dict[str, Any]], dict[str, Any]],
               delay: float = 0.0, dns_names: tuple[str, ...] = ()) -> AdmissionWebhook:
        s = AdmissionWebhook(self.tmp, name, decide, delay, dns_names).start()
        self.servers.append(s)
        return s

    def hook(self, name: str, server: AdmissionWebhook, **more: Any) -> dict[str, Any]:
        return {"name": f"{name}.{self.id}.webhooks.apiary.test", "sideEffects": "None",
                "admissionReviewVersions": ["v1"], "rules": [CM_RULE],
                "clientConfig": {"url": f"{server.url}/{name}",
                                 "caBundle": base64.b64encode(server.ca_pem.encode()).decode()},
                "namespaceSelector": {"matchLabels": {"webhook-test": self.id}}, **more}

    def configure(self, plural: str, *hooks: dict[str, Any]) -> dict[str, Any]:
        name = f"{plural[:4]}-{self.id}-{len(self.configs)}"
        kind = "MutatingWebhookConfiguration" if plural.startswith("mutating") else "ValidatingWebhookConfiguration"
        r = self.admin.post(f"{API}/{plural}", json={"apiVersion": "admissionregistration.k8s.io/v1",
                                                     "kind": kind, "metadata": {"name": name},
                                                     "webhooks": list(hooks)})
        assert r.status_code == 201, r.text
        self.configs.append((plural, name))
        return r.json()

    def create_cm(self, name: str, labels: dict[str, str] | None = None, ns: str = "",
                  dry_run: bool = False) -> httpx.Response:
        meta: dict[str, Any] = {"name": name}
        if labels:
            meta["labels"] = labels
        return self.admin.post(f"/api/v1/namespaces/{ns or self.ns}/configmaps",
                               params={"dryRun": "All"} if dry_run else None,
                               json={"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta,
                                     "data": {"a": "b"}})

    def close(self) -> None:
        for plural, name in self.configs:
            self.admin.delete(f"{API}/{plural}/{name}")
        for s in self.servers:
            s.stop()
        self.admin.delete(f"/api/v1/namespaces/{self.ns}")


@pytest.fixture
def env(admin: httpx.Client, tmp_path: Path) -> Iterator[Env]:
    e = Env(admin, tmp_path)
    try:
        yield e
    finally:
        e.close()


def probe(env: Env, want: Callable[[httpx.Response], bool], labels: dict[str, str] | None = None) -> None:
    """Create throw-away configmaps until the configured webhooks act on them."""
    def once() -> bool:
        r = env.create_cm(f"probe-{uuid.uuid4().hex[:6]}", labels)
        return want(r)
    wait_for(once, what="the webhook configuration to take effect")


def test_configuration_validation_defaults_and_table(env: Env, kubectl: Any) -> None:
    s = env.server("noop", lambda req: {"allowed": True})
    cfg = env.configure("mutatingwebhookconfigurations", env.hook("noop", s))
    hook = cfg["webhooks"][0]
    assert (hook["failurePolicy"], hook["matchPolicy"], hook["timeoutSeconds"], hook["reinvocationPolicy"]) == \
        ("Fail", "Equivalent", 10, "Never")
    assert hook["rules"][0]["scope"] == "*" and hook["objectSelector"] == {}
    out = kubectl.run("get", "mutatingwebhookconfigurations", cfg["metadata"]["name"]).stdout.splitlines()
    assert out[0].split() == ["NAME", "WEBHOOKS", "AGE"] and out[1].split()[:2] == [cfg["metadata"]["name"], "1"]

    bad = env.hook("bad", s, timeoutSeconds=31, sideEffects="Some")
    del bad["admissionReviewVersions"]
    dup = env.hook("noop", s)
    r = env.admin.post(f"{API}/validatingwebhookconfigurations", json={
        "metadata": {"name": f"bad-{env.id}"}, "webhooks": [env.hook("noop", s), dup, bad,
                                                            {**env.hook("x", s), "name": "short.name"}]})
    assert r.status_code == 422, r.text
    causes = {(c["field"], c["reason"]) for c in r.json()["details"]["causes"]}
    assert ("webhooks[1].name", "FieldValueDuplicate") in causes
    assert ("webhooks[2].timeoutSeconds", "FieldValueInvalid") in causes
    assert ("webhooks[2].sideEffects", "FieldValueNotSupported") in causes
    assert ("webhooks[2].admissionReviewVersions", "FieldValueRequired") in causes
    assert ("webhooks[3].name", "FieldValueInvalid") in causes
    many = env.hook("many", s, matchConditions=[{"name": f"c{i}", "expression": "true"} for i in range(65)])
    r = env.admin.post(f"{API}/validatingwebhookconfigurations", json={
        "metadata": {"name": f"many-{env.id}"}, "webhooks": [many]})
    assert r.status_code == 422 and "must have at most 64 items" in r.text, r.text


def test_mutating_label_validating_prefix_warning_and_review(env: Env, kubectl: Any, stack: Any) -> None:
    def mutate(req: dict[str, Any]) -> dict[str, Any]:
        return {"allowed": True, "warnings": ["label added by webhook"], "auditAnnotations": {"did": "label"},
                **patch_of(add_label(req["object"], "added-by", "webhook"))}

    def refuse_prefix(req: dict[str, Any]) -> dict[str, Any]:
        if req["name"].startswith("bad-"):
            return {"allowed": False, "status": {"message": "names starting with bad- are refused"}}
        return {"allowed": True}

    m = env.server("mutate", mutate)
    v = env.server("validate", refuse_prefix)
    env.configure("mutatingwebhookconfigurations", env.hook("mutate", m, sideEffects="NoneOnDryRun"))
    env.configure("validatingwebhookconfigurations", env.hook("validate", v))
    probe(env, lambda r: r.status_code == 201 and r.json()["metadata"].get("labels", {}).get("added-by") == "webhook")
    probe(env, lambda r: r.status_code == 201 and len(v.calls) > 0)

    created = kubectl.run("-n", env.ns, "create", "configmap", "good", "--from-literal=a=b")
    assert "Warning: label added by webhook" in created.stderr
    labels = kubectl.run("-n", env.ns, "get", "configmap", "good", "-o", "jsonpath={.metadata.labels}").stdout
    assert json.loads(labels) == {"added-by": "webhook"}

    refused = kubectl.run("-n", env.ns, "create", "configmap", "bad-one", "--from-literal=a=b", check=False)
    assert refused.returncode != 0
    assert (f'admission webhook "validate.{env.id}.webhooks.apiary.test" denied the request: '
            "names starting with bad- are refused") in refused.stderr
    assert env.create_cm("bad-two").status_code == 400

    # the webhook's audit annotations and kube's mutation annotation reach the audit event
    def audited() -> dict[str, str] | None:
        for line in (stack.logs / "audit.log").read_text().splitlines():
            ev = json.loads(line)
            ref = ev.get("objectRef") or {}
            # the create of "good" is this namespace's first by kubectl (the probes use httpx)
            if (ev["verb"], ref.get("namespace"), ev["stage"], ev["responseStatus"]["code"]) == \
                    ("create", env.ns, "ResponseComplete", 201) and ev.get("userAgent", "").startswith("kubectl"):
                return ev.get("annotations")
        return None
    annotations = wait_for(audited, what="the audit event of the create")
    assert annotations[f"mutate.{env.id}.webhooks.apiary.test/did"] == "label"
    assert json.loads(annotations["mutation.webhook.admission.k8s.io/round_0_index_0"]) == {
        "configuration": env.configs[0][1], "webhook": f"mutate.{env.id}.webhooks.apiary.test", "mutated": True}

    # the review carries what kube sends
    review = next(c for c in m.calls if c["request"]["name"] == "good")
    assert review["apiVersion"] == "admission.k8s.io/v1" and review["kind"] == "AdmissionReview"
    req = review["request"]
    assert req["kind"] == req["requestKind"] == {"group": "", "version": "v1", "kind": "ConfigMap"}
    assert req["resource"] == req["requestResource"] == {"group": "", "version": "v1", "resource": "configmaps"}
    assert (req["namespace"], req["operation"], req["dryRun"], req["oldObject"]) == (env.ns, "CREATE", False, None)
    assert req["userInfo"]["username"] == "kubernetes-admin" and "system:masters" in req["userInfo"]["groups"]
    assert req["object"]["data"] == {"a": "b"} and req["options"]["kind"] == "CreateOptions"
    assert req["uid"]
    # the validating webhook sees the mutated object
    vreq = next(c for c in v.calls if c["request"]["name"] == "good")["request"]
    assert vreq["object"]["metadata"]["labels"] == {"added-by": "webhook"}

    # an UPDATE carries the old object
    kubectl.run("-n", env.ns, "label", "configmap", "good", "extra=1")
    upd = next(c for c in reversed(m.calls) if c["request"]["operation"] == "UPDATE")["request"]
    assert upd["oldObject"]["metadata"]["name"] == "good" and upd["options"]["kind"] == "UpdateOptions"

    # --dry-run=server reaches a NoneOnDryRun webhook; nothing is stored
    before = len(m.calls)
    dry = kubectl.run("-n", env.ns, "create", "configmap", "dry", "--from-literal=a=b", "--dry-run=server",
                      "-o", "json")
    assert json.loads(dry.stdout)["metadata"]["labels"] == {"added-by": "webhook"}
    assert any(c["request"]["dryRun"] is True for c in m.calls[before:])
    assert kubectl.run("-n", env.ns, "get", "configmap", "dry", check=False).returncode != 0

    # a namespace without the selected label is not sent to these webhooks
    other = f"other-{env.id}"
    kubectl.run("create", "namespace", other)
    try:
        r = env.create_cm("bad-elsewhere", ns=other)
        assert r.status_code == 201 and "labels" not in r.json()["metadata"], r.text
    finally:
        kubectl.run("delete", "namespace", other, "--wait=false")


def test_reinvocation(env: Env) -> None:
    def first(req: dict[str, Any]) -> dict[str, Any]:
        saw = "yes" if (req["object"]["metadata"].get("labels") or {}).get("second") else "no"
        ann = req["object"]["metadata"].get("annotations")
        op = ({"op": "add", "path": "/metadata/annotations", "value": {"first-saw-second": saw}} if not ann
              else {"op": "add", "path": "/metadata/annotations/first-saw-second", "value": saw})
        return {"allowed": True, **patch_of([op])}

    def second(req: dict[str, Any]) -> dict[str, Any]:
        return {"allowed": True, **patch_of(add_label(req["object"], "second", "yes"))}

    a, b = env.server("first", first), env.server("second", second)
    # configurations run by name: the first webhook's configuration sorts first
    env.configure("mutatingwebhookconfigurations", env.hook("first", a, reinvocationPolicy="IfNeeded"))
    env.configure("mutatingwebhookconfigurations", env.hook("second", b))
    probe(env, lambda r: r.status_code == 201 and (r.json()["metadata"].get("labels") or {}).get("second") == "yes")
    r = env.create_cm("reinvoked")
    assert r.status_code == 201, r.text
    assert r.json()["metadata"]["annotations"] == {"first-saw-second": "yes"}
    assert len([c for c in a.calls if c["request"]["name"] == "reinvoked"]) == 2
    assert len([c for c in b.calls if c["request"]["name"] == "reinvoked"]) == 1


def test_policy_reinvoked_after_a_webhook_and_the_webhook_after_the_policy(env: Env, kubectl: Any) -> None:
    """A MutatingAdmissionPolicy (IfNeeded) labels what it sees of a webhook's annotation; the webhook
    (IfNeeded) runs after it: the policy is applied again in the second pass, and that change calls the
    webhook once more (kube's reinvocation across policies and webhooks)."""
    def annotate(req: dict[str, Any]) -> dict[str, Any]:
        if (req["object"]["metadata"].get("annotations") or {}).get("hook"):
            return {"allowed": True}
        return {"allowed": True, **patch_of([{"op": "add", "path": "/metadata/annotations",
                                              "value": {"hook": "seen"}}])}

    hook = env.server("annotate", annotate)
    name = f"saw-hook-{env.id}"
    kubectl.run("apply", "-f", "-", input=f"""apiVersion: admissionregistration.k8s.io/v1
kind: MutatingAdmissionPolicy
metadata:
  name: {name}
spec:
  reinvocationPolicy: IfNeeded
  matchConstraints:
    resourceRules:
    - apiGroups: [""]
      apiVersions: ["v1"]
      operations: ["CREATE"]
      resources: ["configmaps"]
  mutations:
  - patchType: ApplyConfiguration
    applyConfiguration:
      expression: >
        Object{{metadata: Object.metadata{{labels: {{"saw-hook":
          has(object.metadata.annotations) && "hook" in object.metadata.annotations ? "yes" : "no"}}}}}}
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
        webhook-test: "{env.id}"
""")
    try:
        env.configure("mutatingwebhookconfigurations", env.hook("annotate", hook, reinvocationPolicy="IfNeeded"))
        probe(env, lambda r: r.status_code == 201 and (r.json()["metadata"].get("labels") or {}).get("saw-hook")
              == "yes" and bool(r.json()["metadata"].get("annotations")))
        r = env.create_cm("reinvoked")
        assert r.status_code == 201, r.text
        assert r.json()["metadata"]["labels"] == {"saw-hook": "yes"}
        assert r.json()["metadata"]["annotations"] == {"hook": "seen"}
        assert len([c for c in hook.calls if c["request"]["name"] == "reinvoked"]) == 2
    finally:
        kubectl.run("delete", "mutatingadmissionpolicybinding", name, "--ignore-not-found")
        kubectl.run("delete", "mutatingadmissionpolicy", name, "--ignore-not-found")


def test_refused_request_keeps_webhook_audit_annotations_and_warnings(env: Env, stack: Any) -> None:
    """A mutating webhook's annotation and warning, then a validating webhook that refuses with its own
    auditAnnotations: the 403 carries the warning and its audit event every annotation."""
    def mutate(req: dict[str, Any]) -> dict[str, Any]:
        return {"allowed": True, "warnings": ["mutated before the refusal"], "auditAnnotations": {"did": "label"},
                **patch_of(add_label(req["object"], "added-by", "webhook"))}

    def refuse(req: dict[str, Any]) -> dict[str, Any]:
        if req["name"].startswith("no-"):
            return {"allowed": False, "auditAnnotations": {"why": "prefix"},
                    "status": {"code": 403, "reason": "Forbidden", "message": "no- names are refused"}}
        return {"allowed": True}

    env.configure("mutatingwebhookconfigurations", env.hook("mutate", env.server("mutate", mutate)))
    env.configure("validatingwebhookconfigurations", env.hook("refuse", env.server("refuse", refuse)))
    def attempt() -> httpx.Response | None:
        r = env.create_cm(f"no-{uuid.uuid4().hex[:6]}")
        return r if r.status_code == 403 and "warning" in r.headers else None
    r = wait_for(attempt, what="both webhooks")
    assert r.headers["warning"] == '299 - "mutated before the refusal"'
    assert r.json()["message"].endswith("denied the request: no- names are refused")

    def audited() -> dict[str, Any] | None:
        """The last refused create's event (a create's objectRef has no name: the name is in the body)."""
        found = None
        for line in (stack.logs / "audit.log").read_text().splitlines():
            ev = json.loads(line)
            if (ev["verb"], (ev.get("objectRef") or {}).get("namespace"), ev["stage"]) == \
                    ("create", env.ns, "ResponseComplete") and ev["responseStatus"]["code"] == 403:
                found = ev
        return found if found and f"mutate.{env.id}.webhooks.apiary.test/did" in found["annotations"] else None
    ev = wait_for(audited, what="the refused create's audit event")
    assert ev["responseStatus"]["code"] == 403
    annotations = ev["annotations"]
    assert annotations[f"refuse.{env.id}.webhooks.apiary.test/why"] == "prefix"
    assert annotations[f"mutate.{env.id}.webhooks.apiary.test/did"] == "label"
    assert json.loads(annotations["mutation.webhook.admission.k8s.io/round_0_index_0"])["mutated"] is True


def test_object_selector_and_match_conditions(env: Env) -> None:
    refuse = env.server("refuse", lambda req: {"allowed": False, "status": {"code": 403, "reason": "Forbidden",
                                                                          "message": "refused"}})
    env.configure("validatingwebhookconfigurations",
                  env.hook("bylabel", refuse, objectSelector={"matchLabels": {"check": "yes"}}),
                  env.hook("bycondition", refuse, matchConditions=[
                      {"name": "prefixed", "expression": "object.metadata.name.startsWith('mc-')"},
                      {"name": "creates", "expression": "request.operation == 'CREATE'"}]))
    probe(env, lambda r: r.status_code == 403, labels={"check": "yes"})
    r = env.create_cm("labelled", {"check": "yes"})
    assert r.status_code == 403 and r.json()["message"] == (
        f'admission webhook "bylabel.{env.id}.webhooks.apiary.test" denied the request: refused'), r.text
    assert r.json()["reason"] == "Forbidden"
    assert env.create_cm("unlabelled", {"check": "no"}).status_code == 201
    r = env.create_cm("mc-one")
    assert r.status_code == 403 and "bycondition" in r.json()["message"], r.text
    assert env.create_cm("plain").status_code == 201
    assert not [c for c in refuse.calls if c["request"]["name"] in ("unlabelled", "plain")]


def test_failures_follow_failure_policy(env: Env, kubectl: Any, stack: Any) -> None:
    down = env.server("down", lambda req: {"allowed": True})
    down.stop()
    env.servers.remove(down)
    env.configure("validatingwebhookconfigurations",
                  env.hook("down", down, objectSelector={"matchLabels": {"policy": "fail"}}),
                  env.hook("ignored", down, failurePolicy="Ignore",
                           objectSelector={"matchLabels": {"policy": "ignore"}}))
    probe(env, lambda r: r.status_code == 500, labels={"policy": "fail"})
    r = env.create_cm("fails", {"policy": "fail"})
    assert r.status_code == 500 and r.json()["reason"] == "InternalError", r.text
    assert r.json()["message"].startswith(
        f'Internal error occurred: failed calling webhook "down.{env.id}.webhooks.apiary.test": '
        f'failed to call webhook: Post "{down.url}/down')
    out = kubectl.run("-n", env.ns, "apply", "-f", "-", check=False, input=(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: fails-too\n  labels:\n    policy: fail\n"))
    assert out.returncode != 0
    assert f'Internal error occurred: failed calling webhook "down.{env.id}.webhooks.apiary.test"' in out.stderr
    assert env.create_cm("ignored", {"policy": "ignore"}).status_code == 201
    metrics = httpx.get(f"http://127.0.0.1:{stack.health_port('admission')}/metrics").text
    name = f"ignored.{env.id}.webhooks.apiary.test"
    # kube's names: no _total on the _count counters
    assert f'apiserver_admission_webhook_fail_open_count{{name="{name}",type="validating"}} 1.0' in metrics
    assert "# TYPE apiserver_admission_webhook_fail_open_count counter" in metrics
    assert "apiserver_admission_webhook_fail_open_count_total" not in metrics
    assert f'apiserver_admission_webhook_rejection_count{{error_type="calling_webhook_error",name="{name}"' \
        in metrics
    assert f'apiserver_admission_webhook_request_total{{code="0",name="down.{env.id}' in metrics


def test_timeout(env: Env) -> None:
    slow = env.server("slow", lambda req: {"allowed": True}, delay=5.0)
    answered: list[int] = []
    original = slow.handle

    def handle(method: str, path: str, body: bytes) -> tuple[int, Any]:
        out = original(method, path, body)
        answered.append(1)
        return out

    slow.handle = handle  # type: ignore[method-assign]
    env.configure("validatingwebhookconfigurations", env.hook("slow", slow, timeoutSeconds=1))
    probe(env, lambda r: r.status_code == 500)
    calls_before = len(answered)
    t0 = time.monotonic()
    r = env.create_cm("slowpoke")
    elapsed = time.monotonic() - t0
    assert r.status_code == 500, r.text
    assert "context deadline exceeded" in r.json()["message"], r.text
    # the answer came while the webhook still slept: the timeout cut the call, not the webhook's answer
    assert len(answered) == calls_before, elapsed


def test_client_config_service(env: Env) -> None:
    """clientConfig.service: the call goes to an endpoint of the Service, verified as <name>.<namespace>.svc."""
    srv = env.server("svc", lambda req: {"allowed": False, "status": {"message": "through the service"}},
                     dns_names=(f"hooks.{env.ns}.svc",))
    r = env.admin.post(f"/api/v1/namespaces/{env.ns}/services", json={
        "metadata": {"name": "hooks"}, "spec": {"ports": [{"port": 8443, "targetPort": srv.port}]}})
    assert r.status_code == 201, r.text
    r = env.admin.post(f"/api/v1/namespaces/{env.ns}/endpoints", json={
        "metadata": {"name": "hooks"}, "subsets": [{"addresses": [{"ip": "127.0.0.1"}],
                                                    "ports": [{"port": srv.port}]}]})
    assert r.status_code == 201, r.text
    hook = env.hook("svc", srv)
    hook["clientConfig"] = {"service": {"namespace": env.ns, "name": "hooks", "port": 8443, "path": "/validate"},
                            "caBundle": hook["clientConfig"]["caBundle"]}
    env.configure("validatingwebhookconfigurations", hook)
    probe(env, lambda r: r.status_code == 400)
    r = env.create_cm("via-service")
    assert r.json()["message"] == (f'admission webhook "svc.{env.id}.webhooks.apiary.test" denied the request: '
                                   "through the service"), r.text
    assert srv.paths[-1] == "/validate?timeout=10s"
