"""Two replicas of every service (storage: two over one etcd), on a private stack: kubectl works,
calls spread over the replicas, a consistent LIST through one replica sees a write made through
the other, the audit ID of a request is in a log line of every service that handled it, and kill
-9 of one replica of each service in turn under steady writes and watches loses no acknowledged
write and fails no more client calls than were in flight on the killed replica (the ledger and
the writers and watchers of test_faults)."""
from __future__ import annotations

import json
import os
import re
import signal
import ssl
import subprocess
import time
import urllib.request
import uuid
from collections.abc import Iterator

import httpx
import pytest

from tests.conftest import TEST_OFFSET
from tests.integration.test_faults import (
    BAD_LOG,
    CM,
    RECOVERY,
    Kill,
    Load,
    Private,
    check_ledger,
    cm,
    max_gap,
    reap,
    recovered,
    setup_namespace,
    wait_ready,
)
from services.cluster.certs import read_tokens
from services.cluster.stack import REPLICA_PORT_STEP, REQUEST_PATH, SECURE_PORT, Stack, replica_name

# Replica 1 takes this offset + REPLICA_PORT_STEP: both clear of the other suites' private stacks.
OFFSET = TEST_OFFSET + 100
REPLICAS = 2
SERVICES = REQUEST_PATH
# Killed in turn (replica 0 of each; the other one carries on): every service, the front door last.
KILLED = ("storage", "registry", "admission", "auth", "apf", "proxy")


class Failover(httpx.BaseTransport):
    """Sends each request to a proxy replica, the next one when a replica refuses the connection:
    what a load balancer in front of the proxies does in a cluster. Each client starts on its own."""

    def __init__(self, ports: list[int], first: int, verify: ssl.SSLContext) -> None:
        self.ports, self.first = ports, first
        self.transport = httpx.HTTPTransport(verify=verify)

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        n = len(self.ports)
        for k in range(n):
            i = (self.first + k) % n
            request.url = request.url.copy_with(port=self.ports[i])
            try:
                response = self.transport.handle_request(request)
            except httpx.ConnectError:
                if k == n - 1:
                    raise
                continue
            self.first = i
            return response
        raise AssertionError("unreachable")

    def close(self) -> None:
        self.transport.close()


class ReplicaPrivate(Private):
    clients = 0

    def ports(self) -> list[int]:
        return [SECURE_PORT + self.stack.offset + REPLICA_PORT_STEP * r for r in range(REPLICAS)]

    def transport(self, verify: ssl.SSLContext) -> httpx.BaseTransport:
        ReplicaPrivate.clients += 1
        return Failover(self.ports(), ReplicaPrivate.clients % REPLICAS, verify)

    def admin_on(self, r: int) -> httpx.Client:
        """The admin's client, on proxy replica r (while it is up)."""
        return httpx.Client(base_url=self.stack.server, timeout=10, transport=Failover(self.ports(), r, self.ssl))


@pytest.fixture(scope="module")
def private(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ReplicaPrivate]:
    # -v 4: every call a service handles is logged (with its audit ID)
    s = Stack(tmp_path_factory.mktemp("replicas"), OFFSET, replicas=REPLICAS,
              extra={name: ["-v", "4"] for name in SERVICES})
    try:
        s.start(fresh=True, timeout=60)
        pki = s.state / "pki"
        ctx = ssl.create_default_context(cafile=str(pki / "ca.crt"))
        ctx.load_cert_chain(str(pki / "admin.crt"), str(pki / "admin.key"))
        with httpx.Client(base_url=s.server, verify=ctx, timeout=30) as c:
            p = ReplicaPrivate(s, c, ctx, read_tokens(s.state))  # type: ignore[arg-type]
            setup_namespace(p)
            yield p
    finally:
        s.stop(quiet=True)


