"""What kube does to pods that users take for granted, through kubectl (1.32 on the PATH, 1.27 and 1.33
beside it): the Priority and DefaultTolerationSeconds admission plug-ins, one globalDefault PriorityClass,
`kubectl drain` evicting pods under a PodDisruptionBudget (429 while it allows no disruption) and per-kind
field selectors."""
from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from tests.conftest import Kubectl
from tests.kubectls import namespace, tag
from tests.waiting import wait_for

pytestmark = pytest.mark.stack


@pytest.fixture(scope="module")
def ns(kubectl: Kubectl) -> Iterator[str]:
    with namespace(kubectl, "podadm") as name:
        # the ServiceAccount plug-in refuses pods until the controller has made the namespace's default account
        wait_for(lambda: kubectl.run("-n", name, "get", "serviceaccount", "default", check=False).returncode == 0,
                 what="the default ServiceAccount")
        yield name


def pod_manifest(name: str, ns: str, **spec: Any) -> str:
    return json.dumps({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": ns},
                       "spec": {"containers": [{"name": "c", "image": "busybox"}], **spec}})


def get(kctl: Kubectl, *args: str) -> Any:
    return json.loads(kctl.run("get", *args, "-o", "json").stdout)


DEFAULT_TOLERATIONS = [
    {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
    {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}]


def test_priority_class_and_default_tolerations(kctl: Kubectl, ns: str) -> None:
    pc = f"podadm-{tag(kctl)}"  # test_kinds_kubectl names its classes pc-<tag> and leaves them
    kctl.run("create", "priorityclass", pc, "--value=1000", "--preemption-policy=Never")
    try:
        kctl.run("create", "-f", "-", input=pod_manifest(f"prio-{tag(kctl)}", ns, priorityClassName=pc))
        spec = get(kctl, "-n", ns, "pod", f"prio-{tag(kctl)}")["spec"]
        assert (spec["priority"], spec["preemptionPolicy"]) == (1000, "Never")
        assert spec["tolerations"] == DEFAULT_TOLERATIONS
        bad = kctl.run("create", "-f", "-", input=pod_manifest(f"nope-{tag(kctl)}", ns, priorityClassName="nope"),
                       check=False)
        assert bad.returncode != 0
        assert f'pods "nope-{tag(kctl)}" is forbidden: no PriorityClass with name nope was found' in bad.stderr
        bad = kctl.run("create", "-f", "-", check=False, input=pod_manifest(
            f"mismatch-{tag(kctl)}", ns, priorityClassName=pc, priority=5))
        assert "the integer value of priority (5) must not be provided in pod spec; priority admission " \
               "controller computed 1000 from the given PriorityClass name" in bad.stderr
        own = [{"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute",
                "tolerationSeconds": 30}]
        kctl.run("create", "-f", "-", input=pod_manifest(f"tol-{tag(kctl)}", ns, tolerations=own))
        spec = get(kctl, "-n", ns, "pod", f"tol-{tag(kctl)}")["spec"]
        assert spec["tolerations"] == own + DEFAULT_TOLERATIONS[1:]
        assert (spec["priority"], spec["preemptionPolicy"]) == (0, "PreemptLowerPriority")
    finally:
        kctl.run("delete", "priorityclass", pc, check=False)


def test_one_global_default(kctl: Kubectl, ns: str) -> None:
    first, second = f"gd-{tag(kctl)}", f"gd2-{tag(kctl)}"
    kctl.run("create", "priorityclass", first, "--value=50", "--global-default=true")
    try:
        def defaulted() -> bool:  # the admission service's informer has the new class
            out = kctl.run("create", "-f", "-", "--dry-run=server", "-o", "json",
                           input=pod_manifest(f"d-{tag(kctl)}", ns)).stdout
            return json.loads(out)["spec"].get("priorityClassName") == first
        wait_for(defaulted, what="pods to get the globalDefault class")
        out = json.loads(kctl.run("create", "-f", "-", "-o", "json", input=pod_manifest(f"d-{tag(kctl)}", ns)).stdout)
        assert (out["spec"]["priorityClassName"], out["spec"]["priority"]) == (first, 50)
        bad = kctl.run("create", "priorityclass", second, "--value=60", "--global-default=true", check=False)
        assert bad.returncode != 0
        assert f"PriorityClass {first} is marked as default. Only one default can exist" in bad.stderr
    finally:
        kctl.run("delete", "priorityclass", first, second, "--ignore-not-found", check=False)


def test_drain_honours_the_disruption_budget(kctl: Kubectl, ns: str) -> None:
    node, app = f"node-{tag(kctl)}", f"ev-{tag(kctl)}"
    kctl.run("create", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "Node",
                                                     "metadata": {"name": node}}))
    try:
        for name in (f"{app}-a", f"{app}-b"):
            manifest = json.loads(pod_manifest(name, ns, nodeName=node))
            manifest["metadata"]["labels"] = {"app": app}
            kctl.run("create", "-f", "-", input=json.dumps(manifest))
            kctl.run("-n", ns, "patch", "pod", name, "--subresource=status", "--type=merge", "-p", json.dumps(
                {"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}}))
        # field selectors: the pods on the node, the running ones
        on_node = kctl.run("get", "pods", "-A", "--field-selector", f"spec.nodeName={node}", "-o", "name").stdout
        assert sorted(on_node.split()) == [f"pod/{app}-a", f"pod/{app}-b"]
        kctl.run("-n", ns, "create", "pdb", app, f"--selector=app={app}", "--min-available=2")
        status = {"observedGeneration": 1, "disruptionsAllowed": 0, "currentHealthy": 2, "desiredHealthy": 2,
                  "expectedPods": 2}
        kctl.run("-n", ns, "patch", "pdb", app, "--subresource=status", "--type=merge", "-p",
                 json.dumps({"status": status}))
        drain = ("drain", node, "--force", "--ignore-daemonsets", "--delete-emptydir-data")
        refused = kctl.run(*drain, "--timeout=3s", check=False)
        assert refused.returncode != 0
        assert "Cannot evict pod as it would violate the pod's disruption budget." in refused.stderr
        assert kctl.run("-n", ns, "get", "pod", f"{app}-a", check=False).returncode == 0
        # cordoned by the drain: spec.unschedulable selects it
        cordoned = kctl.run("get", "nodes", "--field-selector", "spec.unschedulable=true", "-o", "name").stdout
        assert f"node/{node}" in cordoned.split()
        kctl.run("-n", ns, "patch", "pdb", app, "--subresource=status", "--type=merge", "-p",
                 json.dumps({"status": {**status, "disruptionsAllowed": 2}}))
        kctl.run(*drain, "--timeout=30s")
        left = kctl.run("get", "pods", "-A", "--field-selector", f"spec.nodeName={node}", "-o", "name").stdout
        assert left.split() == []
        pdb = get(kctl, "-n", ns, "pdb", app)["status"]
        assert pdb["disruptionsAllowed"] == 0 and sorted(pdb["disruptedPods"]) == [f"{app}-a", f"{app}-b"]
    finally:
        kctl.run("delete", "node", node, check=False)


def test_field_selectors(kctl: Kubectl, ns: str) -> None:
    kctl.run("create", "-f", "-", input=pod_manifest(f"fs-{tag(kctl)}", ns, restartPolicy="Never"))
    out = kctl.run("-n", ns, "get", "pods", "--field-selector",
                   f"spec.restartPolicy=Never,status.phase=Pending,metadata.name=fs-{tag(kctl)}", "-o", "name")
    assert out.stdout.split() == [f"pod/fs-{tag(kctl)}"]
    for resource, label in (("pods", "spec.bogus"), ("namespaces", "metadata.namespace"),
                            ("services", "spec.ports"), ("secrets", "data")):
        bad = kctl.run("-n", ns, "get", resource, "--field-selector", f"{label}=x", check=False)
        assert bad.returncode != 0 and f"field label not supported: {label}" in bad.stderr, bad.stderr
    secrets = kctl.run("-n", ns, "get", "secrets", "--field-selector", "type=kubernetes.io/tls", "-o", "name")
    assert secrets.returncode == 0
    kctl.run("-n", ns, "create", "service", "nodeport", f"np-{tag(kctl)}", "--tcp=80")
    kctl.run("-n", ns, "create", "service", "clusterip", f"headless-{tag(kctl)}", "--clusterip=None")
    services = kctl.run("-n", ns, "get", "services", "--field-selector", "spec.type=NodePort", "-o", "name")
    assert f"service/np-{tag(kctl)}" in services.stdout.split()
    assert f"service/headless-{tag(kctl)}" not in services.stdout.split()
    services = kctl.run("-n", ns, "get", "services", "--field-selector", "spec.clusterIP=None", "-o", "name")
    assert f"service/headless-{tag(kctl)}" in services.stdout.split()
    assert f"service/np-{tag(kctl)}" not in services.stdout.split()
