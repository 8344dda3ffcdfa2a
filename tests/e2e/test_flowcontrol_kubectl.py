"""API Priority and Fairness configured by objects, driven with kubectl on the shared stack: kube's bootstrap
FlowSchemas and PriorityLevelConfigurations with kubectl's columns, kube's 422s for bad ones, a user's
FlowSchema classifying one ServiceAccount's requests into a new priority level of type Reject (the response
headers name both by uid; under load its requests get 429 while another account's do not), the schema marked
Dangling once its level is deleted, mandatory objects put back, kube's /debug/api_priority_and_fairness dumps
(for those RBAC lets read them) and the apiserver_flowcontrol_* metrics."""
from __future__ import annotations

import functools
import json
import re
import ssl
import threading
import uuid

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import Kubectl
from tests.kubectls import namespace
from tests.waiting import wait_for

WAIT = 60.0  # seconds the controller-manager and every apf replica get to converge (no timing is asserted)
eventually = functools.partial(wait_for, timeout=WAIT, interval=0.2)
FLOW_SCHEMA_HEADER = "X-Kubernetes-PF-FlowSchema-UID"
PRIORITY_LEVEL_HEADER = "X-Kubernetes-PF-PriorityLevel-UID"


def table(kubectl: Kubectl, resource: str) -> list[list[str]]:
    return [line.split() for line in kubectl.run("get", resource).stdout.splitlines()]


def dump_rows(text: str) -> list[list[str]]:
    """A debug dump's rows: kube ends every cell but a line's last with a comma, then tabwriter's padding."""
    return [[c.strip() for c in re.split(r",\s+", line)] for line in text.splitlines()]


def sa_client(kubectl: Kubectl, stack, ns: str, name: str) -> httpx.Client:
    token = kubectl.run("-n", ns, "create", "token", name).stdout.strip()
    ctx = ssl.create_default_context(cafile=str(stack.state / "pki" / "ca.crt"))
    return httpx.Client(base_url=stack.server, verify=ctx, timeout=30, headers={"Authorization": f"Bearer {token}"})


class Load:
    """`clients` threads sending GETs until stopped; the status codes they got, by code."""

    def __init__(self, clients: list[httpx.Client], url: str) -> None:
        self.stop = threading.Event()
        self.codes: dict[int, int] = {}
        self.rejected: list[httpx.Response] = []
        self.lock = threading.Lock()
        self.threads = [threading.Thread(target=self._run, args=(c, url), daemon=True) for c in clients]
        for t in self.threads:
            t.start()

    def _run(self, c: httpx.Client, url: str) -> None:
        while not self.stop.is_set():
            r = c.get(url)
            with self.lock:
                self.codes[r.status_code] = self.codes.get(r.status_code, 0) + 1
                if r.status_code == 429:
                    self.rejected.append(r)

    def end(self) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(60)


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


DEBUG = "/debug/api_priority_and_fairness"


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


def test_a_flow_schema_naming_a_missing_level_is_dangling_and_gating_goes_on(kubectl, stack, tokens, bootstrapped):
    """Accepted (kube validates no reference), marked Dangling, and left out by the apf service, which keeps
    classifying every other request by the objects it has, after every bad object above too."""
    schema = f"nowhere-{uuid.uuid4().hex[:6]}"
    kubectl.run("create", "-f", "-", input=json.dumps({
        "apiVersion": "flowcontrol.apiserver.k8s.io/v1", "kind": "FlowSchema", "metadata": {"name": schema},
        "spec": {"priorityLevelConfiguration": {"name": f"missing-{schema}"}, "matchingPrecedence": 100,
                 "rules": [{"subjects": [{"kind": "Group", "group": {"name": "system:authenticated"}}],
                            "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}],
                            "resourceRules": [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"],
                                               "namespaces": ["*"], "clusterScope": True}]}]}}))
    try:
        dangling = eventually(lambda: next(
            (c for c in ((kubectl.get_json("flowschema", schema) or {}).get("status") or {}).get("conditions", [])
             if c["type"] == "Dangling" and c["status"] == "True"), None), what="the schema marked Dangling")
        assert dangling["reason"] == "NotFound"
        assert {row[0]: row for row in table(kubectl, "flowschemas")}[schema][5] == "True"
        gd_uid = kubectl.get_json("flowschema", "global-default")["metadata"]["uid"]  # type: ignore[index]
        ctx = ssl.create_default_context(cafile=str(stack.state / "pki" / "ca.crt"))
        with httpx.Client(base_url=stack.server, verify=ctx, timeout=30,
                          headers={"Authorization": f"Bearer {tokens['alice']}"}) as alice:
            # alice matches the dangling schema's rules, which do not count: global-default classifies her
            for _ in range(5):
                r = alice.get("/api/v1/namespaces/default/configmaps")
                assert r.status_code in (200, 403) and r.headers[FLOW_SCHEMA_HEADER] == gd_uid, r.headers
    finally:
        kubectl.run("delete", "flowschema", schema, "--ignore-not-found")


