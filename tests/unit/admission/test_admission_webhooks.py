"""The webhook plug-ins against real HTTPS webhook servers on loopback (tools/fakeservers.py): matching,
what is sent, how answers and failures become kube's errors."""
from __future__ import annotations

import base64
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from apiary_pb import admission_pb2 as adpb
from apiary_pb import envelope_pb2 as pb
from services.admission.attributes import Attributes
from services.admission.chain import Chain
from services.admission.informers import InformerFactory
from services.admission.plugins.mutating_admission_policy import MutatingAdmissionPolicy
from services.admission.webhook.dispatcher import (
    MutatingAdmissionWebhook,
    Sources,
    ValidatingAdmissionWebhook,
    rejection,
)
from services.admission.webhook.matching import rule_matches
from services.apis.install import new_catalogue
from services.common.envelope import to_envelope
from services.common.errors import APIError
from tools.fakeservers import AdmissionWebhook

CATALOGUE = new_catalogue()


def attrs(op: str = "CREATE", group: str = "", version: str = "v1", resource: str = "configmaps",
          subresource: str = "", namespace: str = "a", name: str = "cm", dry_run: bool = False,
          obj: dict[str, Any] | None = None) -> Attributes:
    r = adpb.AdmissionRequest(operation=op, kind="ConfigMap", dry_run=dry_run, attributes=pb.RequestAttributes(
        api_group=group, api_version=version, resource=resource, subresource=subresource, namespace=namespace,
        name=name, user=pb.UserInfo(name="alice", groups=["team"])))
    if op != "DELETE":
        r.object.CopyFrom(to_envelope(obj or {"apiVersion": "v1", "kind": "ConfigMap",
                                              "metadata": {"name": name, "namespace": namespace}}))
    return Attributes(r, CATALOGUE)


RULE = {"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["configmaps"],
        "scope": "*"}


@pytest.mark.parametrize("rule,a,want", [
    (RULE, attrs(), True),
    (RULE, attrs("UPDATE"), False),
    ({**RULE, "operations": ["*"]}, attrs("CONNECT"), True),
    ({**RULE, "operations": ["CONNECT"]}, attrs("CONNECT", resource="pods", subresource="exec"), False),
    ({**RULE, "operations": ["CONNECT"], "resources": ["pods/exec"]}, attrs("CONNECT", resource="pods",
                                                                          subresource="exec"), True),
    ({**RULE, "resources": ["*"]}, attrs(resource="pods", subresource="status"), False),
    ({**RULE, "resources": ["*/*"]}, attrs(resource="pods", subresource="status"), True),
    ({**RULE, "resources": ["pods/status"]}, attrs(resource="pods", subresource="status"), True),
    ({**RULE, "resources": ["pods/*"]}, attrs(resource="pods"), True),
    ({**RULE, "resources": ["*/status"]}, attrs(resource="pods", subresource="status"), True),
    ({**RULE, "apiGroups": ["*"], "apiVersions": ["*"]}, attrs(group="apps", version="v1"), True),
    ({**RULE, "apiGroups": ["apps"]}, attrs(), False),
    ({**RULE, "apiVersions": ["v1beta1"]}, attrs(), False),
    ({**RULE, "scope": "Cluster"}, attrs(), False),
    ({**RULE, "scope": "Namespaced"}, attrs(), True),
    ({**RULE, "scope": "Cluster", "resources": ["namespaces"]}, attrs(resource="namespaces", namespace="x"), True),
    ({**RULE, "scope": "Namespaced", "resources": ["namespaces"]}, attrs(resource="namespaces", namespace="x"),
     False),
])
def test_rules(rule: dict[str, Any], a: Attributes, want: bool) -> None:
    assert rule_matches(rule, a) is want


def patch_of(ops: list[dict[str, Any]]) -> dict[str, Any]:
    return {"patchType": "JSONPatch", "patch": base64.b64encode(json.dumps(ops).encode()).decode()}


