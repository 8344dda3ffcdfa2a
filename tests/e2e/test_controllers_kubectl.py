"""The controller-manager on the shared stack, driven with kubectl: the garbage collector under each
cascade mode, dangling and cluster-scoped owners, blockOwnerDeletion; namespace deletion; the default
ServiceAccount and kube-root-ca.crt of every namespace."""
from __future__ import annotations

import functools
import json
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.conftest import Kubectl
from tests.kubectls import namespace
from tests.waiting import wait_for

WAIT = 60.0  # seconds a controller gets to converge (the machine is shared; no timing is asserted)


eventually = functools.partial(wait_for, timeout=WAIT, interval=0.2)


@pytest.fixture
def ns(kubectl: Kubectl) -> Iterator[str]:
    with namespace(kubectl, "gc") as name:
        yield name


def uid(kubectl: Kubectl, *args: str) -> str:
    obj = kubectl.get_json(*args)
    assert obj is not None
    return obj["metadata"]["uid"]


def dependent(kubectl: Kubectl, ns: str, name: str, owner: dict[str, Any]) -> None:
    kubectl.run("apply", "-f", "-", input=json.dumps({
        "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": ns,
                                                               "ownerReferences": [owner]}, "data": {"k": "v"}}))


def cm_owner(kubectl: Kubectl, ns: str, name: str, **extra: Any) -> dict[str, Any]:
    kubectl.run("-n", ns, "create", "configmap", name)
    return {"apiVersion": "v1", "kind": "ConfigMap", "name": name, "uid": uid(kubectl, "-n", ns, "cm", name), **extra}


def gone(kubectl: Kubectl, *args: str) -> Callable[[], bool]:
    return lambda: kubectl.get_json(*args) is None


def test_background_cascade_deletes_dependents(kubectl, ns):
    owner = cm_owner(kubectl, ns, "owner")
    for d in ("d1", "d2"):
        dependent(kubectl, ns, d, owner)
    kubectl.run("-n", ns, "delete", "cm", "owner", "--cascade=background")
    for d in ("d1", "d2"):
        eventually(gone(kubectl, "-n", ns, "cm", d), what=f"dependent {d} collected")


def test_orphan_cascade_keeps_dependents_without_the_reference(kubectl, ns):
    owner = cm_owner(kubectl, ns, "owner")
    dependent(kubectl, ns, "kept", owner)
    kubectl.run("-n", ns, "delete", "cm", "owner", "--cascade=orphan")
    eventually(gone(kubectl, "-n", ns, "cm", "owner"), what="owner deleted once its dependents are orphaned")
    kept = kubectl.get_json("-n", ns, "cm", "kept")
    assert kept is not None and not kept["metadata"].get("ownerReferences")


def test_foreground_cascade_with_block_owner_deletion(kubectl, ns):
    owner = cm_owner(kubectl, ns, "owner", blockOwnerDeletion=True)
    # a dependent the collector cannot delete yet: its own finalizer holds it, and with it the owner
    kubectl.run("apply", "-f", "-", input=json.dumps({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "held", "namespace": ns, "finalizers": ["example.com/hold"], "ownerReferences": [owner]}}))
    dependent(kubectl, ns, "plain", owner)
    kubectl.run("-n", ns, "delete", "cm", "owner", "--cascade=foreground", "--wait=false")
    eventually(gone(kubectl, "-n", ns, "cm", "plain"), what="the unblocked dependent collected")
    held = eventually(lambda: (o := kubectl.get_json("-n", ns, "cm", "held")) and
                      o["metadata"].get("deletionTimestamp") and o, what="the blocking dependent marked for deletion")
    assert held["metadata"]["finalizers"] == ["example.com/hold"]
    waiting = kubectl.get_json("-n", ns, "cm", "owner")
    assert waiting is not None and waiting["metadata"]["deletionTimestamp"]
    assert "foregroundDeletion" in waiting["metadata"]["finalizers"]
    kubectl.run("-n", ns, "patch", "cm", "held", "--type=merge", "-p", '{"metadata":{"finalizers":null}}')
    eventually(gone(kubectl, "-n", ns, "cm", "owner"), what="the owner goes once its blocking dependent is gone")