def test_debug_dumps_as_kube_prints_them(kubectl, stack, bootstrapped):
    """kube's three dumps through the proxy: its columns in its order, every priority level, and the reader's
    own request (not exempt: RBAC grants it the paths) among the requests, with its details; 403 for others."""
    with namespace(kubectl, "apfdump") as ns:
        kubectl.run("-n", ns, "create", "serviceaccount", "reader")
        kubectl.run("-n", ns, "create", "serviceaccount", "other")
        role = f"apf-debug-{ns}"
        kubectl.run("create", "clusterrole", role, "--verb=get", f"--non-resource-url={DEBUG}/*")
        kubectl.run("create", "clusterrolebinding", role, f"--clusterrole={role}", f"--serviceaccount={ns}:reader")
        try:
            sa_uid = kubectl.get_json("flowschema", "service-accounts")["metadata"]["uid"]  # type: ignore[index]
            pl_uid = kubectl.get_json("prioritylevelconfiguration", "workload-low")["metadata"]["uid"]  # type: ignore[index]
            with sa_client(kubectl, stack, ns, "reader") as reader, sa_client(kubectl, stack, ns, "other") as other:
                r = eventually(lambda: (lambda r: r if r.status_code == 200 else None)(
                    reader.get(f"{DEBUG}/dump_priority_levels")), what="the reader's binding in force")
                assert r.headers["Content-Type"].startswith("text/plain")
                assert (r.headers[FLOW_SCHEMA_HEADER], r.headers[PRIORITY_LEVEL_HEADER]) == (sa_uid, pl_uid)
                rows = dump_rows(r.text)
                assert rows[0] == ["PriorityLevelName", "ActiveQueues", "IsIdle", "IsQuiescing", "WaitingRequests",
                                   "ExecutingRequests", "DispatchedRequests", "RejectedRequests", "TimedoutRequests",
                                   "CancelledRequests"]
                names = [row[0] for row in rows[1:]]
                assert names == sorted(names) and {"exempt", "catch-all", "workload-low", "global-default"} <= set(names)
                wl = {row[0]: row for row in rows[1:]}["workload-low"]
                assert len(wl) == 10 and wl[3] == "false" and int(wl[5]) >= 1 and int(wl[6]) >= 1  # the reader's

                rows = dump_rows(reader.get(f"{DEBUG}/dump_queues").text)
                assert rows[0] == ["PriorityLevelName", "Index", "PendingRequests", "ExecutingRequests", "SeatsInUse",
                                   "NextDispatchR", "InitialSeatsSum", "MaxSeatsSum", "TotalWorkSum"]
                wl_queues = [row for row in rows[1:] if row[0] == "workload-low"]
                assert [row[1] for row in wl_queues] == [str(i) for i in range(128)]  # kube's 128 queues
                assert all(re.fullmatch(r"\d+\.\d{8}ss", row[5]) and row[8].endswith("ss") for row in wl_queues)
                assert sum(int(row[3]) for row in wl_queues) >= 1

                path = f"{DEBUG}/dump_requests"
                rows = dump_rows(reader.get(path, params={"includeRequestDetails": "1"}).text)
                assert rows[0] == ["PriorityLevelName", "FlowSchemaName", "QueueIndex", "RequestIndexInQueue",
                                   "FlowDistingsher", "ArriveTime", "InitialSeats", "FinalSeats", "AdditionalLatency",
                                   "StartTime", "UserName", "Verb", "APIPath", "Namespace", "Name", "APIVersion",
                                   "Resource", "SubResource"]
                user = f"system:serviceaccount:{ns}:reader"
                mine = [row for row in rows[1:] if row[10] == user]
                assert mine, rows
                row = mine[0]
                assert row[:2] == ["workload-low", "service-accounts"] and int(row[2]) >= 0 and row[3] == "-1"
                assert row[4] == user and row[6:9] == ["1", "0", "0s"]
                assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z", row[5]) and row[9] != "0001-01-01T00:00:00Z"
                assert row[11:] == ["get", path, "", "", "", "", ""]
                assert len(dump_rows(reader.get(path).text)[0]) == 10  # without details: kube's first 10 columns

                r = other.get(f"{DEBUG}/dump_queues")
                assert r.status_code == 403 and r.json()["message"] == (
                    f'forbidden: User "system:serviceaccount:{ns}:other" cannot get path "{DEBUG}/dump_queues"')
            out = kubectl.run("get", "--raw", f"{DEBUG}/dump_priority_levels").stdout  # system:masters: exempt
            assert out.startswith("PriorityLevelName,")
        finally:
            kubectl.run("delete", "clusterrolebinding", role, "--ignore-not-found")
            kubectl.run("delete", "clusterrole", role, "--ignore-not-found")


