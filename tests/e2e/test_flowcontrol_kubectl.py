"""API Priority and Fairness configured by objects, driven with kubectl on the shared stack: kube's bootstrap
FlowSchemas and PriorityLevelConfigurations with kubectl's columns, kube's 422s for bad ones, a user's
FlowSchema classifying one ServiceAccount's requests into a new priority level (the response headers name
both by uid), the schema marked Dangling once its level is deleted, and mandatory objects put back."""
from __future__ import annotations

import functools
import json
import ssl
import uuid

import httpx
import pytest

from tests.conftest import Kubectl
from tests.kubectls import namespace
from tests.waiting import wait_for

WAIT = 60.0  # seconds the controller-manager and every apf replica get to converge (no timing is asserted)
eventually = functools.partial(wait_for, timeout=WAIT, interval=0.2)
FLOW_SCHEMA_HEADER = "X-Kubernetes-PF-FlowSchema-UID"
PRIORITY_LEVEL_HEADER = "X-Kubernetes-PF-PriorityLevel-UID"


def table(kubectl: Kubectl, resource: str) -> list[list[str]]:
    return [line.split() for line in kubectl.run("get", resource).stdout.splitlines()]


@pytest.fixture(scope="module")
def bootstrapped(kubectl: Kubectl) -> None:
    eventually(lambda: kubectl.get_json("flowschema", "global-default") and
               kubectl.get_json("prioritylevelconfiguration", "workload-low"), what="the bootstrap configuration")


def test_kubectl_columns_of_the_bootstrap_configuration(kubectl, bootstrapped):
    rows = table(kubectl, "flowschemas")
    assert rows[0] == ["NAME", "PRIORITYLEVEL", "MATCHINGPRECEDENCE", "DISTINGUISHERMETHOD", "AGE", "MISSINGPL"]
    by_name = {r[0]: r for r in rows[1:]}
    assert by_name["exempt"][1:4] == ["exempt", "1", "*"]
    assert by_name["system-node-high"][1:4] == ["node-high", "400", "ByUser"]
    assert by_name["kube-system-service-accounts"][1:4] == ["workload-high", "900", "ByNamespace"]
    eventually(lambda: table(kubectl, "flowschemas")[1][5] == "False", what="the Dangling conditions written")
    rows = table(kubectl, "prioritylevelconfigurations")
    assert rows[0] == ["NAME", "TYPE", "NOMINALCONCURRENCYSHARES", "QUEUES", "HANDSIZE", "QUEUELENGTHLIMIT", "AGE"]
    by_name = {r[0]: r[:6] for r in rows[1:]}
    assert by_name["exempt"] == ["exempt", "Exempt", "<none>", "<none>", "<none>", "<none>"]
    assert by_name["catch-all"] == ["catch-all", "Limited", "5", "<none>", "<none>", "<none>"]
    assert by_name["workload-low"] == ["workload-low", "Limited", "100", "128", "6", "50"]
    fs = kubectl.get_json("flowschema", "exempt")
    assert fs is not None and fs["metadata"]["annotations"]["apf.kubernetes.io/autoupdate-spec"] == "true"


def test_exempt_requests_name_the_exempt_objects(kubectl, admin, bootstrapped):
    """system:masters is classified by the proxy itself; its headers still name the objects' uids."""
    fs_uid = kubectl.get_json("flowschema", "exempt")["metadata"]["uid"]  # type: ignore[index]
    pl_uid = kubectl.get_json("prioritylevelconfiguration", "exempt")["metadata"]["uid"]  # type: ignore[index]

    def named() -> httpx.Response | None:
        r = admin.get("/api/v1/namespaces/default/configmaps")
        return r if r.headers.get(FLOW_SCHEMA_HEADER) == fs_uid else None

    r = eventually(named, what="the exempt FlowSchema's uid in the headers")
    assert r.status_code == 200 and r.headers[PRIORITY_LEVEL_HEADER] == pl_uid


def test_bad_objects_get_kubes_422(kubectl):
    manifests = {
        'The FlowSchema "too-late" is invalid: spec.matchingPrecedence: Invalid value: 10001: must not be greater '
        "than 10000": {"kind": "FlowSchema", "metadata": {"name": "too-late"}, "spec": {
            "matchingPrecedence": 10001, "priorityLevelConfiguration": {"name": "global-default"}}},
        "spec.limited.limitResponse.queuing: Forbidden: must be nil if limited.limitResponse.type is not Limited": {
            "kind": "PriorityLevelConfiguration", "metadata": {"name": "queued-reject"}, "spec": {
                "type": "Limited", "limited": {"limitResponse": {"type": "Reject", "queuing": {"queues": 8}}}}},
        "spec.limited.nominalConcurrencyShares: Invalid value: -3: must be a non-negative integer": {
            "kind": "PriorityLevelConfiguration", "metadata": {"name": "negative"}, "spec": {
                "type": "Limited", "limited": {"nominalConcurrencyShares": -3, "limitResponse": {"type": "Reject"}}}},
    }
    for message, obj in manifests.items():
        proc = kubectl.run("create", "-f", "-", check=False,
                           input=json.dumps({"apiVersion": "flowcontrol.apiserver.k8s.io/v1", **obj}))
        assert proc.returncode != 0 and message in proc.stderr, proc.stderr