class Setup:
    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.sources = Sources(object())  # type: ignore[arg-type]  # informers filled by hand, never started
        self.servers: list[AdmissionWebhook] = []

    def server(self, decide: Callable[[dict[str, Any]], dict[str, Any]]) -> AdmissionWebhook:
        s = AdmissionWebhook(self.tmp, f"hook{len(self.servers)}", decide).start()
        self.servers.append(s)
        return s

    def hooks(self, mutating: bool, *hooks: dict[str, Any]) -> None:
        informer = self.sources.mutating if mutating else self.sources.validating
        informer.store = {"cfg": {"metadata": {"name": "cfg"}, "webhooks": list(hooks)}}
        self.sources._hooks[mutating] = None

    @staticmethod
    def hook(name: str, server: AdmissionWebhook | None, **more: Any) -> dict[str, Any]:
        cc: dict[str, Any] = {"url": "https://127.0.0.1:1/"}
        if server is not None:
            cc = {"url": f"{server.url}/", "caBundle": base64.b64encode(server.ca_pem.encode()).decode()}
        return {"name": name, "sideEffects": "None", "admissionReviewVersions": ["v1"], "failurePolicy": "Fail",
                "timeoutSeconds": 5, "rules": [RULE], "clientConfig": cc, **more}


@pytest.fixture
def setup(tmp_path: Path) -> Iterator[Setup]:
    s = Setup(tmp_path)
    yield s
    for srv in s.servers:
        srv.stop()


async def test_dry_run_refused_for_side_effects(setup: Setup) -> None:
    srv = setup.server(lambda req: {"allowed": True})
    plugin = ValidatingAdmissionWebhook(setup.sources)
    setup.hooks(False, setup.hook("some.hooks.test", srv, sideEffects="Some"))
    with pytest.raises(APIError) as e:
        await plugin.validate(attrs(dry_run=True))
    assert (e.value.code, e.value.message) == (400, 'admission webhook "some.hooks.test" does not support dry run')
    assert srv.calls == []
    setup.hooks(False, setup.hook("dry.hooks.test", srv, sideEffects="NoneOnDryRun"))
    await plugin.validate(attrs(dry_run=True))
    assert srv.calls[0]["request"]["dryRun"] is True


async def test_v1beta1_when_only_version(setup: Setup) -> None:
    srv = setup.server(lambda req: {"allowed": True})
    setup.hooks(False, setup.hook("old.hooks.test", srv, admissionReviewVersions=["v9", "v1beta1"]))
    await ValidatingAdmissionWebhook(setup.sources).validate(attrs())
    assert srv.calls[0]["apiVersion"] == "admission.k8s.io/v1beta1"


async def test_patch_errors_are_internal_errors(setup: Setup) -> None:
    plugin = MutatingAdmissionWebhook(setup.sources)
    bad = setup.server(lambda req: {"allowed": True, **patch_of([{"op": "remove", "path": "/nope"}])})
    setup.hooks(True, setup.hook("bad.hooks.test", bad))
    with pytest.raises(APIError) as e:
        await plugin.admit(attrs())
    assert e.value.code == 500 and e.value.message.startswith("Internal error occurred: ")
    kind = setup.server(lambda req: {"allowed": True, **patch_of([{"op": "replace", "path": "/kind",
                                                                   "value": "Secret"}])})
    setup.hooks(True, setup.hook("kind.hooks.test", kind))
    with pytest.raises(APIError) as e:
        await plugin.admit(attrs())
    assert e.value.code == 500 and "kind" in e.value.message
    no_type = setup.server(lambda req: {"allowed": True, "patch": patch_of([])["patch"]})
    setup.hooks(True, setup.hook("notype.hooks.test", no_type))
    with pytest.raises(APIError, match="response.patch but not response.patchType"):
        await plugin.admit(attrs())