def test_flowcontrol_metrics_with_kubes_labels(stack, tokens, bootstrapped):
    """After some traffic of a user who is not exempt, the apf service exports kube's metrics with its labels."""
    ctx = ssl.create_default_context(cafile=str(stack.state / "pki" / "ca.crt"))
    with httpx.Client(base_url=stack.server, verify=ctx, timeout=30,
                      headers={"Authorization": f"Bearer {tokens['alice']}"}) as alice:
        for _ in range(3):
            alice.get("/api/v1/namespaces/default/configmaps")
    text = httpx.get(f"http://127.0.0.1:{stack.health_port('apf')}/metrics", timeout=10).text
    families = {f.name: f for f in text_string_to_metric_families(text)}

    def labels(name: str, family: str = "") -> list[dict[str, str]]:
        fam = families[f"apiserver_flowcontrol_{family or name}"]
        return [s.labels for s in fam.samples if s.name == f"apiserver_flowcontrol_{name}"]

    gd = {"priority_level": "global-default", "flow_schema": "global-default"}
    level = {"priority_level": "global-default"}
    for name in ("current_executing_requests", "current_executing_seats"):
        assert gd in labels(name), name
    assert gd in labels("dispatched_requests_total", "dispatched_requests")
    assert {**gd, "execute": "true", "le": "0.005"} in labels("request_wait_duration_seconds_bucket",
                                                              "request_wait_duration_seconds")
    assert {**gd, "type": "regular", "le": "30.0"} in labels("request_execution_seconds_bucket",
                                                             "request_execution_seconds")
    assert {**gd, "le": "10.0"} in labels("work_estimated_seats_bucket", "work_estimated_seats")
    for name in ("nominal_limit_seats", "current_limit_seats", "lower_limit_seats", "upper_limit_seats"):
        assert level in labels(name), name
    assert {**level, "le": "6.0"} in labels("demand_seats_bucket", "demand_seats")
    assert labels("seat_fair_frac") == [{}]
    assert families["apiserver_flowcontrol_rejected_requests"].type == "counter"
    assert families["apiserver_flowcontrol_current_inqueue_requests"].type == "gauge"  # once one has queued
    assert families["apiserver_flowcontrol_watch_count_samples"].type == "histogram"


def test_a_flow_schema_classifies_one_service_account(kubectl, stack, admin, bootstrapped):
    level, schema = f"bots-{uuid.uuid4().hex[:6]}", f"bots-{uuid.uuid4().hex[:6]}"
    with namespace(kubectl, "apf") as ns:
        kubectl.run("-n", ns, "create", "serviceaccount", "bot")
        kubectl.run("-n", ns, "create", "serviceaccount", "peer")
        kubectl.run("-n", ns, "create", "rolebinding", "view", "--clusterrole=view",
                    f"--serviceaccount={ns}:bot", f"--serviceaccount={ns}:peer")
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
                assert {row[0]: row for row in table(kubectl, "flowschemas")}[schema][1:3] == [level, "500"]

                # Under load (more of the bot's requests at once than its level's few seats), the bot gets
                # 429s naming its schema, while another account's requests are all answered
                url = f"/api/v1/namespaces/{ns}/configmaps"
                bots = [sa_client(kubectl, stack, ns, "bot") for _ in range(16)]
                peers = [sa_client(kubectl, stack, ns, "peer")]
                peer_load, bot_load = Load(peers, url), Load(bots, url)
                try:
                    eventually(lambda: bot_load.rejected, what="a 429 for the bot")
                finally:
                    bot_load.end()
                    peer_load.end()
                    for c in bots + peers:
                        c.close()
                rejected = bot_load.rejected[0]
                assert rejected.headers[FLOW_SCHEMA_HEADER] == fs_uid and rejected.headers["Retry-After"]
                assert rejected.json()["reason"] == "TooManyRequests"
                assert set(peer_load.codes) == {200} and peer_load.codes[200] > 0, peer_load.codes
                assert set(bot_load.codes) <= {200, 429}, bot_load.codes
                with sa_client(kubectl, stack, ns, "peer") as peer:
                    assert peer.get(url).headers[FLOW_SCHEMA_HEADER] != fs_uid
                levels = {r[0]: r for r in dump_rows(admin.get(f"{DEBUG}/dump_priority_levels").text)[1:]}
                assert levels[level][:4] == [level, "0", "true", "false"] and int(levels[level][7]) > 0
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
