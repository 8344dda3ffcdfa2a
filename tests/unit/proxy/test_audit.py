"""The audit policy (kube's rule matching) and the log backend (lines, rotation, retention)."""
from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from apiary_pb import envelope_pb2 as pb
from services.apiserver.audit.log import LogBackend
from services.apiserver.audit.policy import Auditor, Policy, PolicyError, now
from services.apiserver.requestinfo import parse
from services.common.errors import Forbidden
from services.cluster.stack import DEFAULT_AUDIT_POLICY

ALICE = pb.UserInfo(name="alice", groups=["devs", "system:authenticated"])
ADMIN = pb.UserInfo(name="admin", groups=["system:masters"])


def policy(rules: list[dict], **extra: object) -> Policy:
    return Policy.parse({"apiVersion": "audit.k8s.io/v1", "kind": "Policy", "rules": rules, **extra})


def info(method: str, path: str, query: dict[str, str] | None = None):  # type: ignore[no-untyped-def]
    return parse(method, path, query or {})


def test_first_matching_rule_decides_and_nothing_matched_is_none() -> None:
    p = policy([
        {"level": "None", "users": ["admin"]},
        {"level": "RequestResponse", "userGroups": ["devs"], "verbs": ["create"]},
        {"level": "Metadata", "namespaces": ["prod"]},
    ])
    assert p.decide(ADMIN, info("POST", "/api/v1/namespaces/prod/configmaps")).level == "None"
    assert p.decide(ALICE, info("POST", "/api/v1/namespaces/dev/configmaps")).level == "RequestResponse"
    assert p.decide(ALICE, info("GET", "/api/v1/namespaces/prod/configmaps")).level == "Metadata"
    assert p.decide(ALICE, info("GET", "/api/v1/namespaces/dev/configmaps")).level == "None"


def test_resources_groups_subresources_and_names() -> None:
    p = policy([
        {"level": "Request", "resources": [{"group": "", "resources": ["pods/log"]}]},
        {"level": "Metadata", "resources": [{"group": "", "resources": ["*/status"]}]},
        {"level": "RequestResponse", "resources": [{"group": "rbac.authorization.k8s.io"}]},
        {"level": "Request", "resources": [{"group": "", "resources": ["configmaps"], "resourceNames": ["c1"]}]},
    ])
    assert p.decide(ALICE, info("GET", "/api/v1/namespaces/a/pods/p/log")).level == "Request"
    assert p.decide(ALICE, info("GET", "/api/v1/namespaces/a/pods/p")).level == "None"
    assert p.decide(ALICE, info("PUT", "/api/v1/namespaces/a/services/s/status")).level == "Metadata"
    assert p.decide(ALICE, info("GET", "/apis/rbac.authorization.k8s.io/v1/clusterroles")).level == "RequestResponse"
    assert p.decide(ALICE, info("GET", "/api/v1/namespaces/a/configmaps/c1")).level == "Request"
    assert p.decide(ALICE, info("GET", "/api/v1/namespaces/a/configmaps/c2")).level == "None"


def test_non_resource_urls_and_the_empty_namespace() -> None:
    p = policy([
        {"level": "None", "nonResourceURLs": ["/healthz*", "/version"]},
        {"level": "Request", "namespaces": [""]},
        {"level": "Metadata"},
    ])
    assert p.decide(None, info("GET", "/healthz/ping")).level == "None"
    assert p.decide(None, info("GET", "/version")).level == "None"
    assert p.decide(None, info("GET", "/versions")).level == "Metadata"
    assert p.decide(ALICE, info("GET", "/api/v1/namespaces")).level == "Request"  # cluster-scoped
    assert p.decide(ALICE, info("GET", "/api/v1/namespaces/a/secrets")).level == "Metadata"


def test_omit_stages_combine() -> None:
    p = policy([{"level": "Metadata", "omitStages": ["ResponseStarted"]}], omitStages=["RequestReceived"])
    assert p.decide(ALICE, info("GET", "/api/v1/namespaces")).omit_stages == {"RequestReceived", "ResponseStarted"}


@pytest.mark.parametrize("doc,message", [
    ({"apiVersion": "v1", "kind": "Policy"}, "expected kind Policy"),
    ({"apiVersion": "audit.k8s.io/v1", "kind": "Policy", "rules": [{"level": "Everything"}]},
     'Unsupported value: "Everything"'),
    ({"apiVersion": "audit.k8s.io/v1", "kind": "Policy",
      "rules": [{"level": "None", "nonResourceURLs": ["/x"], "namespaces": ["a"]}]}, "both regular resources"),
    ({"apiVersion": "audit.k8s.io/v1", "kind": "Policy", "omitStages": ["Sometime"]}, 'Unsupported value: "Sometime"'),
])
def test_bad_policies_are_refused(doc: dict, message: str) -> None:
    with pytest.raises(PolicyError, match=message):
        Policy.parse(doc)


