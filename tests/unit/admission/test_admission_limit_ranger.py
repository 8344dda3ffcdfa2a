"""LimitRanger: a namespace's LimitRanges default and bound its Pods' containers, with kube's annotation and
messages."""
from __future__ import annotations

from typing import Any

import pytest

from apiary_pb import admission_pb2 as adpb
from apiary_pb import envelope_pb2 as pb
from services.admission.attributes import Attributes
from services.admission.chain import Chain
from services.admission.informers import InformerFactory
from services.admission.plugins import ORDER
from services.admission.plugins.limit_ranger import LimitRanger
from services.apis.install import new_catalogue
from services.common.envelope import to_envelope
from services.common.errors import Forbidden

CATALOGUE = new_catalogue()

NS = "team"


def limit_range(name: str, **item: Any) -> dict:
    return {"apiVersion": "v1", "kind": "LimitRange", "metadata": {"name": name, "namespace": NS},
            "spec": {"limits": [{"type": "Container", **item}]}}


def pod(*containers: dict, init: tuple[dict, ...] = ()) -> dict:
    spec: dict[str, Any] = {"containers": list(containers)}
    if init:
        spec["initContainers"] = list(init)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": NS}, "spec": spec}


def attributes(obj: dict, resource: str = "pods") -> Attributes:
    r = adpb.AdmissionRequest(operation="CREATE", attributes=pb.RequestAttributes(
        api_version="v1", resource=resource, namespace=NS, name="p"))
    r.object.CopyFrom(to_envelope(obj))
    return Attributes(r, CATALOGUE)


def plugin(*ranges: dict) -> LimitRanger:
    p = LimitRanger(InformerFactory(object()))  # type: ignore[arg-type]  # created, never started
    for lr in ranges:
        p.ranges.store[f"{NS}/{lr['metadata']['name']}"] = lr
    p.ranges.synced.set()
    return p


def test_runs_after_namespace_lifecycle():
    assert ORDER[:2] == ("NamespaceLifecycle", "LimitRanger")


async def test_defaults_requests_and_limits_with_the_annotation():
    p = plugin(limit_range("lr", default={"cpu": "500m", "memory": "256Mi"}, defaultRequest={"cpu": "100m"}))
    a = attributes(pod({"name": "web", "resources": {"limits": {"memory": "1Gi"}}}, init=({"name": "setup"},)))
    await p.admit(a)
    got = a.object
    web, setup = got["spec"]["containers"][0], got["spec"]["initContainers"][0]
    assert web["resources"] == {"limits": {"memory": "1Gi", "cpu": "500m"}, "requests": {"cpu": "100m"}}
    assert setup["resources"] == {"limits": {"cpu": "500m", "memory": "256Mi"}, "requests": {"cpu": "100m"}}
    assert got["metadata"]["annotations"]["kubernetes.io/limit-ranger"] == (
        "LimitRanger plugin set: cpu request for init container setup; cpu, memory limit for init container "
        "setup; cpu request for container web; cpu limit for container web")


async def test_bounds_with_kubes_messages():
    p = plugin(limit_range("lr", min={"cpu": "100m"}, max={"cpu": "1"}, maxLimitRequestRatio={"cpu": "2"}))
    ok = attributes(pod({"name": "a", "resources": {"requests": {"cpu": "500m"}, "limits": {"cpu": "1"}}}))
    await p.validate(ok)
    bad = attributes(pod({"name": "a", "resources": {"requests": {"cpu": "50m"}, "limits": {"cpu": "2"}}}))
    with pytest.raises(Forbidden) as e:
        await p.validate(bad)
    assert e.value.message == (
        'pods "p" is forbidden: [minimum cpu usage per Container is 100m, but request is 50m, maximum cpu usage '
        "per Container is 1, but limit is 2, cpu max limit to request ratio per Container is 2, but provided "
        "ratio is 40.000000]")
    with pytest.raises(Forbidden) as e:
        await p.validate(attributes(pod({"name": "a"})))
    assert "minimum cpu usage per Container is 100m.  No request is specified" in e.value.message


async def test_other_namespaces_and_resources_are_left_alone():
    p = plugin(limit_range("lr", default={"cpu": "1"}))
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "p", "namespace": NS}}
    chain = Chain([p])
    a = attributes(cm, resource="configmaps")
    assert chain.concerned("admit", a) == () and not chain.has_validators(a)
    await chain.admit(a)
    assert a.object == cm
    elsewhere = pod({"name": "a"})
    elsewhere["metadata"]["namespace"] = "other"
    r = adpb.AdmissionRequest(operation="CREATE", attributes=pb.RequestAttributes(
        api_version="v1", resource="pods", namespace="other", name="p"))
    r.object.CopyFrom(to_envelope(elsewhere))
    a = Attributes(r, CATALOGUE)
    await p.admit(a)
    assert "resources" not in a.object["spec"]["containers"][0]


async def test_a_pod_with_nothing_to_default_is_left_as_it_came():
    """The pod is changed in place: when no default applies (a range of bounds only, containers naming every
    defaulted resource, an empty resources map) nothing is added, removed or replaced, and there is no patch."""
    p = plugin(limit_range("bounds", min={"cpu": "100m"}),
               limit_range("defaults", default={"cpu": "1"}, defaultRequest={"memory": "64Mi"}))
    came = pod({"name": "full", "resources": {"limits": {"cpu": "2"}, "requests": {"memory": "1Gi"}}},
               init=({"name": "setup", "resources": {"limits": {"cpu": "1"}, "requests": {"memory": "1Gi"}}},))
    a = attributes(came)
    await p.admit(a)
    assert a.object == came and a.patch() == b"" and a.object_pb() is a.request.object
    bounds_only = plugin(limit_range("bounds", min={"cpu": "100m"}, max={"cpu": "2"}))
    came = pod({"name": "bare"}, {"name": "empty", "resources": {}})
    a = attributes(came)
    await bounds_only.admit(a)
    assert a.object == came and a.patch() == b"" and a.object_pb() is a.request.object
    assert "resources" not in a.object["spec"]["containers"][0]
    assert a.object["spec"]["containers"][1]["resources"] == {}
