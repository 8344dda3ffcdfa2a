from __future__ import annotations

import jsonpatch
import orjson
import pytest

from apiary_pb import admission_pb2 as adpb
from apiary_pb import envelope_pb2 as pb
from services.admission.__main__ import build_chain, parse_args, resolve_plugins
from services.admission.attributes import Attributes
from services.admission.chain import Chain
from services.admission.configfile import load_admission_configuration
from services.admission.plugin import Plugin
from services.admission.plugins import enabled_plugins
from services.admission.server import AdmissionServicer
from services.apis.install import new_catalogue
from services.apiserver.fielderrors import ConfigError
from services.common.envelope import from_envelope, to_envelope
from services.common.errors import Forbidden

CATALOGUE = new_catalogue()


class AddLabel(Plugin):
    name = "AddLabel"
    operations = frozenset({"CREATE"})

    def __init__(self, calls: list[str]) -> None:
        self.calls = calls

    async def admit(self, a: Attributes) -> None:
        self.calls.append("admit")
        obj = a.object
        obj["metadata"].setdefault("labels", {})["added"] = "yes"
        a.set_object(obj)
        a.warnings.append("labelled")


class DenyAll(Plugin):
    name = "DenyAll"

    def __init__(self, calls: list[str]) -> None:
        self.calls = calls

    async def validate(self, a: Attributes) -> None:
        self.calls.append("validate")
        raise Forbidden("no")