async def test_garbage_and_failure_policy(setup: Setup) -> None:
    garbage = setup.server(lambda req: {"allowed": True, "uid": "someone-else"})
    plugin = ValidatingAdmissionWebhook(setup.sources)
    setup.hooks(False, setup.hook("garbage.hooks.test", garbage))
    with pytest.raises(APIError) as e:
        await plugin.validate(attrs())
    assert e.value.code == 500
    assert e.value.message.startswith('Internal error occurred: failed calling webhook "garbage.hooks.test": '
                                      "received invalid webhook response: expected response.uid=")
    setup.hooks(False, setup.hook("garbage.hooks.test", garbage, failurePolicy="Ignore"),
                setup.hook("down.hooks.test", None, failurePolicy="Ignore"))
    await plugin.validate(attrs())


async def test_match_condition_errors_follow_failure_policy(setup: Setup) -> None:
    srv = setup.server(lambda req: {"allowed": False})
    plugin = ValidatingAdmissionWebhook(setup.sources)
    broken = [{"name": "broken", "expression": "object.data.missing == 'x'"}]
    setup.hooks(False, setup.hook("mc.hooks.test", srv, matchConditions=broken))
    with pytest.raises(APIError) as e:
        await plugin.validate(attrs())
    assert e.value.code == 500 and 'failed calling webhook "mc.hooks.test": failed to evaluate match condition' \
        in e.value.message
    setup.hooks(False, setup.hook("mc.hooks.test", srv, matchConditions=broken, failurePolicy="Ignore"))
    await plugin.validate(attrs())
    # a false condition wins over an error
    setup.hooks(False, setup.hook("mc.hooks.test", srv, matchConditions=[*broken, {"name": "no",
                                                                                  "expression": "false"}]))
    await plugin.validate(attrs())
    assert srv.calls == []
    # conditions see the request and the user
    setup.hooks(False, setup.hook("mc.hooks.test", srv, matchConditions=[
        {"name": "alice", "expression": "request.userInfo.username == 'alice' && oldObject == null"}]))
    with pytest.raises(APIError, match="without explanation"):
        await plugin.validate(attrs())


def test_rejection_status() -> None:
    err = rejection("w.hooks.test", None)
    assert (err.code, err.message) == (400, 'admission webhook "w.hooks.test" denied the request without explanation')
    err = rejection("w.hooks.test", {"code": 200, "message": "no"})
    assert (err.code, err.message) == (400, 'admission webhook "w.hooks.test" denied the request: no')
    err = rejection("w.hooks.test", {"code": 409, "reason": "AlreadyExists"})
    assert (err.code, err.reason, err.message) == (
        409, "AlreadyExists", 'admission webhook "w.hooks.test" denied the request: AlreadyExists')


async def test_namespace_selector(setup: Setup) -> None:
    """A namespace's labels decide; a request on a namespace is matched on its own labels; other
    cluster-scoped requests are never skipped by the selector."""
    srv = setup.server(lambda req: {"allowed": False})
    plugin = ValidatingAdmissionWebhook(setup.sources)
    setup.sources.namespaces.informer.store = {"prod": {"metadata": {"name": "prod", "labels": {"env": "prod"}}},
                                              "dev": {"metadata": {"name": "dev", "labels": {"env": "dev"}}}}
    rule = {**RULE, "operations": ["*"], "resources": ["*"]}
    setup.hooks(False, setup.hook("ns.hooks.test", srv, rules=[rule],
                                  namespaceSelector={"matchLabels": {"env": "prod"}}))
    with pytest.raises(APIError):
        await plugin.validate(attrs(namespace="prod"))
    await plugin.validate(attrs(namespace="dev"))
    ns = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "new", "labels": {"env": "prod"}}}
    with pytest.raises(APIError):
        await plugin.validate(attrs(resource="namespaces", namespace="", name="new", obj=ns))
    ns["metadata"]["labels"] = {"env": "dev"}
    await plugin.validate(attrs(resource="namespaces", namespace="", name="new", obj=ns))
    with pytest.raises(APIError):   # cluster-scoped, not a namespace: the selector does not skip it
        await plugin.validate(attrs(resource="clusterthings", namespace="", name="x"))
    assert [c["request"]["namespace"] for c in srv.calls] == ["prod", "", ""]