def test_a_flow_schema_classifies_one_service_account(kubectl, stack, bootstrapped):
    level, schema = f"bots-{uuid.uuid4().hex[:6]}", f"bots-{uuid.uuid4().hex[:6]}"
    with namespace(kubectl, "apf") as ns:
        kubectl.run("-n", ns, "create", "serviceaccount", "bot")
        kubectl.run("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": [
            {"apiVersion": "flowcontrol.apiserver.k8s.io/v1", "kind": "PriorityLevelConfiguration",
             "metadata": {"name": level}, "spec": {"type": "Limited", "limited": {
                 "nominalConcurrencyShares": 1, "limitResponse": {"type": "Reject"}}}},
            {"apiVersion": "flowcontrol.apiserver.k8s.io/v1", "kind": "FlowSchema", "metadata": {"name": schema},
             "spec": {"priorityLevelConfiguration": {"name": level}, "matchingPrecedence": 500,
                      "distinguisherMethod": {"type": "ByUser"},
                      "rules": [{"subjects": [{"kind": "ServiceAccount",
                                               "serviceAccount": {"namespace": ns, "name": "bot"}}],
                                 "resourceRules": [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"],
                                                    "namespaces": ["*"], "clusterScope": True}]}]}}]}))
        try:
            fs_uid = kubectl.get_json("flowschema", schema)["metadata"]["uid"]  # type: ignore[index]
            pl_uid = kubectl.get_json("prioritylevelconfiguration", level)["metadata"]["uid"]  # type: ignore[index]
            token = kubectl.run("-n", ns, "create", "token", "bot").stdout.strip()
            ctx = ssl.create_default_context(cafile=str(stack.state / "pki" / "ca.crt"))
            with httpx.Client(base_url=stack.server, verify=ctx, timeout=30,
                              headers={"Authorization": f"Bearer {token}"}) as bot:
                def classified(uid: str) -> httpx.Response | None:
                    r = bot.get(f"/api/v1/namespaces/{ns}/configmaps")
                    return r if r.headers.get(FLOW_SCHEMA_HEADER) == uid else None

                r = eventually(lambda: classified(fs_uid), what="the bot's requests in the new flow schema")
                assert r.headers[PRIORITY_LEVEL_HEADER] == pl_uid
                eventually(lambda: table(kubectl, "flowschemas") and
                           {row[0]: row for row in table(kubectl, "flowschemas")}[schema][5] == "False",
                           what="the schema's Dangling condition False")

                kubectl.run("delete", "prioritylevelconfiguration", level)
                dangling = eventually(lambda: next(
                    (c for c in ((kubectl.get_json("flowschema", schema) or {}).get("status") or {}).get("conditions", [])
                     if c["type"] == "Dangling" and c["status"] == "True"), None), what="the schema marked Dangling")
                assert (dangling["reason"], dangling["message"]) == (
                    "NotFound", (f'This FlowSchema references the PriorityLevelConfiguration object named "{level}" '
                                "but there is no such object"))
                assert {row[0]: row for row in table(kubectl, "flowschemas")}[schema][5] == "True"
                sa_uid = kubectl.get_json("flowschema", "service-accounts")["metadata"]["uid"]  # type: ignore[index]
                eventually(lambda: classified(sa_uid), what="the bot's requests back in service-accounts")
        finally:
            kubectl.run("delete", "flowschema", schema, "--ignore-not-found")
            kubectl.run("delete", "prioritylevelconfiguration", level, "--ignore-not-found")


def test_mandatory_objects_are_put_back_and_suggested_ones_left_alone(kubectl, bootstrapped):
    old = kubectl.get_json("prioritylevelconfiguration", "catch-all")
    assert old is not None
    kubectl.run("delete", "prioritylevelconfiguration", "catch-all")
    back = eventually(lambda: kubectl.get_json("prioritylevelconfiguration", "catch-all"), what="catch-all recreated")
    assert back["metadata"]["uid"] != old["metadata"]["uid"] and back["spec"] == old["spec"]
    kubectl.run("annotate", "--overwrite", "prioritylevelconfiguration", "leader-election",
                "apf.kubernetes.io/autoupdate-spec=false")
    kubectl.run("patch", "prioritylevelconfiguration", "leader-election", "--type=merge",
                "-p", '{"spec": {"limited": {"nominalConcurrencyShares": 11}}}')
    kubectl.run("patch", "prioritylevelconfiguration", "global-default", "--type=merge",
                "-p", '{"spec": {"limited": {"nominalConcurrencyShares": 21}}}')
    eventually(lambda: (kubectl.get_json("prioritylevelconfiguration", "global-default") or {})
               ["spec"]["limited"]["nominalConcurrencyShares"] == 20, what="global-default's spec restored")
    kept = kubectl.get_json("prioritylevelconfiguration", "leader-election")
    assert kept is not None and kept["spec"]["limited"]["nominalConcurrencyShares"] == 11
    kubectl.run("annotate", "--overwrite", "prioritylevelconfiguration", "leader-election",
                "apf.kubernetes.io/autoupdate-spec=true")
    eventually(lambda: (kubectl.get_json("prioritylevelconfiguration", "leader-election") or {})
               ["spec"]["limited"]["nominalConcurrencyShares"] == 10, what="leader-election's spec restored")
