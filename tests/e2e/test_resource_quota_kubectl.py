"""ResourceQuota object counts with kubectl: the quota admission plug-in (admission service) charges creates,
the resource quota controller (controller-manager) keeps status.hard and gives usage back after deletes."""
from __future__ import annotations

import re
import uuid
from typing import Any

import httpx

from tests.waiting import wait_for


def status(kubectl: Any, ns: str, part: str, key: str) -> str:
    escaped = key.replace(".", "\\.")
    return kubectl.run("-n", ns, "get", "resourcequota", "q", "-o",
                       f"jsonpath={{.status.{part}.{escaped}}}").stdout


def used(kubectl: Any, ns: str, key: str) -> str:
    return status(kubectl, ns, "used", key)


def replenishments(stack: Any) -> float:
    """What the controller-manager's resource quota controller took from deletes (its work queue's adds)."""
    metrics = httpx.get(f"http://127.0.0.1:{stack.health_port('controllermanager')}/metrics").text
    m = re.search(r'^workqueue_adds_total\{name="resource_quota_controller_resource_changes"\} (\S+)$', metrics,
                  re.MULTILINE)
    assert m is not None, "the controller-manager runs no resource quota controller"
    return float(m.group(1))


def test_count_quota_refuses_over_limit_and_follows_deletes(kubectl: Any, stack: Any) -> None:
    ns = f"quota-{uuid.uuid4().hex[:6]}"
    kubectl.run("create", "namespace", ns)
    # the root-ca-cert-publisher's kube-root-ca.crt is a ConfigMap of every namespace, counted as kube counts it
    wait_for(lambda: kubectl.run("-n", ns, "get", "configmap", "kube-root-ca.crt", check=False).returncode == 0,
             what="kube-root-ca.crt")
    kubectl.run("-n", ns, "create", "quota", "q", "--hard=count/configmaps=3,secrets=5")
    # the controller fills status.hard and status.used (until then the quota limits nothing, as in kube)
    wait_for(lambda: used(kubectl, ns, "count/configmaps") == "1", what="status.used")
    assert used(kubectl, ns, "secrets") == "0"
    kubectl.run("-n", ns, "create", "configmap", "one")
    assert used(kubectl, ns, "count/configmaps") == "2"  # charged by admission, before the object is written
    kubectl.run("-n", ns, "create", "configmap", "two")
    refused = kubectl.run("-n", ns, "create", "configmap", "three", check=False)
    assert refused.returncode != 0
    assert ('configmaps "three" is forbidden: exceeded quota: q, requested: count/configmaps=1, '
            "used: count/configmaps=3, limited: count/configmaps=3") in refused.stderr
    table = kubectl.run("-n", ns, "get", "quota").stdout.splitlines()
    assert table[0].split() == ["NAME", "AGE", "REQUEST", "LIMIT"]
    assert "count/configmaps: 3/3, secrets: 0/5" in table[1]
    # a delete gives the count back (the controller-manager's replenishment); then a create fits again
    before = replenishments(stack)
    kubectl.run("-n", ns, "delete", "configmap", "one")
    wait_for(lambda: used(kubectl, ns, "count/configmaps") == "2", what="replenishment")
    assert replenishments(stack) > before
    kubectl.run("-n", ns, "create", "configmap", "three")
    assert used(kubectl, ns, "count/configmaps") == "3"
    # other resources and other namespaces are not limited by it
    kubectl.run("-n", ns, "create", "secret", "generic", "s1", "--from-literal=a=b")
    assert used(kubectl, ns, "secrets") == "1"
    kubectl.run("-n", "default", "create", "configmap", f"free-{ns}")
    kubectl.run("-n", "default", "delete", "configmap", f"free-{ns}")
    # raising the hard limit: admission enforces status.hard, which the controller copies from spec.hard
    kubectl.run("-n", ns, "patch", "quota", "q", "-p", '{"spec":{"hard":{"count/configmaps":"4"}}}')
    wait_for(lambda: status(kubectl, ns, "hard", "count/configmaps") == "4", what="status.hard after the raise")
    kubectl.run("-n", ns, "create", "configmap", "four")
    wait_for(lambda: used(kubectl, ns, "count/configmaps") == "4", what="status.used after the raise")
    kubectl.run("delete", "namespace", ns, "--wait=false")


def test_quota_validation(kubectl: Any) -> None:
    bad = kubectl.run("-n", "default", "create", "quota", f"bad-{uuid.uuid4().hex[:6]}", "--hard=count/configmaps=-1",
                      check=False)
    assert bad.returncode != 0 and "must be greater than or equal to 0" in bad.stderr
