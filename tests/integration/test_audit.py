"""The audit log of a real stack: levels, stages, secrets never logged, a watch's ResponseStarted,
a 403's decision annotation, failed authentication, impersonation, rotation by size; and the
default policy `make run` writes (on the shared stack)."""
from __future__ import annotations

import ssl
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import orjson
import pytest

from tests.conftest import TEST_OFFSET
from tools.certs import read_tokens
from tools.run import ROOT, Stack

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
        "--audit-policy-file", str(state / "policy.yaml"), "--audit-log-maxsize", "1", "--audit-log-maxbackup", "1"]})
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