# Reinvocation across mutating policies and webhooks (kube's reinvoker): a webhook or policy with
# reinvocationPolicy IfNeeded runs once more, in a second pass of the mutating phase, when a later
# mutation changed the object.

POLICY_RULES = {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"],
                                   "resources": ["configmaps"]}]}
# the label says whether the policy saw the webhook's annotation
SEES_ANNOTATION = ("Object{metadata: Object.metadata{labels: {'saw-hook': "
                   "has(object.metadata.annotations) && 'hook' in object.metadata.annotations ? 'yes' : 'no'}}}")


def policy_plugin(reinvocation: str, expression: str = SEES_ANNOTATION) -> MutatingAdmissionPolicy:
    plugin = MutatingAdmissionPolicy(InformerFactory(object()))  # type: ignore[arg-type]  # filled by hand
    plugin.set_catalogue(CATALOGUE)
    src = plugin.source
    src.policies.store = {"p": {"metadata": {"name": "p", "uid": "u1", "generation": 1}, "spec": {
        "matchConstraints": POLICY_RULES, "failurePolicy": "Fail", "reinvocationPolicy": reinvocation,
        "mutations": [{"patchType": "ApplyConfiguration", "applyConfiguration": {"expression": expression}}]}}}
    src.bindings.store = {"b": {"metadata": {"name": "b", "resourceVersion": "1"}, "spec": {"policyName": "p"}}}
    return plugin


def annotate(calls: list[int]) -> Any:
    def decide(req: dict[str, Any]) -> dict[str, Any]:
        calls.append(1)
        annotations = req["object"]["metadata"].get("annotations") or {}
        if "hook" in annotations:
            return {"allowed": True}
        op = [{"op": "add", "path": "/metadata/annotations", "value": {"hook": "seen"}}]
        return {"allowed": True, **patch_of(op)}
    return decide


@pytest.mark.parametrize("policy_reinvocation,want_label", [("IfNeeded", "yes"), ("Never", "no")])
async def test_policy_reinvoked_after_a_webhook_changed_the_object(setup: Setup, policy_reinvocation: str,
                                                                   want_label: str) -> None:
    calls: list[int] = []
    setup.hooks(True, setup.hook("annotate.hooks.test", setup.server(annotate(calls))))
    chain = Chain([policy_plugin(policy_reinvocation), MutatingAdmissionWebhook(setup.sources)])
    a = attrs()
    await chain.admit(a)
    assert a.object is not None
    assert a.object["metadata"]["labels"] == {"saw-hook": want_label}
    assert a.object["metadata"]["annotations"] == {"hook": "seen"}
    assert len(calls) == 1  # the webhook itself is Never


async def test_webhook_reinvoked_after_a_reinvoked_policy_changed_the_object(setup: Setup) -> None:
    calls: list[int] = []
    setup.hooks(True, setup.hook("annotate.hooks.test", setup.server(annotate(calls)),
                                 reinvocationPolicy="IfNeeded"))
    chain = Chain([policy_plugin("IfNeeded"), MutatingAdmissionWebhook(setup.sources)])
    a = attrs()
    await chain.admit(a)
    assert a.object is not None and a.object["metadata"]["labels"] == {"saw-hook": "yes"}
    # first pass: the policy, then the webhook (which changed the object: the policy is due); second pass:
    # the policy changed the label, so the IfNeeded webhook is called once more
    assert len(calls) == 2
    assert a.audit_annotations["mutation.webhook.admission.k8s.io/round_1_index_0"]