def calls_served(stack: Stack, name: str) -> float:
    """gRPC calls a replica served (its grpc_server_started_total, calls on streams included)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{stack.health_port(name)}/metrics", timeout=5) as r:
        text = r.read().decode()
    calls = re.finditer(r"^grpc_server_started_total\{[^}]*\} (\S+)$", text, re.MULTILINE)
    return sum(float(m.group(1)) for m in calls)


def test_kubectl_through_each_proxy(private):
    s = private.stack
    ns = f"kc-{uuid.uuid4().hex[:6]}"

    def kubectl(r: int, *args: str) -> str:
        out = subprocess.run(["kubectl", "--kubeconfig", str(s.kubeconfig), "--server", s.server_of(r), *args],
                             capture_output=True, text=True, timeout=60, check=False)
        assert out.returncode == 0, out.stderr
        return out.stdout

    kubectl(0, "create", "namespace", ns)
    kubectl(1, "-n", ns, "create", "configmap", "c", "--from-literal=a=b")
    assert kubectl(0, "-n", ns, "get", "configmap", "c", "-o", "jsonpath={.data.a}") == "b"
    assert "c" in kubectl(1, "-n", ns, "get", "configmaps", "-o", "name")
    kubectl(0, "delete", "namespace", ns, "--wait=false")


def test_consistent_list_sees_a_write_through_the_other_replica(private):
    """Writes through one proxy, consistent LISTs (no resourceVersion) through the other; the
    calls alternate over both replicas of every service on the way, so a LIST served by one
    storage replica follows a write made through the other."""
    s = private.stack
    before = {r: calls_served(s, replica_name("storage", r)) for r in range(REPLICAS)}
    with private.admin_on(0) as a, private.admin_on(1) as b:
        for i in range(30):
            writer, reader = (a, b) if i % 2 == 0 else (b, a)
            name = f"rw-{uuid.uuid4().hex[:8]}"
            made = writer.post(CM, json=cm(name))
            assert made.status_code == 201, made.text
            rv = int(made.json()["metadata"]["resourceVersion"])
            listed = reader.get(CM, params={"labelSelector": ""})
            assert listed.status_code == 200, listed.text
            names = {o["metadata"]["name"] for o in listed.json()["items"]}
            assert name in names, f"write {name} at {rv} not in a consistent LIST"
            assert int(listed.json()["metadata"]["resourceVersion"]) >= rv
            got = reader.get(f"{CM}/{name}")
            assert got.status_code == 200 and int(got.json()["metadata"]["resourceVersion"]) == rv
    for r in range(REPLICAS):  # both storage replicas served some of them
        assert calls_served(s, replica_name("storage", r)) > before[r] + 5, r


def test_audit_id_in_every_service_log(private):
    """A client's Audit-ID (kube takes it) is in a log line of every service that handled the request:
    alice's create goes through apf (she is not exempt), auth (authorization of a create: not in its
    cache yet), the registry, admission and storage."""
    s = private.stack
    aid = f"replicas-{uuid.uuid4().hex}"
    with private.client("alice") as c:
        r = c.post(CM, json=cm(f"audited-{uuid.uuid4().hex[:6]}"), headers={"Audit-ID": aid})
    assert r.status_code == 201, r.text
    assert r.headers["Audit-ID"] == aid
    deadline = time.monotonic() + 15
    while True:
        missing = [svc for svc in SERVICES if not any(
            f"audit-id={aid}" in (s.logs / f"{replica_name(svc, i)}.log").read_text(errors="replace")
            for i in range(REPLICAS))]
        if not missing or time.monotonic() > deadline:
            break
        time.sleep(0.2)  # log lines are flushed by each process on its own
    assert not missing, f"no log line with audit-id={aid} in {missing}"


def test_kill_9_one_replica_of_each_under_load(private):
    """Replica 0 of each service killed in turn while the other carries on: writes go on, each
    kill fails at most the calls then in flight (one per writer), watches resume from their
    resourceVersion, then the replica is started again."""
    stack = private.stack
    load = Load(private)
    stop, stop_watching, writers, watchers, threads = (load.stop, load.stop_watching, load.writers,
                                                       load.watchers, load.threads)
    kills: list[Kill] = []
    failed: dict[str, int] = {}
    try:
        recovered(writers, time.monotonic(), RECOVERY)
        time.sleep(1)
        for name in KILLED:
            pid = stack.pid(name)
            assert pid is not None, name
            before = sum(w.failures for w in writers)
            k = Kill(name, time.monotonic())
            os.killpg(pid, signal.SIGKILL)
            reap(pid)
            # the other replica carries the load: writes are acknowledged again soon after the kill
            back = recovered(writers, time.monotonic(), RECOVERY)
            time.sleep(1.5)  # steady load on one replica
            failed[name] = sum(w.failures for w in writers) - before
            k.figures["all"] = max_gap(sorted(t for w in writers for t in w.successes), k.killed_at, back)
            stack.spawn(name)
            k.start_seconds = wait_ready(stack, name, RECOVERY)
            time.sleep(1)  # both replicas again before the next kill
            kills.append(k)
            print(f"\n{name}: {failed[name]} failed calls; unavailable {k.figures['all']:.2f}s; "
                  f"restart {k.start_seconds:.2f}s", flush=True)
    finally:
        stop.set()
        for t in threads[:len(writers)]:
            t.join(15)
        last = max((a.rv for w in writers for a in w.acks), default=0)
        deadline = time.monotonic() + RECOVERY
        while any(w.rv < last for w in watchers) and time.monotonic() < deadline:
            time.sleep(0.1)
        stop_watching.set()
    print("watchers: " + "; ".join(f"{len(w.events)} events, {w.resumes} resumes" for w in watchers))
    check_ledger(private, writers, watchers, kills, KILLED)
    for name, n in failed.items():
        assert n <= len(writers), f"kill -9 {name}: {n} client calls failed, more than were in flight"


def test_a_crd_created_while_a_registry_replica_was_down_is_served_by_it_once_back(private):
    """Every registry replica watches CRDs: one that was down when a CRD was created installs it when it
    starts, so the calls the proxies spread to it find the resource (no 404 from the replica that missed
    the event)."""
    s = private.stack
    name = replica_name("registry", 1)
    group = f"down-{uuid.uuid4().hex[:6]}.example.com"
    pid = s.pid(name)
    assert pid is not None
    os.killpg(pid, signal.SIGKILL)
    reap(pid)
    crd = {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
           "metadata": {"name": f"notes.{group}"},
           "spec": {"group": group, "scope": "Namespaced", "names": {"plural": "notes", "kind": "Note"},
                    "versions": [{"name": "v1", "served": True, "storage": True, "schema": {"openAPIV3Schema": {
                        "type": "object", "x-kubernetes-preserve-unknown-fields": True}}}]}}
    crds = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
    try:
        # a call already on its way to the killed replica fails (503) until the proxy sees it gone: retried,
        # as clients retry a 503
        deadline = time.monotonic() + RECOVERY
        while (made := private.admin.post(crds, json=crd)).status_code == 503 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert made.status_code == 201, made.text
        deadline = time.monotonic() + RECOVERY
        while not any(c["type"] == "Established" and c["status"] == "True" for c in
                      (private.admin.get(f"{crds}/notes.{group}").json().get("status") or {}).get("conditions", [])):
            assert time.monotonic() < deadline, "the CRD was not Established by the replica that was up"
            time.sleep(0.1)
    finally:
        s.spawn(name)
        wait_ready(s, name, RECOVERY)
    notes = f"/apis/{group}/v1/namespaces/default/notes"
    with private.admin_on(0) as a, private.admin_on(1) as b:
        # the proxies take the restarted replica back into their round-robin when they reconnect: GETs of
        # the new resource until it has served a share of them, every one answered 200
        before, deadline, i = calls_served(s, name), time.monotonic() + RECOVERY, 0
        while calls_served(s, name) < before + 20:
            assert time.monotonic() < deadline, "the restarted replica was not called again"
            got = (a, b)[i % 2].get(notes)
            assert got.status_code == 200, f"call {i}: {got.status_code} {got.text}"
            i += 1
        for i in range(40):
            got = (a, b)[i % 2].get(notes)
            assert got.status_code == 200, f"call {i}: {got.status_code} {got.text}"
    private.admin.delete(f"{crds}/notes.{group}")


def test_no_traceback_or_asyncio_error_logged(private):
    """Last in the module: every replica's log, across the kills above."""
    bad = []
    for log in sorted(private.stack.logs.glob("*.log")):
        for i, line in enumerate(log.read_text(errors="replace").splitlines()):
            if BAD_LOG.search(line):
                bad.append(f"{log.name}:{i + 1}: {line}")
    assert not bad, "\n".join(bad[:40])


