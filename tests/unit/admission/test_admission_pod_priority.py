"""Priority and DefaultTolerationSeconds: kube's default-on pod plug-ins, with kube's texts and order."""
from __future__ import annotations

from typing import Any

import pytest

from apiary_pb import admission_pb2 as adpb
from apiary_pb import envelope_pb2 as pb
from services.admission.__main__ import parse_args, resolve_plugins
from services.admission.attributes import Attributes
from services.admission.chain import Chain
from services.admission.plugins import ORDER, enabled_plugins, factory_for
from services.admission.plugins.default_toleration_seconds import DefaultTolerationSeconds
from services.admission.plugins.priority import Priority
from services.apis.install import new_catalogue
from services.common.envelope import to_envelope
from services.common.errors import Forbidden

CATALOGUE = new_catalogue()

NS = "team"


def pod(**spec: Any) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": NS},
            "spec": {"containers": [{"name": "c", "image": "busybox"}], **spec}}


def priority_class(name: str, value: int, default: bool = False, policy: str = "PreemptLowerPriority") -> dict:
    return {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": name},
            "value": value, "globalDefault": default, "preemptionPolicy": policy}


def attributes(obj: dict, operation: str = "CREATE", old: dict | None = None, resource: str = "pods",
               group: str = "", subresource: str = "") -> Attributes:
    meta = obj["metadata"]
    r = adpb.AdmissionRequest(operation=operation, attributes=pb.RequestAttributes(
        api_group=group, api_version="v1", resource=resource, subresource=subresource,
        namespace=meta.get("namespace", ""), name=meta["name"]))
    r.object.CopyFrom(to_envelope(obj))
    if old is not None:
        r.old_object.CopyFrom(to_envelope(old))
    return Attributes(r, CATALOGUE)


class _NoRegistry:
    """Stands for the registry: a live read of a class the informer lacks finds nothing."""

    def Handle(self, req, timeout=None):
        async def answer():
            return type("R", (), {"code": 404, "body": b"{}"})()
        return answer()


def priority_plugin(*classes: dict) -> Priority:
    p = Priority(_NoRegistry())  # type: ignore[arg-type]  # informers created, never started
    for pc in classes:
        p.informer.store[pc["metadata"]["name"]] = pc
    p.informer.synced.set()
    return p


def test_kube_order_and_default_on():
    assert ORDER.index("ServiceAccount") < ORDER.index("Priority") < ORDER.index("DefaultTolerationSeconds") \
        < ORDER.index("MutatingAdmissionPolicy")
    on = enabled_plugins("", "")
    assert "Priority" in on and "DefaultTolerationSeconds" in on
    assert "Priority" not in enabled_plugins("", "Priority,DefaultTolerationSeconds")
    assert "DefaultTolerationSeconds" not in enabled_plugins("", "Priority,DefaultTolerationSeconds")


async def test_class_name_gives_priority_and_policy():
    p = priority_plugin(priority_class("high", 1000, policy="Never"))
    a = attributes(pod(priorityClassName="high"))
    await p.admit(a)
    assert (a.object["spec"]["priority"], a.object["spec"]["preemptionPolicy"]) == (1000, "Never")


async def test_unknown_class_is_forbidden_with_kube_text():
    p = priority_plugin()
    with pytest.raises(Forbidden) as e:
        await p.admit(attributes(pod(priorityClassName="nope")))
    assert e.value.message == 'pods "p" is forbidden: no PriorityClass with name nope was found'


async def test_no_class_and_no_default_gives_zero():
    p = priority_plugin(priority_class("high", 1000))
    a = attributes(pod())
    await p.admit(a)
    spec = a.object["spec"]
    assert (spec["priority"], spec["preemptionPolicy"], spec.get("priorityClassName")) == \
        (0, "PreemptLowerPriority", None)


async def test_global_default_applies_the_lowest_when_several():
    p = priority_plugin(priority_class("d1", 500, default=True), priority_class("d2", 100, default=True),
                        priority_class("other", 7))
    a = attributes(pod())
    await p.admit(a)
    assert (a.object["spec"]["priorityClassName"], a.object["spec"]["priority"]) == ("d2", 100)


async def test_pod_priority_differing_from_the_class_is_forbidden():
    p = priority_plugin(priority_class("high", 1000))
    with pytest.raises(Forbidden) as e:
        await p.admit(attributes(pod(priorityClassName="high", priority=5)))
    assert e.value.message.endswith("the integer value of priority (5) must not be provided in pod spec; priority "
                                    "admission controller computed 1000 from the given PriorityClass name")
    with pytest.raises(Forbidden) as e:
        await p.admit(attributes(pod(priorityClassName="high", preemptionPolicy="Never")))
    assert "the string value of PreemptionPolicy (Never) must not be provided in pod spec; priority admission " \
           "controller computed PreemptLowerPriority" in e.value.message
    a = attributes(pod(priorityClassName="high", priority=1000))  # the same value is accepted
    await p.admit(a)
    assert a.object["spec"]["priority"] == 1000


