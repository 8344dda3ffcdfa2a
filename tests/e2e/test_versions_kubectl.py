"""One kind, two groups, one storage, through kubectl: events.k8s.io/v1 and core/v1 Events share discovery's
storage version, managedFields across groups, and admission policies matched through the other group."""
from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from tests.kubectls import deny_in_namespace, namespace, until_refused

pytestmark = pytest.mark.stack


@pytest.fixture(scope="module")
def ns(kubectl: Any) -> Iterator[str]:
    with namespace(kubectl, "versions") as name:  # the registry labels it kubernetes.io/metadata.name=<name>
        yield name


def events_v1(name: str, ns: str, note: str) -> str:
    return f"""apiVersion: events.k8s.io/v1
kind: Event
metadata:
  name: {name}
  namespace: {ns}
regarding:
  kind: ConfigMap
  namespace: {ns}
  name: c
reason: Tested
note: {note}
type: Normal
action: Testing
eventTime: "2026-01-02T03:04:05.000000Z"
reportingController: example.com/tester
reportingInstance: tester-1
"""


def test_both_groups_name_one_storage_version(kubectl: Any) -> None:
    def hash_of(path: str) -> str:
        doc = json.loads(kubectl.run("get", "--raw", path).stdout)
        return next(r["storageVersionHash"] for r in doc["resources"] if r["name"] == "events")
    assert hash_of("/apis/events.k8s.io/v1") == hash_of("/api/v1") == "r2yiGXH7wu8="


def test_server_side_apply_conflicts_across_groups(kubectl: Any, ns: str) -> None:
    kubectl.run("apply", "--server-side", "--field-manager=recorder", "-f", "-",
                input=events_v1("ssa", ns, "first words"))
    core = f"""apiVersion: v1
kind: Event
metadata:
  name: ssa
  namespace: {ns}
message: other words
"""
    proc = kubectl.run("apply", "--server-side", "--field-manager=editor", "-f", "-", input=core, check=False)
    assert proc.returncode != 0 and "conflict" in proc.stderr.lower() and ".message" in proc.stderr
    kubectl.run("apply", "--server-side", "--force-conflicts", "--field-manager=editor", "-f", "-", input=core)
    got = json.loads(kubectl.run("-n", ns, "get", "events.v1.events.k8s.io", "ssa", "-o", "json",
                                 "--show-managed-fields").stdout)
    assert got["note"] == "other words"
    owners = {e["manager"]: (e["apiVersion"], set(e["fieldsV1"])) for e in got["metadata"]["managedFields"]}
    assert owners["editor"][0] == "v1" and "f:message" in owners["editor"][1]
    assert owners["recorder"][0] == "events.k8s.io/v1" and "f:note" not in owners["recorder"][1]


def test_policy_for_core_events_applies_to_events_k8s_io(kubectl: Any, ns: str) -> None:
    name = f"no-forbidden-{uuid.uuid4().hex[:6]}"
    kubectl.run("create", "-f", "-", input=f"""apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata:
  name: {name}
spec:
  failurePolicy: Fail
  matchConstraints:
    resourceRules:
    - apiGroups: [""]
      apiVersions: ["v1"]
      operations: ["CREATE"]
      resources: ["events"]
  validations:
  - expression: "object.message != 'forbidden' && request.requestKind.group == 'events.k8s.io'"
    message: core/v1 view refused it
{deny_in_namespace(name, ns)}""")
    try:
        proc = until_refused(kubectl, ("create", "-f", "-"),
                             ("-n", ns, "delete", "events.v1.events.k8s.io", "refused"),
                             input=events_v1("refused", ns, "forbidden"))
        assert "core/v1 view refused it" in proc.stderr and name in proc.stderr
        # the policy read the core/v1 fields of an events.k8s.io/v1 request: other notes pass
        kubectl.run("create", "-f", "-", input=events_v1("allowed", ns, "fine"))
    finally:
        kubectl.run("delete", "validatingadmissionpolicybinding", name, "--ignore-not-found")
        kubectl.run("delete", "validatingadmissionpolicy", name, "--ignore-not-found")
