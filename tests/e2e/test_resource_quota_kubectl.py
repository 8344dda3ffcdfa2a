"""ResourceQuota object counts with kubectl: the quota admission plugin and its controller."""
from __future__ import annotations

import uuid
from typing import Any
from tests.waiting import wait_for


def used(kubectl: Any, ns: str, key: str) -> str:
    escaped = key.replace(".", "\\.")
    return kubectl.run("-n", ns, "get", "resourcequota", "q", "-o", f"jsonpath={{.status.used.{escaped}}}").stdout


def test_count_quota_refuses_over_limit_and_follows_deletes(kubectl: Any) -> None:
    ns = f"quota-{uuid.uuid4().hex[:6]}"
    kubectl.run("create", "namespace", ns)
    # the root-ca-cert-publisher's kube-root-ca.crt is a ConfigMap of every namespace, counted as kube counts it
    wait_for(lambda: kubectl.run("-n", ns, "get", "configmap", "kube-root-ca.crt", check=False).returncode == 0,
             what="kube-root-ca.crt")
    kubectl.run("-n", ns, "create", "quota", "q", "--hard=count/configmaps=3,secrets=5")
    # the controller fills status.hard and status.used
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
    # a delete gives the count back (the controller's replenishment); then a create fits again
    kubectl.run("-n", ns, "delete", "configmap", "one")
    wait_for(lambda: used(kubectl, ns, "count/configmaps") == "2", what="replenishment")
    kubectl.run("-n", ns, "create", "configmap", "three")
    assert used(kubectl, ns, "count/configmaps") == "3"
    # other resources and other namespaces are not limited by it
    kubectl.run("-n", ns, "create", "secret", "generic", "s1", "--from-literal=a=b")
    assert used(kubectl, ns, "secrets") == "1"
    kubectl.run("-n", "default", "create", "configmap", f"free-{ns}")
    kubectl.run("-n", "default", "delete", "configmap", f"free-{ns}")
    # raising the hard limit is seen at once by admission
    kubectl.run("-n", ns, "patch", "quota", "q", "-p", '{"spec":{"hard":{"count/configmaps":"4"}}}')
    kubectl.run("-n", ns, "create", "configmap", "four")
    wait_for(lambda: used(kubectl, ns, "count/configmaps") == "4", what="status.used after the raise")
    kubectl.run("delete", "namespace", ns, "--wait=false")


def test_quota_validation(kubectl: Any) -> None:
    bad = kubectl.run("-n", "default", "create", "quota", f"bad-{uuid.uuid4().hex[:6]}", "--hard=count/configmaps=-1",
                      check=False)
    assert bad.returncode != 0 and "must be greater than or equal to 0" in bad.stderr
