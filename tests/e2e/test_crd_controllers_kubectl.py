"""The controller-manager and custom resources, with kubectl: a CRD created while the controller-manager runs is
picked up through discovery; the garbage collector deletes ConfigMaps a custom object owns when it is deleted
(background and foreground; orphaned ones keep living) and custom objects a ConfigMap owns; a ResourceQuota counts
`count/<plural>.<group>`, its usage given back when a custom object is deleted."""
from __future__ import annotations

import functools
import json
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from tests.conftest import Kubectl
from tests.kubectls import RUN, namespace
from tests.waiting import wait_for

pytestmark = pytest.mark.stack
GROUP = f"gc{RUN}.example.com"
NAME = f"gadgets.{GROUP}"
RESOURCE = f"gadgets.{GROUP}"
WAIT = 60.0  # seconds a controller gets to converge (the machine is shared; no timing is asserted)

eventually = functools.partial(wait_for, timeout=WAIT, interval=0.2)

CRD = {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition", "metadata": {"name": NAME},
       "spec": {"group": GROUP, "scope": "Namespaced",
                "names": {"plural": "gadgets", "singular": "gadget", "kind": "Gadget"},
                "versions": [{"name": "v1", "served": True, "storage": True, "schema": {"openAPIV3Schema": {
                    "type": "object", "x-kubernetes-preserve-unknown-fields": True}}}]}}


@pytest.fixture(scope="module", autouse=True)
def gadgets(kubectl: Kubectl) -> Iterator[None]:
    kubectl.run("apply", "-f", "-", input=json.dumps(CRD))
    kubectl.run("wait", "--for=condition=Established", f"crd/{NAME}", "--timeout=30s")
    wait_for(lambda: kubectl.run("get", RESOURCE, "-A", check=False).returncode == 0, 10, "gadgets served")
    yield
    kubectl.run("delete", "crd", NAME, "--wait=false", check=False)


@pytest.fixture
def ns(kubectl: Kubectl) -> Iterator[str]:
    with namespace(kubectl, "crd-gc") as name:
        yield name


def gadget(kubectl: Kubectl, ns: str, name: str, owners: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """A Gadget, as an ownerReference to it."""
    meta: dict[str, Any] = {"name": name, "namespace": ns}
    if owners:
        meta["ownerReferences"] = owners
    kubectl.run("create", "-f", "-", input=yaml.safe_dump({"apiVersion": f"{GROUP}/v1", "kind": "Gadget",
                                                           "metadata": meta, "spec": {"size": 1}}))
    obj = kubectl.get_json("-n", ns, RESOURCE, name)
    assert obj is not None
    return {"apiVersion": f"{GROUP}/v1", "kind": "Gadget", "name": name, "uid": obj["metadata"]["uid"]}


def configmap(kubectl: Kubectl, ns: str, name: str, owner: dict[str, Any] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": ns}
    if owner:
        meta["ownerReferences"] = [owner]
    kubectl.run("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta,
                                                      "data": {"k": "v"}}))
    obj = kubectl.get_json("-n", ns, "cm", name)
    assert obj is not None
    return {"apiVersion": "v1", "kind": "ConfigMap", "name": name, "uid": obj["metadata"]["uid"]}


def test_background_deletion_of_a_custom_owner(kubectl: Kubectl, ns: str) -> None:
    owner = gadget(kubectl, ns, "owner")
    for d in ("d1", "d2"):
        configmap(kubectl, ns, d, owner)
    kubectl.run("-n", ns, "delete", RESOURCE, "owner", "--cascade=background")
    for d in ("d1", "d2"):
        eventually(lambda d=d: kubectl.get_json("-n", ns, "cm", d) is None, what=f"dependent {d} collected")


def test_foreground_deletion_of_a_custom_owner(kubectl: Kubectl, ns: str) -> None:
    owner = {**gadget(kubectl, ns, "owner"), "blockOwnerDeletion": True}
    kubectl.run("apply", "-f", "-", input=json.dumps({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "held", "namespace": ns, "finalizers": ["example.com/hold"], "ownerReferences": [owner]}}))
    configmap(kubectl, ns, "plain", owner)
    kubectl.run("-n", ns, "delete", RESOURCE, "owner", "--cascade=foreground", "--wait=false")
    eventually(lambda: kubectl.get_json("-n", ns, "cm", "plain") is None, what="the unblocked dependent collected")
    waiting = kubectl.get_json("-n", ns, RESOURCE, "owner")
    assert waiting is not None and "foregroundDeletion" in waiting["metadata"]["finalizers"]
    kubectl.run("-n", ns, "patch", "cm", "held", "--type=merge", "-p", '{"metadata":{"finalizers":null}}')
    eventually(lambda: kubectl.get_json("-n", ns, RESOURCE, "owner") is None,
               what="the custom owner goes once its blocking dependent is gone")


def test_orphan_deletion_of_a_custom_owner(kubectl: Kubectl, ns: str) -> None:
    owner = gadget(kubectl, ns, "owner")
    configmap(kubectl, ns, "kept", owner)
    kubectl.run("-n", ns, "delete", RESOURCE, "owner", "--cascade=orphan")
    eventually(lambda: kubectl.get_json("-n", ns, RESOURCE, "owner") is None,
               what="the custom owner deleted once its dependents are orphaned")
    kept = kubectl.get_json("-n", ns, "cm", "kept")
    assert kept is not None and not kept["metadata"].get("ownerReferences")


def test_custom_objects_owned_by_a_configmap(kubectl: Kubectl, ns: str) -> None:
    owner = configmap(kubectl, ns, "owner")
    gadget(kubectl, ns, "dep", [owner])
    gadget(kubectl, ns, "chained", [gadget(kubectl, ns, "middle", [owner])])
    kubectl.run("-n", ns, "delete", "cm", "owner")
    for name in ("dep", "middle", "chained"):
        eventually(lambda name=name: kubectl.get_json("-n", ns, RESOURCE, name) is None,
                   what=f"custom dependent {name} collected")


def used(kubectl: Kubectl, ns: str, key: str) -> str:
    return kubectl.run("-n", ns, "get", "resourcequota", "q", "-o",
                       f"jsonpath={{.status.used.{key.replace('.', chr(92) + '.')}}}").stdout


def test_quota_counts_custom_objects(kubectl: Kubectl, ns: str) -> None:
    key = f"count/gadgets.{GROUP}"
    gadget(kubectl, ns, "before")
    kubectl.run("-n", ns, "create", "quota", "q", f"--hard={key}=2")
    eventually(lambda: used(kubectl, ns, key) == "1", what="status.used counting the custom object")
    gadget(kubectl, ns, "second")
    assert used(kubectl, ns, key) == "2"
    refused = kubectl.run("-n", ns, "create", "-f", "-", check=False, input=yaml.safe_dump({
        "apiVersion": f"{GROUP}/v1", "kind": "Gadget", "metadata": {"name": "third"}}))
    assert refused.returncode != 0
    assert (f'gadgets.{GROUP} "third" is forbidden: exceeded quota: q, requested: {key}=1, used: {key}=2, '
            f"limited: {key}=2") in refused.stderr
    kubectl.run("-n", ns, "delete", RESOURCE, "before")
    eventually(lambda: used(kubectl, ns, key) == "1", what="usage given back after the delete")
    gadget(kubectl, ns, "third")