async def test_nothing_reinvoked_when_nothing_changed_after(setup: Setup) -> None:
    calls: list[int] = []
    setup.hooks(True, setup.hook("noop.hooks.test", setup.server(lambda req: calls.append(1) or {"allowed": True}),
                                 reinvocationPolicy="IfNeeded"))
    plugin = policy_plugin("IfNeeded", "Object{metadata: Object.metadata{labels: {'fixed': 'x'}}}")
    chain = Chain([plugin, MutatingAdmissionWebhook(setup.sources)])
    a = attrs()
    await chain.admit(a)
    assert a.object is not None and a.object["metadata"]["labels"] == {"fixed": "x"}
    # the policy's change asks for a second pass (as kube's reinvoker), but nothing is due in it: the
    # webhook saw the object as it ends and the policy ran before any IfNeeded call
    assert len(calls) == 1 and a.reinvocation.is_reinvoke


async def test_webhooks_reinvoked_among_themselves(setup: Setup) -> None:
    """A webhook changed after an IfNeeded one: the second pass calls only the IfNeeded one."""
    first: list[int] = []
    second: list[int] = []
    setup.hooks(True,
                setup.hook("first.hooks.test", setup.server(lambda r: first.append(1) or {"allowed": True}),
                           reinvocationPolicy="IfNeeded"),
                setup.hook("second.hooks.test", setup.server(annotate(second)), rules=[RULE]))
    a = attrs()
    await Chain([MutatingAdmissionWebhook(setup.sources)]).admit(a)
    assert (len(first), len(second)) == (2, 1)


async def test_refusal_keeps_annotations_and_warnings(setup: Setup) -> None:
    """The admission servicer's answer to a refusal: the request's annotations and warnings so far."""
    from services.admission.server import AdmissionServicer

    def refuse(req: dict[str, Any]) -> dict[str, Any]:
        return {"allowed": False, "warnings": ["careful"], "auditAnnotations": {"why": "no"}}
    setup.hooks(False, setup.hook("refuse.hooks.test", setup.server(refuse)))
    servicer = AdmissionServicer(Chain([ValidatingAdmissionWebhook(setup.sources)]), CATALOGUE)

    class Context:
        async def abort(self, code: Any, message: str, trailing_metadata: Any = ()) -> None:
            raise AbortedWith(trailing_metadata)

    class AbortedWith(Exception):
        pass
    with pytest.raises(AbortedWith) as e:
        await servicer.Validate(attrs().request, Context())  # type: ignore[arg-type]
    from google.rpc import status_pb2

    from apiary_pb import envelope_pb2
    (_, raw), = e.value.args[0]
    st = envelope_pb2.Status()
    status_pb2.Status.FromString(raw).details[0].Unpack(st)
    assert st.code == 400 and dict(st.audit_annotations) == {"refuse.hooks.test/why": "no"}
    assert list(st.warnings) == ["careful"]


class FakeAuthorizer:
    """The auth service's Authorize: alice may list secrets in namespace "a" and create configmaps."""

    def __init__(self) -> None:
        self.asked: list[tuple[str, str, str, str]] = []

    def Authorize(self, req: Any, timeout: float = 0) -> Any:
        from apiary_pb import auth_pb2

        at = req.attributes
        self.asked.append((at.verb, at.resource, at.namespace, at.user.name))
        allowed = at.user.name == "alice" and ((at.verb, at.resource, at.namespace) == ("list", "secrets", "a")
                                               or (at.verb, at.resource) == ("create", "configmaps"))

        async def answer() -> Any:
            return auth_pb2.AuthorizeResponse(decision="Allow" if allowed else "NoOpinion", reason="fake")
        return answer()