def test_dangling_owner(kubectl, ns):
    dependent(kubectl, ns, "orphaned", {"apiVersion": "v1", "kind": "ConfigMap", "name": "never",
                                         "uid": str(uuid.uuid4())})
    eventually(gone(kubectl, "-n", ns, "cm", "orphaned"), what="a dependent of an owner that does not exist collected")


def test_owner_with_a_reused_name_is_not_the_owner(kubectl, ns):
    kubectl.run("-n", ns, "create", "configmap", "owner")
    dependent(kubectl, ns, "stale", {"apiVersion": "v1", "kind": "ConfigMap", "name": "owner",
                                      "uid": str(uuid.uuid4())})
    eventually(gone(kubectl, "-n", ns, "cm", "stale"), what="a dependent whose owner's uid differs collected")
    assert kubectl.get_json("-n", ns, "cm", "owner") is not None


def test_cluster_scoped_owner_of_namespaced_dependent(kubectl, ns):
    role = f"{ns}-owner"
    kubectl.run("create", "clusterrole", role, "--verb=get", "--resource=configmaps")
    try:
        owner = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "name": role,
                 "uid": uid(kubectl, "clusterrole", role)}
        dependent(kubectl, ns, "owned", owner)
        dependent(kubectl, ns, "plain", {**owner, "name": "x", "uid": str(uuid.uuid4())})
        eventually(gone(kubectl, "-n", ns, "cm", "plain"), what="the other dependent (dangling) collected")
        assert kubectl.get_json("-n", ns, "cm", "owned") is not None  # its owner lives
        kubectl.run("delete", "clusterrole", role)
        eventually(gone(kubectl, "-n", ns, "cm", "owned"), what="the dependent of the deleted ClusterRole collected")
    finally:
        kubectl.run("delete", "clusterrole", role, "--ignore-not-found")


def test_live_owner_keeps_dependents(kubectl, ns):
    owner = cm_owner(kubectl, ns, "owner")
    other = cm_owner(kubectl, ns, "other")
    kubectl.run("apply", "-f", "-", input=json.dumps({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "shared", "namespace": ns, "ownerReferences": [owner, other]}}))
    kubectl.run("-n", ns, "delete", "cm", "owner")
    # one owner left: the dependent stays, its reference to the deleted owner removed
    eventually(lambda: [r["name"] for r in (kubectl.get_json("-n", ns, "cm", "shared") or {})
                        .get("metadata", {}).get("ownerReferences", [])] == ["other"],
               what="the reference to the deleted owner removed")


def test_deletecollection_with_propagation(kubectl, admin, ns):
    owners = {}
    for name, policy in (("orphaned", "Orphan"), ("cascaded", "Background")):
        kubectl.run("-n", ns, "create", "configmap", name)
        kubectl.run("-n", ns, "label", "configmap", name, f"policy={policy}")
        owners[policy] = {"apiVersion": "v1", "kind": "ConfigMap", "name": name,
                          "uid": uid(kubectl, "-n", ns, "cm", name)}
        dependent(kubectl, ns, f"{name}-dep", owners[policy])
    for policy in owners:
        r = admin.request("DELETE", f"/api/v1/namespaces/{ns}/configmaps", params={"labelSelector": f"policy={policy}"},
                          json={"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": policy})
        assert r.status_code == 200, r.text
    eventually(gone(kubectl, "-n", ns, "cm", "cascaded-dep"), what="Background: the dependent collected")
    eventually(gone(kubectl, "-n", ns, "cm", "orphaned"), what="Orphan: the owner goes once its dependent is orphaned")
    kept = kubectl.get_json("-n", ns, "cm", "orphaned-dep")
    assert kept is not None and not kept["metadata"].get("ownerReferences")


