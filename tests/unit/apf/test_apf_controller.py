from __future__ import annotations

from apiary_pb import envelope_pb2 as pb
from services.apf.__main__ import build, parse_args
from services.apf.classification import Classifier
from services.apf.config import BOOTSTRAP, nominal_concurrency, stable_uid
from services.apf.controller import FlowController
from services.common.identity import user_pb

ADMIN = user_pb("admin", ["system:masters", "system:authenticated"])
ALICE = user_pb("alice", ["system:authenticated"])
ANON = user_pb("system:anonymous", ["system:unauthenticated"])
SA = user_pb("system:serviceaccount:kube-system:builder", ["system:serviceaccounts", "system:authenticated"])


def digest(user, verb="list", resource="pods", namespace="default", path="") -> pb.RequestAttributes:
    if path:
        return pb.RequestAttributes(user=user, verb=verb, path=path)
    return pb.RequestAttributes(user=user, verb=verb, resource_request=True, resource=resource,
                             namespace=namespace,
                             path=f"/api/v1/namespaces/{namespace}/{resource}")


def test_nominal_concurrency_defaults() -> None:
    n = nominal_concurrency(BOOTSTRAP.priority_levels, 600)
    assert n["global-default"] == 49 and n["catch-all"] == 13
    assert "exempt" not in n
    assert nominal_concurrency(BOOTSTRAP.priority_levels, 1)["catch-all"] == 1


def test_classification() -> None:
    c = Classifier(BOOTSTRAP)
    assert c.classify(digest(ADMIN)).name == "exempt"
    assert c.classify(digest(ANON, verb="get", path="/readyz")).name == "probes"
    assert c.classify(digest(ANON, verb="get", path="/readyz/etcd")).name == "global-default"
    assert c.classify(digest(ALICE)).name == "global-default"
    assert c.classify(digest(ANON)).name == "global-default"
    assert c.classify(digest(SA)).name == "kube-system-service-accounts"
    other_sa = user_pb("system:serviceaccount:apps:ci", ["system:serviceaccounts", "system:authenticated"])
    assert c.classify(digest(other_sa)).name == "service-accounts"
    assert c.classify(digest(user_pb("weird"))).name == "catch-all"
    fs = c.classify(digest(ALICE))
    assert c.flow_distinguisher(fs, digest(ALICE)) == "alice"


def test_uids_are_stable_and_distinct() -> None:
    assert stable_uid("flowschemas", "exempt") == BOOTSTRAP.flow_schemas[0].uid
    assert BOOTSTRAP.flow_schemas[0].uid != BOOTSTRAP.level("exempt").uid


async def test_exempt_is_never_limited() -> None:
    ctl = FlowController(BOOTSTRAP, server_seats=1, wait_limit=1)
    tickets = [ctl.start(digest(ADMIN)) for _ in range(100)]
    assert all(t.granted for t in tickets)
    r = tickets[0].response(7)
    assert (r.id, r.granted, r.flow_schema, r.priority_level) == (7, True, "exempt", "exempt")
    assert r.flow_schema_uid == BOOTSTRAP.flow_schemas[0].uid
    for t in tickets:
        ctl.finish(t)


async def test_global_default_queues_and_dispatches() -> None:
    ctl = build(parse_args(["--max-requests-inflight", "1", "--max-mutating-requests-inflight", "0"]))
    decided = []
    first = ctl.start(digest(ALICE))
    second = ctl.start(digest(ALICE), decided.append)
    assert first.granted and second.state == "waiting"
    ctl.finish(first)
    assert decided == [second] and second.granted
    ctl.finish(second)


async def test_catch_all_rejects_with_concurrency_limit() -> None:
    ctl = FlowController(BOOTSTRAP, server_seats=1, wait_limit=1)
    weird = user_pb("weird")
    a = ctl.start(digest(weird))
    b = ctl.start(digest(weird))
    assert a.granted and not b.granted
    r = b.response(3)
    assert (r.reason, r.retry_after_seconds, r.priority_level) == ("concurrency-limit", 1, "catch-all")