async def test_match_conditions_with_the_authorizer(setup: Setup) -> None:
    """`authorizer` and authorizer.requestResource in a webhook's matchConditions, as in policies, asked
    as the request's user; the kube CEL libraries are there too."""
    from services.admission import authz

    fake = FakeAuthorizer()
    authz.configure(fake)  # type: ignore[arg-type]
    try:
        srv = setup.server(lambda req: {"allowed": False, "status": {"message": "matched"}})
        plugin = ValidatingAdmissionWebhook(setup.sources)
        setup.hooks(False, setup.hook("authz.hooks.test", srv, matchConditions=[
            {"name": "may-list-secrets", "expression":
             "authorizer.group('').resource('secrets').namespace(request.namespace).check('list').allowed()"},
            {"name": "may-create", "expression": "authorizer.requestResource.check('create').allowed()"},
            {"name": "library", "expression": "request.name.lowerAscii().indexOf('c') == 0"}]))
        with pytest.raises(APIError, match="matched"):
            await plugin.validate(attrs(namespace="a"))
        assert ("list", "secrets", "a", "alice") in fake.asked and ("create", "configmaps", "a", "alice") in fake.asked
        await plugin.validate(attrs(namespace="b"))  # alice may not list secrets in b: the webhook is skipped
        assert len(srv.calls) == 1
    finally:
        authz.configure(None)


# matchPolicy Equivalent: a rule naming another version or group of the request's storage -------------------

EVENT_RULE = {"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["events"],
              "scope": "*"}


def events_v1_attrs() -> Attributes:
    r = adpb.AdmissionRequest(operation="CREATE", kind="Event", attributes=pb.RequestAttributes(
        api_group="events.k8s.io", api_version="v1", resource="events", namespace="a", name="e",
        user=pb.UserInfo(name="alice", groups=["team"])))
    r.object.CopyFrom(to_envelope({"apiVersion": "events.k8s.io/v1", "kind": "Event",
                                   "metadata": {"name": "e", "namespace": "a"}, "note": "it happened",
                                   "regarding": {"kind": "ConfigMap", "name": "c"}, "reason": "Tested"}))
    return Attributes(r, CATALOGUE)


async def test_equivalent_webhook_is_called_in_its_version_and_its_patch_comes_back(setup: Setup) -> None:
    srv = setup.server(lambda req: {"allowed": True, **patch_of([
        {"op": "replace", "path": "/message", "value": "rewritten by core"}])})
    setup.hooks(True, setup.hook("core.hooks.test", srv, rules=[EVENT_RULE]),
                setup.hook("exact.hooks.test", srv, rules=[EVENT_RULE], matchPolicy="Exact"))
    a = events_v1_attrs()
    await MutatingAdmissionWebhook(setup.sources).admit(a)
    assert len(srv.calls) == 1  # the Exact one names no version the request came through
    req = srv.calls[0]["request"]
    assert req["kind"] == {"group": "", "version": "v1", "kind": "Event"}
    assert req["resource"] == {"group": "", "version": "v1", "resource": "events"}
    assert req["requestKind"] == {"group": "events.k8s.io", "version": "v1", "kind": "Event"}
    assert req["requestResource"] == {"group": "events.k8s.io", "version": "v1", "resource": "events"}
    assert (req["object"]["apiVersion"], req["object"]["message"]) == ("v1", "it happened")
    assert "note" not in req["object"] and req["object"]["involvedObject"] == {"kind": "ConfigMap", "name": "c"}
    # the patch, made to the core/v1 object, comes back in the request's version
    assert a.object is not None
    assert (a.object["apiVersion"], a.object["note"]) == ("events.k8s.io/v1", "rewritten by core")
    assert "message" not in a.object


async def test_exact_match_is_called_in_the_request_version(setup: Setup) -> None:
    srv = setup.server(lambda req: {"allowed": True})
    events_rule = {**EVENT_RULE, "apiGroups": ["events.k8s.io", ""]}
    setup.hooks(False, setup.hook("both.hooks.test", srv, rules=[events_rule]))
    await ValidatingAdmissionWebhook(setup.sources).validate(events_v1_attrs())
    req = srv.calls[0]["request"]
    assert req["kind"] == req["requestKind"] == {"group": "events.k8s.io", "version": "v1", "kind": "Event"}
    assert req["object"]["note"] == "it happened"