def test_a_new_flow_schema_reaches_every_apf_replica(private):
    """Each apf replica reads the flowcontrol objects itself: a FlowSchema created through one proxy is in
    every replica's configuration, and alice's requests through either proxy are classified by it."""
    s = private.stack
    name = f"alice-{uuid.uuid4().hex[:6]}"
    group = "/apis/flowcontrol.apiserver.k8s.io/v1"
    r = private.admin.post(f"{group}/flowschemas", json={
        "apiVersion": "flowcontrol.apiserver.k8s.io/v1", "kind": "FlowSchema", "metadata": {"name": name},
        "spec": {"priorityLevelConfiguration": {"name": "workload-low"}, "matchingPrecedence": 300,
                 "rules": [{"subjects": [{"kind": "User", "user": {"name": "alice"}}],
                            "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}],
                            "resourceRules": [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"],
                                               "namespaces": ["*"], "clusterScope": True}]}]}})
    assert r.status_code == 201, r.text
    uid = r.json()["metadata"]["uid"]
    try:
        deadline = time.monotonic() + RECOVERY
        while True:
            missing = [replica_name("apf", i) for i in range(REPLICAS) if f"flow schemas added: {name}" not in
                       (s.logs / f"{replica_name('apf', i)}.log").read_text(errors="replace")]
            if not missing or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert not missing, f"{name} not in the configuration of {missing}"
        ca = ssl.create_default_context(cafile=str(s.state / "pki" / "ca.crt"))
        for i in range(REPLICAS):
            with httpx.Client(base_url=s.server_of(i), verify=ca, timeout=10,
                              headers={"Authorization": f"Bearer {private.tokens['alice']}"}) as alice:
                r = alice.get(CM)
                assert r.headers["X-Kubernetes-PF-FlowSchema-UID"] == uid, (i, r.headers)
    finally:
        private.admin.delete(f"{group}/flowschemas/{name}")