def test_default_policy_keeps_secrets_at_metadata_and_skips_health() -> None:
    p = Policy.load(DEFAULT_AUDIT_POLICY)
    assert p.decide(ADMIN, info("POST", "/api/v1/namespaces/a/secrets")).level == "Metadata"
    assert p.decide(None, info("GET", "/readyz")).level == "None"
    assert p.decide(None, info("GET", "/metrics")).level == "None"
    assert p.decide(ALICE, info("GET", "/api/v1/namespaces/a/configmaps")).level == "Metadata"


def lines(path: Path) -> list[dict]:
    return [orjson.loads(line) for line in path.read_bytes().splitlines()]


def test_event_fields_by_level(tmp_path: Path) -> None:
    log = tmp_path / "audit.log"
    backend = LogBackend(str(log))
    p = policy([{"level": "RequestResponse", "namespaces": ["rr"]}, {"level": "Metadata"}], omitManagedFields=True)
    auditor = Auditor(p, backend)
    body = orjson.dumps({"metadata": {"name": "c", "managedFields": [{"manager": "x"}]}, "data": {"k": "v"}})

    ev = auditor.begin("id-1", info("POST", "/api/v1/namespaces/rr/configmaps"), ALICE, "/api/v1/namespaces/rr/configmaps",
                       ["127.0.0.1"], "kubectl/v1.32", now())
    assert ev is not None
    ev.authorized(True, "RBAC: allowed")
    ev.set_request(body)
    ev.set_response(body)
    ev.stage("RequestReceived")
    ev.stage("ResponseComplete", 201)

    ev = auditor.begin("id-2", info("GET", "/api/v1/namespaces/x/secrets"), ALICE, "/api/v1/namespaces/x/secrets",
                       ["127.0.0.1"], "", now())
    assert ev is not None
    ev.set_request(body)
    ev.authorized(False, "")
    ev.stage("ResponseComplete", 403, Forbidden('secrets is forbidden: User "alice" cannot list resource'))

    first, complete, forbidden = lines(log)
    assert first["stage"] == "RequestReceived" and "responseStatus" not in first
    assert complete["level"] == "RequestResponse" and complete["responseStatus"]["code"] == 201
    assert complete["requestObject"] == {"metadata": {"name": "c"}, "data": {"k": "v"}}  # managedFields omitted
    assert complete["responseObject"] == complete["requestObject"]
    assert complete["objectRef"] == {"resource": "configmaps", "namespace": "rr", "apiVersion": "v1"}
    assert complete["user"] == {"username": "alice", "groups": ["devs", "system:authenticated"]}
    assert complete["annotations"]["authorization.k8s.io/decision"] == "allow"
    assert complete["requestReceivedTimestamp"] <= complete["stageTimestamp"]
    assert forbidden["level"] == "Metadata" and "requestObject" not in forbidden
    assert forbidden["responseStatus"]["reason"] == "Forbidden" and forbidden["responseStatus"]["code"] == 403
    assert forbidden["annotations"]["authorization.k8s.io/decision"] == "forbid"


async def test_rotation_by_size_keeps_maxbackup(tmp_path: Path) -> None:
    log = tmp_path / "audit.log"
    backend = LogBackend(str(log), max_size_mb=1, max_backups=2)
    event = {"x": "x" * 1015}  # a line of 1024 bytes
    assert len(orjson.dumps(event)) + 1 == 1024
    for _ in range(4 * 1024 + 10):  # a little over 4 MiB: four rotations
        assert backend.process([event])
    await backend.stop()
    backups = sorted(tmp_path.glob("audit-*.log"))
    assert len(backups) == 2
    assert all(b.stat().st_size <= 1024 * 1024 for b in [*backups, log])
    assert log.stat().st_size > 0


def test_remembered_decisions_are_the_policys() -> None:
    p = policy([{"level": "None", "users": ["admin"]}, {"level": "Request", "namespaces": ["a"]},
                {"level": "None", "nonResourceURLs": ["/healthz*"]}, {"level": "Metadata"}])
    auditor = Auditor(p, None)  # type: ignore[arg-type]
    cases = [(u, info("GET", path)) for u in (ALICE, ADMIN) for path in (
        "/api/v1/namespaces/a/configmaps", "/api/v1/namespaces/b/configmaps", "/healthz", "/version",
        "/api/v1/namespaces/a/configmaps/x")]
    for _ in range(2):  # the second time from the cache
        assert [auditor.decide(u, i).level for u, i in cases] == [p.decide(u, i).level for u, i in cases]
    assert [auditor.decide(u, i).level for u, i in cases[:5]] == ["Request", "Metadata", "None", "Metadata", "Request"]


def test_unknown_fields_fall_back_to_lenient_decoding_and_rules_are_validated() -> None:
    assert policy([{"level": "Metadata", "colour": "red"}]).rules[0].level == "Metadata"
    with pytest.raises(PolicyError, match="rules\\[0\\].nonResourceURLs\\[0\\]: Invalid value: \"healthz\": "
                                          "non-resource URL rules must begin with a '/' character"):
        policy([{"level": "None", "nonResourceURLs": ["healthz"]}])