def test_namespace_deletion_empties_it(kubectl):
    name = f"gone-{uuid.uuid4().hex[:8]}"
    kubectl.run("create", "namespace", name)
    kubectl.run("-n", name, "create", "configmap", "c", "--from-literal=a=b")
    kubectl.run("-n", name, "create", "secret", "generic", "s", "--from-literal=a=b")
    kubectl.run("-n", name, "create", "serviceaccount", "bot")
    kubectl.run("apply", "-f", "-", input=json.dumps({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "held", "namespace": name, "finalizers": ["example.com/hold"]}}))
    kubectl.run("delete", "namespace", name, "--wait=false")
    ns = eventually(lambda: (o := kubectl.get_json("namespace", name)) and any(
        c["type"] == "NamespaceFinalizersRemaining" and c["status"] == "True"
        for c in o.get("status", {}).get("conditions", [])) and o, what="the namespace says what it waits for")
    assert ns["status"]["phase"] == "Terminating"
    conds = {c["type"]: c for c in ns["status"]["conditions"]}
    assert conds["NamespaceContentRemaining"]["reason"] == "SomeResourcesRemain"
    assert "configmaps. has 1 resource instances" in conds["NamespaceContentRemaining"]["message"]
    assert "example.com/hold in 1 resource instances" in conds["NamespaceFinalizersRemaining"]["message"]
    assert conds["NamespaceDeletionDiscoveryFailure"]["status"] == "False"
    assert kubectl.run("-n", name, "get", "secrets,serviceaccounts", "-o", "name").stdout.strip() == ""
    kubectl.run("-n", name, "patch", "cm", "held", "--type=merge", "-p", '{"metadata":{"finalizers":null}}')
    eventually(gone(kubectl, "namespace", name), what="the namespace deleted once empty")


def test_default_serviceaccount_and_root_ca_in_every_namespace(kubectl, stack, ns):
    ca = (stack.state / "pki" / "ca.crt").read_text()
    eventually(lambda: kubectl.get_json("-n", ns, "serviceaccount", "default"), what="default ServiceAccount created")
    cm = eventually(lambda: kubectl.get_json("-n", ns, "configmap", "kube-root-ca.crt"), what="kube-root-ca.crt created")
    assert cm["data"] == {"ca.crt": ca}
    kubectl.run("-n", ns, "delete", "serviceaccount", "default")
    kubectl.run("-n", ns, "delete", "configmap", "kube-root-ca.crt")
    eventually(lambda: kubectl.get_json("-n", ns, "serviceaccount", "default"), what="default ServiceAccount recreated")
    eventually(lambda: kubectl.get_json("-n", ns, "configmap", "kube-root-ca.crt"), what="kube-root-ca.crt recreated")
    kubectl.run("-n", ns, "patch", "configmap", "kube-root-ca.crt", "--type=merge", "-p", '{"data":{"ca.crt":"x"}}')
    eventually(lambda: (kubectl.get_json("-n", ns, "configmap", "kube-root-ca.crt") or {}).get("data") == {"ca.crt": ca},
               what="kube-root-ca.crt restored")


def test_controller_manager_lease(kubectl):
    out = kubectl.run("-n", "kube-system", "get", "lease", "kube-controller-manager").stdout.split("\n")
    assert out[0].split() == ["NAME", "HOLDER", "AGE"]
    lease = kubectl.get_json("-n", "kube-system", "lease", "kube-controller-manager")
    assert lease["spec"]["leaseDurationSeconds"] == 15 and lease["spec"]["holderIdentity"]
    # its requests carry kube's User-Agent, so its writes are recorded under kube's field manager
    lease = kubectl.get_json("-n", "kube-system", "lease", "kube-controller-manager", "--show-managed-fields")
    assert "kube-controller-manager" in {m["manager"] for m in lease["metadata"]["managedFields"]}
