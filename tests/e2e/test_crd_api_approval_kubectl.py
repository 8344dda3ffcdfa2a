"""A CRD of a protected group (*.k8s.io) with kubectl: refused without the api-approved.kubernetes.io annotation
with kube's message; with an "unapproved" reason it is created, served, and its
KubernetesAPIApprovalPolicyConformant condition says so."""
from __future__ import annotations

import json
from typing import Any

import pytest

from tests.conftest import Kubectl
from tests.kubectls import RUN, refused
from tests.waiting import wait_for

pytestmark = pytest.mark.stack
GROUP = f"apr{RUN}.k8s.io"
NAME = f"gizmos.{GROUP}"


def crd(annotations: dict[str, str] | None = None) -> str:
    meta: dict[str, Any] = {"name": NAME, **({"annotations": annotations} if annotations else {})}
    return json.dumps({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition", "metadata": meta,
                       "spec": {"group": GROUP, "scope": "Cluster",
                                "names": {"plural": "gizmos", "singular": "gizmo", "kind": "Gizmo"},
                                "versions": [{"name": "v1", "served": True, "storage": True, "schema": {
                                    "openAPIV3Schema": {"type": "object"}}}]}})


def test_protected_group_needs_approval(kubectl: Kubectl) -> None:
    err = refused(kubectl, "create", "-f", "-", input=crd())
    assert (f'The CustomResourceDefinition "{NAME}" is invalid: metadata.annotations[api-approved.kubernetes.io]: '
            'Required value: protected groups must have approval annotation "api-approved.kubernetes.io", see '
            "https://github.com/kubernetes/enhancements/pull/1111") in err, err
    kubectl.run("create", "-f", "-", input=crd({"api-approved.kubernetes.io": "unapproved, testing only"}))
    try:
        kubectl.run("wait", "--for=condition=Established", f"crd/{NAME}", "--timeout=30s")

        def approval() -> Any:
            got = json.loads(kubectl.run("get", "crd", NAME, "-o", "json").stdout)
            return next((c for c in got["status"]["conditions"]
                         if c["type"] == "KubernetesAPIApprovalPolicyConformant"), None)
        cond = wait_for(approval, what="the approval condition")
        assert (cond["status"], cond["reason"], cond["message"]) == (
            "False", "UnapprovedAnnotation", 'not approved: "unapproved, testing only"')
        wait_for(lambda: kubectl.run("get", f"gizmos.{GROUP}", check=False).returncode == 0, 10, "gizmos served")
    finally:
        kubectl.run("delete", "crd", NAME, "--wait=false", check=False)
