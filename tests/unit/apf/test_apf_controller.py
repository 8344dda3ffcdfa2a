from __future__ import annotations

import dataclasses

from apiary_pb import envelope_pb2 as pb
from services.apf.__main__ import build, parse_args
from services.apf.classification import Classifier
from services.apf.config import BOOTSTRAP, Configuration, PriorityLevel, concurrency_limits, stable_uid
from services.apf.controller import FlowController
from services.common.identity import user_pb

ADMIN = user_pb("admin", ["system:masters", "system:authenticated"])
ALICE = user_pb("alice", ["system:authenticated"])
ANON = user_pb("system:anonymous", ["system:unauthenticated"])
SA = user_pb("system:serviceaccount:kube-system:builder", ["system:serviceaccounts", "system:authenticated"])


def fixed(cfg: Configuration, *names: str) -> Configuration:
    """cfg with the levels `names` neither lending nor borrowing: their current limit is their nominal one."""
    levels = tuple(dataclasses.replace(pl, lendable_percent=0, borrowing_limit_percent=0) if pl.name in names else pl
                   for pl in cfg.priority_levels)
    return dataclasses.replace(cfg, priority_levels=levels)


def digest(user, verb="list", resource="pods", namespace="default", path="") -> pb.RequestAttributes:
    if path:
        return pb.RequestAttributes(user=user, verb=verb, path=path)
    return pb.RequestAttributes(user=user, verb=verb, resource_request=True, resource=resource,
                             namespace=namespace,
                             path=f"/api/v1/namespaces/{namespace}/{resource}")


def test_concurrency_limits_of_the_bootstrap_levels() -> None:
    """kube's numbers at its default 400 + 200 seats: the nominal limit rounds up, lending and borrowing
    round half away from zero, an unset borrowingLimitPercent borrows up to the server's seats."""
    n = concurrency_limits(BOOTSTRAP.priority_levels, 600)
    assert {k: (v.nominal, v.lower, v.upper) for k, v in n.items()} == {
        "exempt": (0, 0, 600), "catch-all": (13, 13, 613), "system": (74, 50, 674), "node-high": (98, 73, 698),
        "leader-election": (25, 25, 625), "workload-high": (98, 49, 698), "workload-low": (245, 24, 845),
        "global-default": (49, 24, 649)}
    assert concurrency_limits(BOOTSTRAP.priority_levels, 1)["catch-all"].nominal == 1
    capped = (PriorityLevel("a", shares=30, lendable_percent=10, borrowing_limit_percent=50),
              PriorityLevel("b", shares=10))
    limits = concurrency_limits(capped, 100)
    assert (limits["a"].nominal, limits["a"].lower, limits["a"].upper) == (75, 67, 113)


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
    # 24 seats: global-default's nominal 2, lending 1; idle, the levels share the seats by their lower bounds
    ctl = build(parse_args(["--max-requests-inflight", "16", "--max-mutating-requests-inflight", "8"]))
    assert ctl.levels["global-default"].current_limit == 2
    ctl.start(digest(ALICE))
    decided = []
    first = ctl.start(digest(ALICE))
    second = ctl.start(digest(ALICE), decided.append)
    assert first.granted and second.state == "waiting"
    ctl.finish(first)
    assert decided == [second] and second.granted
    ctl.finish(second)


async def test_catch_all_rejects_with_concurrency_limit() -> None:
    ctl = FlowController(fixed(BOOTSTRAP, "catch-all"), server_seats=1, wait_limit=1)
    weird = user_pb("weird")
    a = ctl.start(digest(weird))
    b = ctl.start(digest(weird))
    assert a.granted and not b.granted
    r = b.response(3)
    assert (r.reason, r.retry_after_seconds, r.priority_level) == ("concurrency-limit", 1, "catch-all")