async def test_update_keeps_what_create_set():
    p = priority_plugin()
    old = pod(priorityClassName="high", priority=1000, preemptionPolicy="Never")
    a = attributes(pod(priorityClassName="high"), operation="UPDATE", old=old)
    await p.admit(a)
    assert (a.object["spec"]["priority"], a.object["spec"]["preemptionPolicy"]) == (1000, "Never")


async def test_subresources_and_other_kinds_are_left_alone():
    """The chain asks the pod plug-ins about pods proper only (what they declare), in either phase."""
    chain = Chain([priority_plugin(priority_class("d1", 500, default=True)), DefaultTolerationSeconds()])
    a = attributes(pod(priorityClassName="nope"), subresource="status")
    await chain.admit(a)
    assert a.object == pod(priorityClassName="nope")
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "p", "namespace": NS}}
    assert chain.concerned("admit", attributes(cm, resource="configmaps")) == ()
    assert not chain.has_validators(attributes(cm, resource="configmaps"))
    # a second default class is refused in the validating phase, which concerns PriorityClasses only
    second = attributes(priority_class("d2", 5, default=True), resource="priorityclasses", group="scheduling.k8s.io")
    assert [p.name for p in chain.concerned("admit", second)] == []
    assert chain.has_validators(second)
    with pytest.raises(Forbidden):
        await chain.validate(second)
    assert not chain.has_validators(attributes(pod(), resource="pods"))


async def test_only_one_global_default():
    p = priority_plugin(priority_class("d1", 500, default=True))
    with pytest.raises(Forbidden) as e:
        await p.validate(attributes(priority_class("d2", 5, default=True), resource="priorityclasses",
                                    group="scheduling.k8s.io"))
    assert e.value.message == ('priorityclasses.scheduling.k8s.io "d2" is forbidden: PriorityClass d1 is marked '
                               'as default. Only one default can exist')
    with pytest.raises(Forbidden):  # marking another class default on update
        await p.validate(attributes(priority_class("d2", 5, default=True), operation="UPDATE",
                                    old=priority_class("d2", 5), resource="priorityclasses",
                                    group="scheduling.k8s.io"))
    # the default itself may be updated; a class that is not default is always fine
    await p.validate(attributes(priority_class("d1", 500, default=True), operation="UPDATE",
                                old=priority_class("d1", 500, default=True), resource="priorityclasses",
                                group="scheduling.k8s.io"))
    await p.validate(attributes(priority_class("d3", 5), resource="priorityclasses", group="scheduling.k8s.io"))
    await priority_plugin().validate(attributes(priority_class("d2", 5, default=True),
                                                resource="priorityclasses", group="scheduling.k8s.io"))


NOT_READY = {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute",
             "tolerationSeconds": 300}
UNREACHABLE = {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute",
               "tolerationSeconds": 300}


async def test_default_tolerations_added():
    a = attributes(pod(tolerations=[{"key": "gpu", "operator": "Exists"}]))
    await DefaultTolerationSeconds().admit(a)
    assert a.object["spec"]["tolerations"] == [{"key": "gpu", "operator": "Exists"}, NOT_READY, UNREACHABLE]


@pytest.mark.parametrize("existing, added", [
    ({"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 10},
     [UNREACHABLE]),
    ({"key": "node.kubernetes.io/unreachable", "operator": "Exists"}, [NOT_READY]),  # no effect: any effect
    ({"operator": "Exists"}, []),  # no key: every taint
    ({"operator": "Exists", "effect": "NoSchedule"}, [NOT_READY, UNREACHABLE]),
])
async def test_existing_tolerations_count(existing, added):
    a = attributes(pod(tolerations=[existing]))
    await DefaultTolerationSeconds().admit(a)
    assert a.object["spec"]["tolerations"] == [existing] + added


async def test_toleration_seconds_from_the_flags():
    args = parse_args(["--default-not-ready-toleration-seconds", "60",
                       "--default-unreachable-toleration-seconds", "90"])
    _, configs = resolve_plugins(args)
    plugin = factory_for("DefaultTolerationSeconds")(configs["DefaultTolerationSeconds"], None)
    a = attributes(pod())
    await plugin.admit(a)
    assert [t["tolerationSeconds"] for t in a.object["spec"]["tolerations"]] == [60, 90]
