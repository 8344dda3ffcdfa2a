"""The audit log of a real stack: levels, stages, secrets never logged, a watch's ResponseStarted,
a 403's decision annotation, failed authentication, impersonation, rotation by size; and the
default policy `make run` writes (on the shared stack); batch mode and the webhook backend: events
complete and in order, flushed at a clean stop, drops counted."""
from __future__ import annotations

import re
import ssl
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import orjson
import pytest

from tests.conftest import TEST_OFFSET
from tests.waiting import wait_for
from services.cluster.certs import read_tokens
from services.cluster.stack import ROOT, Stack

POLICY = """\
apiVersion: audit.k8s.io/v1
kind: Policy
omitManagedFields: true
rules:
  - level: None
    nonResourceURLs: ["/healthz*", "/livez*", "/readyz*"]
  - level: None
    users: ["system:apiserver"]
  - level: Metadata
    resources: [{group: "", resources: ["secrets"]}]
  - level: RequestResponse
    namespaces: ["rr"]
  - level: Request
    resources: [{group: "", resources: ["configmaps"]}]
  - level: Metadata
"""


@pytest.fixture(scope="module")
def audited() -> Iterator[Stack]:
    state = ROOT / ".apiary" / "test-audit"
    state.mkdir(parents=True, exist_ok=True)
    (state / "policy.yaml").write_text(POLICY)
    for old in (state / "logs").glob("audit*.log"):
        old.unlink()
    stack = Stack(state, TEST_OFFSET + 800, extra={"proxy": [
        "--audit-policy-file", str(state / "policy.yaml"), "--audit-log-maxsize", "1", "--audit-log-maxbackup", "1",
        "--audit-log-mode", "blocking"]})  # kube's default mode (make run's is batch)
    stack.start(fresh=True)
    try:
        yield stack
    finally:
        stack.stop(quiet=True)


def client(stack: Stack, token: str | None = None, **headers: str) -> httpx.Client:
    pki = stack.state / "pki"
    ctx = ssl.create_default_context(cafile=str(pki / "ca.crt"))
    if token is None:
        ctx.load_cert_chain(str(pki / "admin.crt"), str(pki / "admin.key"))
    else:
        headers["Authorization"] = f"Bearer {token}"
    return httpx.Client(base_url=stack.server, verify=ctx, headers=headers, timeout=30)


def events(stack: Stack, audit_id: str) -> list[dict]:
    """The events of one request, waiting a moment for the last stage to be written."""
    deadline = time.monotonic() + 5
    while True:
        found = []
        for path in sorted((stack.logs).glob("audit*.log")):
            for line in path.read_bytes().splitlines():
                if audit_id.encode() in line:
                    found.append(orjson.loads(line))
        if any(e["stage"] in ("ResponseComplete", "Panic") for e in found) or time.monotonic() > deadline:
            return found
        time.sleep(0.1)


def test_levels_and_stages(audited: Stack) -> None:
    with client(audited) as admin:
        for ns in ("req", "rr"):
            assert admin.post("/api/v1/namespaces", json={"metadata": {"name": ns}}).status_code == 201
        r = admin.post("/api/v1/namespaces/req/configmaps", json={"metadata": {"name": "c"}, "data": {"k": "v"}})
        assert r.status_code == 201
        evs = events(audited, r.headers["audit-id"])
        assert [e["stage"] for e in evs] == ["RequestReceived", "ResponseComplete"]
        done = evs[-1]
        assert done["level"] == "Request" and done["verb"] == "create"
        assert done["requestObject"]["data"] == {"k": "v"} and "responseObject" not in done
        assert done["responseStatus"]["code"] == 201
        assert done["objectRef"] == {"resource": "configmaps", "namespace": "req", "apiVersion": "v1"}
        assert done["user"]["username"] == "kubernetes-admin" and "system:masters" in done["user"]["groups"]
        assert done["annotations"]["authorization.k8s.io/decision"] == "allow"
        assert done["sourceIPs"] == ["127.0.0.1"] and done["userAgent"].startswith("python-httpx")

        r = admin.post("/api/v1/namespaces/rr/configmaps?fieldManager=audit-test", json={"metadata": {"name": "c"}, "data": {"k": "v"}})
        done = events(audited, r.headers["audit-id"])[-1]
        assert done["level"] == "RequestResponse"
        assert done["responseObject"]["metadata"]["uid"] == r.json()["metadata"]["uid"]
        assert "managedFields" in r.json()["metadata"] and "managedFields" not in done["responseObject"]["metadata"]

        r = admin.get("/readyz")
        assert events(audited, r.headers.get("audit-id", "no-id")) == []