def test_the_kubernetes_service_lists_every_proxy_replica(private):
    """Each proxy replica's lease puts its port in the `kubernetes` Service's endpoints: a replica stopped
    leaves at once (its lease deleted), one killed once its lease expires, and each comes back when started."""
    s = private.stack
    p0, p1 = private.ports()

    def kubectl(*args: str) -> str:
        out = subprocess.run(["kubectl", "--kubeconfig", str(s.kubeconfig), *args],
                             capture_output=True, text=True, timeout=60, check=False)
        assert out.returncode == 0, out.stderr
        return out.stdout

    def ports() -> tuple[list[int], list[str]]:
        """The ports the Endpoints list, and the names of the Service's EndpointSlices."""
        endpoints = json.loads(kubectl("-n", "default", "get", "endpoints", "kubernetes", "-o", "json"))
        slices = json.loads(kubectl("-n", "default", "get", "endpointslices", "-o", "json",
                                    "-l", "kubernetes.io/service-name=kubernetes"))
        return ([p["port"] for subset in endpoints.get("subsets") or [] for p in subset["ports"]],
                sorted(i["metadata"]["name"] for i in slices["items"]))

    def until_ports(want: list[int], what: str, timeout: float = RECOVERY + 30) -> None:
        deadline = time.monotonic() + timeout
        slices = sorted("kubernetes" if p == p0 else f"kubernetes-{p}" for p in want)
        while (got := ports()) != (want, slices):
            assert time.monotonic() < deadline, f"{what}: {got}"
            time.sleep(0.2)

    until_ports([p0, p1], "both replicas listed")
    svc = json.loads(kubectl("-n", "default", "get", "service", "kubernetes", "-o", "json"))
    assert svc["spec"]["ports"] == [{"name": "https", "port": 443, "protocol": "TCP", "targetPort": p0}]
    assert f"Kubernetes control plane is running at https://127.0.0.1:{p0}" in kubectl("cluster-info")

    s.stop_one("proxy-1")
    until_ports([p0], "a stopped replica left", timeout=15)
    s.spawn("proxy-1")
    wait_ready(s, "proxy-1", RECOVERY)
    until_ports([p0, p1], "the replica back")

    pid = s.pid("proxy-1")
    assert pid is not None
    os.killpg(pid, signal.SIGKILL)
    reap(pid)
    until_ports([p0], "a killed replica left once its lease expired")
    leases = json.loads(kubectl("-n", "kube-system", "get", "leases", "-o", "json",
                                "-l", "apiserver.kubernetes.io/identity=kube-apiserver"))
    assert [i["metadata"]["annotations"]["apiary.io/endpoint"] for i in leases["items"]] == [f"127.0.0.1:{p0}"]
    s.spawn("proxy-1")
    wait_ready(s, "proxy-1", RECOVERY)
    until_ports([p0, p1], "the killed replica back")