def cm_request(op: str = "CREATE") -> Attributes:
    r = adpb.AdmissionRequest(operation=op, attributes=pb.RequestAttributes(
        api_version="v1", resource="configmaps", namespace="a", name="cm"))
    r.object.CopyFrom(to_envelope({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm"}}))
    return Attributes(r, CATALOGUE)


async def test_mutating_then_validating() -> None:
    calls: list[str] = []
    chain = Chain([AddLabel(calls), DenyAll(calls)])
    assert [p.name for p in chain.mutating] == ["AddLabel"]
    assert [p.name for p in chain.validating] == ["DenyAll"]
    a = cm_request()
    await chain.admit(a)
    assert from_envelope(a.object_pb())["metadata"]["labels"] == {"added": "yes"}
    assert a.warnings == ["labelled"]
    with pytest.raises(Forbidden):
        await chain.validate(a)
    assert calls == ["admit", "validate"]
    # a plugin only sees the operations it handles
    u = cm_request("UPDATE")
    await chain.admit(u)
    assert calls == ["admit", "validate"]
    assert u.object_pb() is u.request.object


async def test_admit_answers_a_patch_not_the_object() -> None:
    """The servicer answers a mutation as a JSON Patch against the request's object."""
    servicer = AdmissionServicer(Chain([AddLabel([])]), CATALOGUE)
    req = cm_request().request
    resp = await servicer.Admit(req, None)
    assert orjson.loads(resp.patch) == [{"op": "add", "path": "/metadata/labels", "value": {"added": "yes"}}]
    assert resp.warnings == ["labelled"] and resp.no_validators
    assert jsonpatch.apply_patch(from_envelope(req.object), orjson.loads(resp.patch))["metadata"]["labels"] == {
        "added": "yes"}
    untouched = await servicer.Admit(cm_request("UPDATE").request, None)
    assert untouched.patch == b""


WEBHOOKS = ["MutatingAdmissionWebhook", "ValidatingAdmissionWebhook"]


def test_enabled_plugins() -> None:
    default = ["NamespaceLifecycle", "LimitRanger", "ServiceAccount", "Priority", "DefaultTolerationSeconds",
               "DefaultStorageClass", "StorageObjectInUseProtection",
               "CertificateApproval", "CertificateSigning", "CertificateSubjectRestriction",
               "MutatingAdmissionPolicy", "MutatingAdmissionWebhook", "ValidatingAdmissionPolicy",
               "ValidatingAdmissionWebhook", "ResourceQuota"]
    assert enabled_plugins("", "") == default
    assert enabled_plugins("NamespaceLifecycle", "") == default
    assert enabled_plugins("", "NamespaceLifecycle") == default[1:]
    assert enabled_plugins("", ",".join(default)) == []
    assert enabled_plugins("", ",".join(WEBHOOKS)) == [p for p in default if p not in WEBHOOKS]
    with pytest.raises(ValueError, match="is unknown"):
        enabled_plugins("Bogus", "")
    with pytest.raises(ValueError, match="overlapped"):
        enabled_plugins("NamespaceLifecycle", "NamespaceLifecycle")


def test_flags_and_chain_build() -> None:
    names, configs = resolve_plugins(parse_args(["--disable-admission-plugins",
                                                "MutatingAdmissionPolicy,ValidatingAdmissionPolicy,ResourceQuota,"
                                                "MutatingAdmissionWebhook,ValidatingAdmissionWebhook,LimitRanger,ServiceAccount,"
                                                    "Priority,DefaultTolerationSeconds,DefaultStorageClass,"
                                                    "StorageObjectInUseProtection,"
                                                    "CertificateApproval,CertificateSigning,CertificateSubjectRestriction"]))
    assert names == ["NamespaceLifecycle"] and configs == {}
    chain = build_chain(names, configs, registry=object(), catalogue=CATALOGUE)  # the informer is created, not started
    assert [p.name for p in chain.mutating] == ["NamespaceLifecycle"]
    assert chain.not_ready() == ["NamespaceLifecycle"]
    with pytest.raises(SystemExit):
        resolve_plugins(parse_args(["--enable-admission-plugins", "AlwaysPullImages"]))


def test_admission_configuration_file(tmp_path) -> None:
    (tmp_path / "limits.yaml").write_text("apiVersion: eventratelimit.admission.k8s.io/v1alpha1\n"
                                          "kind: Configuration\nlimits: []\n")
    f = tmp_path / "admission.yaml"
    f.write_text("""
apiVersion: apiserver.config.k8s.io/v1
kind: AdmissionConfiguration
plugins:
- name: EventRateLimit
  path: limits.yaml
- name: PodSecurity
  configuration:
    apiVersion: pod-security.admission.config.k8s.io/v1
    kind: PodSecurityConfiguration
- name: NamespaceLifecycle
""")
    cfg = load_admission_configuration(str(f))
    assert cfg["EventRateLimit"]["kind"] == "Configuration"
    assert cfg["PodSecurity"]["kind"] == "PodSecurityConfiguration"
    assert cfg["NamespaceLifecycle"] is None
    names, configs = resolve_plugins(parse_args(["--admission-control-config-file", str(f)]))
    assert names == ["NamespaceLifecycle", "LimitRanger", "ServiceAccount", "Priority", "DefaultTolerationSeconds",
                     "DefaultStorageClass", "StorageObjectInUseProtection",
                     "CertificateApproval", "CertificateSigning", "CertificateSubjectRestriction",
                     "MutatingAdmissionPolicy", "MutatingAdmissionWebhook", "ValidatingAdmissionPolicy",
                     "ValidatingAdmissionWebhook", "ResourceQuota"] and "PodSecurity" in configs

    bad = tmp_path / "bad.yaml"
    bad.write_text("apiVersion: v1\nkind: ConfigMap\n")
    with pytest.raises(ConfigError):
        load_admission_configuration(str(bad))
    with pytest.raises(ConfigError):
        load_admission_configuration(str(tmp_path / "missing.yaml"))


class PodsOnly(Plugin):
    """Declares what it concerns: pods proper, CREATE; it records every call it gets."""
    name = "PodsOnly"
    operations = frozenset({"CREATE"})
    resources = frozenset({("", "pods")})
    subresources = False

    def __init__(self, calls: list[str]) -> None:
        self.calls = calls

    async def admit(self, a: Attributes) -> None:
        self.calls.append(f"admit {a.resource}/{a.subresource}")

    async def validate(self, a: Attributes) -> None:
        self.calls.append(f"validate {a.resource}/{a.subresource}")


class Undeclared:
    """An entry point plug-in on the protocol alone (no Plugin base, nothing declared): asked about everything."""
    name = "Undeclared"

    def __init__(self, calls: list[str]) -> None:
        self.calls = calls

    def handles(self, operation: str) -> bool:
        return True

    async def validate(self, a: Attributes) -> None:
        self.calls.append(f"undeclared {a.resource}")


def request(resource: str, subresource: str = "", op: str = "CREATE") -> Attributes:
    r = adpb.AdmissionRequest(operation=op, attributes=pb.RequestAttributes(
        api_version="v1", resource=resource, subresource=subresource, namespace="a", name="x"))
    r.object.CopyFrom(to_envelope({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "x"}}))
    return Attributes(r, CATALOGUE)


async def test_the_chain_asks_only_the_plugins_a_request_concerns() -> None:
    calls: list[str] = []
    chain = Chain([PodsOnly(calls)])
    for a in (request("configmaps"), request("pods", "status"), request("pods", op="UPDATE")):
        await chain.admit(a)
        assert not chain.has_validators(a)
        await chain.validate(a)
    assert calls == []
    pod = request("pods")
    await chain.admit(pod)
    assert chain.has_validators(pod)
    await chain.validate(pod)
    assert calls == ["admit pods/", "validate pods/"]
    # one without declarations is asked about every resource
    chain = Chain([PodsOnly(calls), Undeclared(calls)])
    assert chain.has_validators(request("configmaps"))
    await chain.validate(request("configmaps"))
    assert calls[-1] == "undeclared configmaps"


async def test_no_reinvocation_context_without_a_reinvocable_plugin() -> None:
    """The context of kube's reinvoker is made only when a webhook or policy that can run twice asks for it."""
    a = cm_request()
    await Chain([AddLabel([]), DenyAll([])]).admit(a)
    assert a._reinvocation is None and not a.should_reinvoke