def test_secret_data_never_logged(audited: Stack) -> None:
    secret = "c2VjcmV0LXZhbHVlLW5ldmVyLWxvZ2dlZA=="  # base64 of secret-value-never-logged
    with client(audited) as admin:
        admin.post("/api/v1/namespaces", json={"metadata": {"name": "sec"}})
        r = admin.post("/api/v1/namespaces/sec/secrets", json={"metadata": {"name": "s"}, "data": {"k": secret}})
        assert r.status_code == 201
        done = events(audited, r.headers["audit-id"])[-1]
        assert done["level"] == "Metadata" and "requestObject" not in done
        admin.get("/api/v1/namespaces/sec/secrets/s")
    for path in audited.logs.glob("audit*.log"):
        text = path.read_text()
        assert secret not in text and "secret-value-never-logged" not in text


def test_watch_response_started(audited: Stack) -> None:
    with client(audited) as admin:
        admin.post("/api/v1/namespaces", json={"metadata": {"name": "w"}})
        with admin.stream("GET", "/api/v1/namespaces/w/configmaps?watch=1&timeoutSeconds=1") as r:
            assert r.status_code == 200
            audit_id = r.headers["audit-id"]
            for _ in r.iter_lines():
                pass
    evs = events(audited, audit_id)
    assert [e["stage"] for e in evs] == ["RequestReceived", "ResponseStarted", "ResponseComplete"]
    assert evs[1]["responseStatus"]["code"] == 200 and evs[1]["verb"] == "watch"


def test_forbidden_unauthenticated_and_impersonated(audited: Stack) -> None:
    tokens = read_tokens(audited.state)
    with client(audited, tokens["alice"]) as alice:
        r = alice.get("/api/v1/namespaces/default/configmaps")
        assert r.status_code == 403
    done = events(audited, r.headers["audit-id"])[-1]
    assert done["annotations"]["authorization.k8s.io/decision"] == "forbid"
    assert done["responseStatus"]["code"] == 403 and done["responseStatus"]["reason"] == "Forbidden"
    assert done["user"]["username"] == "alice"

    with client(audited, "not-a-token") as nobody:
        r = nobody.get("/api/v1/namespaces/default/configmaps")
        assert r.status_code == 401
    done = events(audited, r.headers["audit-id"])[-1]
    assert done["responseStatus"]["code"] == 401 and done["user"] == {}

    with client(audited, **{"Impersonate-User": "alice"}) as admin_as_alice:
        r = admin_as_alice.get("/api/v1/namespaces/default/configmaps")
    done = events(audited, r.headers["audit-id"])[-1]
    assert done["user"]["username"] == "kubernetes-admin"
    assert done["impersonatedUser"]["username"] == "alice"


def test_rotation_by_size(audited: Stack) -> None:
    with client(audited) as admin:
        admin.post("/api/v1/namespaces", json={"metadata": {"name": "big"}})
        payload = "x" * 20_000
        for i in range(120):  # ~2.4 MB of requestObjects at level Request: two rotations at 1 MB
            r = admin.post("/api/v1/namespaces/big/configmaps",
                           json={"metadata": {"name": f"c{i}"}, "data": {"k": payload}})
            assert r.status_code == 201
    backups = list(audited.logs.glob("audit-*.log"))
    assert len(backups) == 1  # --audit-log-maxbackup 1
    for path in [*backups, audited.logs / "audit.log"]:
        assert path.stat().st_size <= 1024 * 1024
        for line in path.read_bytes().splitlines():
            orjson.loads(line)  # every line whole


def test_default_policy_on_the_shared_stack(stack: Stack, admin: httpx.Client) -> None:
    admin.post("/api/v1/namespaces", json={"metadata": {"name": "audit-default"}})
    r = admin.post("/api/v1/namespaces/audit-default/configmaps", json={"metadata": {"name": "c"}, "data": {"a": "b"}})
    assert r.status_code == 201
    evs = events(stack, r.headers["audit-id"])
    assert [e["stage"] for e in evs] == ["ResponseComplete"]  # RequestReceived omitted by the default policy
    assert evs[0]["level"] == "Metadata" and "requestObject" not in evs[0]
    assert not any(b'"/readyz' in line for line in Path(stack.logs / "audit.log").read_bytes().splitlines())


class Receiver:
    """A real audit webhook: an HTTP server on loopback that records every POST it answers."""

    def __init__(self) -> None:
        self.posts: list[tuple[dict[str, str], dict]] = []
        received = self.posts

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                received.append(({k.lower(): v for k, v in self.headers.items()}, orjson.loads(body)))
                self.send_response(200)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"{}")

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/audit"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def events(self) -> list[dict]:
        return [e for _, body in list(self.posts) for e in body["items"]]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


KUBECONFIG = """\
apiVersion: v1
kind: Config
clusters: [{name: audit, cluster: {server: "%s"}}]
users: [{name: apiary, user: {token: audit-webhook-token}}]
contexts: [{name: audit, context: {cluster: audit, user: apiary}}]
current-context: audit
"""


@pytest.fixture(scope="module")
def batched() -> Iterator[tuple[Stack, Receiver]]:
    """A stack auditing to a batch-mode log that writes only at 1000 events or at stop, and to a
    webhook whose tiny buffer and throttle (one batch of two now, the next in ~1000 s) must drop events."""
    receiver = Receiver()
    state = ROOT / ".apiary" / "test-audit-batch"
    state.mkdir(parents=True, exist_ok=True)
    (state / "policy.yaml").write_text(POLICY)
    (state / "webhook.kubeconfig").write_text(KUBECONFIG % receiver.url)
    for old in (state / "logs").glob("*.log"):
        old.unlink()
    stack = Stack(state, TEST_OFFSET + 900, extra={"proxy": [
        "--audit-policy-file", str(state / "policy.yaml"),
        "--audit-log-mode", "batch", "--audit-log-batch-max-size", "1000", "--audit-log-batch-max-wait", "1h",
        "--audit-webhook-config-file", str(state / "webhook.kubeconfig"),
        "--audit-webhook-batch-buffer-size", "3", "--audit-webhook-batch-max-size", "2",
        "--audit-webhook-batch-max-wait", "100ms", "--audit-webhook-batch-throttle-qps", "0.001",
        "--audit-webhook-batch-throttle-burst", "1"]})
    stack.start(fresh=True)
    try:
        yield stack, receiver
    finally:
        stack.stop(quiet=True)
        receiver.close()


PIZZA = "restaurant.programming-kubernetes.info/v1alpha1"


def metric(c: httpx.Client, name: str) -> float:
    for line in c.get("/metrics").text.splitlines():
        if line.startswith(name):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def test_batch_log_and_webhook_complete_in_order_and_drops_counted(batched: tuple[Stack, Receiver]) -> None:
    stack, receiver = batched
    ids = []
    with client(stack) as admin:
        assert admin.post("/api/v1/namespaces", json={"metadata": {"name": "batch"}}).status_code == 201
        for i in range(10):
            r = admin.post("/api/v1/namespaces/batch/configmaps", json={"metadata": {"name": f"c{i}"}})
            assert r.status_code == 201
            ids.append(r.headers["audit-id"])
        # the webhook's first batch went at once (the throttle's burst); the buffer of 3 overflowed
        wait_for(lambda: receiver.posts, what="the webhook's first EventList")
        assert metric(admin, 'apiserver_audit_error_total{plugin="buffered"}') > 0
        assert metric(admin, "apiserver_audit_event_total") >= 20
    headers, body = receiver.posts[0]
    assert headers["authorization"] == "Bearer audit-webhook-token"
    assert headers["content-type"] == "application/json"
    assert body["kind"] == "EventList" and body["apiVersion"] == "audit.k8s.io/v1"
    assert 1 <= len(body["items"]) <= 2 and all(e["kind"] == "Event" for e in body["items"])
    log = stack.logs / "audit.log"
    assert not log.exists() or not any(i.encode() in log.read_bytes() for i in ids)  # batched: not yet written
    sent_before_stop = len(receiver.posts)
    # a watch forwarded to the pizza server, as the garbage collector's once discovery lists the group: the
    # stop cuts it rather than draining for it, which would leave the audit sink no time before SIGKILL
    watching, cut, status = threading.Event(), threading.Event(), []

    def watch() -> None:
        with client(stack) as c, c.stream("GET", f"/apis/{PIZZA}/pizzas", params={"watch": "1"}) as r:
            status.append(r.status_code)
            watching.set()
            try:
                for _ in r.iter_raw():
                    pass
            except httpx.HTTPError:
                cut.set()

    threading.Thread(target=watch, daemon=True).start()
    assert watching.wait(30) and status == [200]

    stack.stop_one("proxy")  # a clean stop delivers everything held
    assert cut.wait(30)
    logged = [orjson.loads(line) for line in log.read_bytes().splitlines()]
    for audit_id in ids:
        evs = [e for e in logged if e["auditID"] == audit_id]
        assert [e["stage"] for e in evs] == ["RequestReceived", "ResponseComplete"]
        assert evs[1]["responseStatus"]["code"] == 201 and evs[1]["objectRef"]["resource"] == "configmaps"
    stamps = [e["stageTimestamp"] for e in logged]
    assert stamps == sorted(stamps)  # in the order they happened
    assert len(receiver.posts) > sent_before_stop  # the throttled batch and the buffer, flushed at stop
    hooked = receiver.events()
    keys = [(e["auditID"], e["stage"]) for e in hooked]
    assert len(set(keys)) == len(keys) and set(keys) <= {(e["auditID"], e["stage"]) for e in logged}
    dropped = sum(int(n) for n in re.findall(rb"Error in audit plugin 'buffered' affecting (\d+) audit events",
                                             (stack.logs / "proxy.log").read_bytes()))
    assert dropped > 0 and len(hooked) + dropped == len(logged)  # every event: delivered or counted
