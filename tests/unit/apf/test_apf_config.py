"""The configuration digested from FlowSchema and PriorityLevelConfiguration objects (dangling schemas
left out, mandatory objects imagined when missing, the objects' uids), and the FlowController taking a
new one while requests are queued and executing."""
from __future__ import annotations

import copy
from typing import Any

from apiary_pb import envelope_pb2 as pb
from services.apf.config import BOOTSTRAP, digest
from services.apf.controller import FlowController
from services.apis.flowcontrol_bootstrap import (
    MANDATORY_FLOW_SCHEMAS,
    MANDATORY_PRIORITY_LEVELS,
    SUGGESTED_FLOW_SCHEMAS,
    SUGGESTED_PRIORITY_LEVELS,
)
from services.common.identity import user_pb

Obj = dict[str, Any]
V1 = "flowcontrol.apiserver.k8s.io/v1"
ALICE = user_pb("alice", ["system:authenticated"])
BOT = user_pb("system:serviceaccount:ci:bot", ["system:serviceaccounts", "system:authenticated"])


def request(user: Any) -> pb.RequestAttributes:
    return pb.RequestAttributes(user=user, verb="list", resource_request=True, resource="pods", namespace="ci",
                                path="/api/v1/namespaces/ci/pods")


def with_uid(obj: Obj, uid: str) -> Obj:
    out = copy.deepcopy(obj)
    out["metadata"]["uid"] = uid
    return out


def bot_schema(level: str) -> Obj:
    return {"apiVersion": V1, "kind": "FlowSchema", "metadata": {"name": "bots", "uid": "fs-bots"}, "spec": {
        "priorityLevelConfiguration": {"name": level}, "matchingPrecedence": 500,
        "distinguisherMethod": {"type": "ByUser"},
        "rules": [{"subjects": [{"kind": "ServiceAccount", "serviceAccount": {"namespace": "ci", "name": "bot"}}],
                   "resourceRules": [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"], "namespaces": ["*"],
                                      "clusterScope": True}]}]}}


def reject_level(name: str, shares: int = 1) -> Obj:
    return {"apiVersion": V1, "kind": "PriorityLevelConfiguration", "metadata": {"name": name, "uid": f"pl-{name}"},
            "spec": {"type": "Limited", "limited": {"nominalConcurrencyShares": shares, "lendablePercent": 0,
                                                     "limitResponse": {"type": "Reject"}}}}


SUGGESTED = (list(MANDATORY_FLOW_SCHEMAS + SUGGESTED_FLOW_SCHEMAS),
             list(MANDATORY_PRIORITY_LEVELS + SUGGESTED_PRIORITY_LEVELS))


def test_bootstrap_holds_kubes_finer_rules() -> None:
    names = {fs.name for fs in BOOTSTRAP.flow_schemas}
    assert {"system-node-high", "system-leader-election", "workload-leader-election", "endpoint-controller"} <= names
    node_high = next(fs for fs in BOOTSTRAP.flow_schemas if fs.name == "system-node-high")
    assert [r.resources for r in node_high.rules[0].resource_rules] == [("nodes", "nodes/status"), ("leases",)]


def test_missing_mandatory_objects_are_imagined_and_dangling_schemas_left_out() -> None:
    cfg = digest([bot_schema("nowhere")], [])
    assert sorted(fs.name for fs in cfg.flow_schemas) == ["catch-all", "exempt"]
    assert sorted(pl.name for pl in cfg.priority_levels) == ["catch-all", "exempt"]
    cfg = digest([bot_schema("bots"), with_uid(MANDATORY_FLOW_SCHEMAS[0], "fs-exempt")], [reject_level("bots")])
    bots = next(fs for fs in cfg.flow_schemas if fs.name == "bots")
    assert (bots.uid, cfg.level("bots").uid, cfg.flow_schemas[1].uid) == ("fs-bots", "pl-bots", "fs-exempt")
    assert cfg.level("bots").queuing is None and cfg.level("bots").shares == 1


async def test_a_new_schema_takes_effect_and_its_level_rejects() -> None:
    ctl = FlowController(digest(*SUGGESTED), server_seats=600, wait_limit=1)
    first = ctl.start(request(BOT))
    assert first.flow_schema.name == "service-accounts"
    ctl.finish(first)
    ctl.reconfigure(digest(SUGGESTED[0] + [bot_schema("bots")], SUGGESTED[1] + [reject_level("bots")]))
    held = [ctl.start(request(BOT)) for _ in range(ctl.levels["bots"].current_limit)]
    assert all(t.granted and t.flow_schema.uid == "fs-bots" and t.priority_level.uid == "pl-bots" for t in held)
    over = ctl.start(request(BOT))
    assert not over.granted and over.response(1).reason == "concurrency-limit"
    assert ctl.start(request(ALICE)).flow_schema.name == "global-default"
    # the level goes: new requests fall through to service-accounts; the held ones finish where they run
    ctl.reconfigure(digest(SUGGESTED[0] + [bot_schema("bots")], SUGGESTED[1]))
    assert ctl.start(request(BOT)).flow_schema.name == "service-accounts"
    for t in held:
        ctl.finish(t)
    assert held[0].level is not None and held[0].level.queueset.seats_in_use == 0


async def test_a_bigger_share_dispatches_queued_requests() -> None:
    # global-default neither lends nor borrows: one seat of one, then its share of a thousand
    cfg = digest(SUGGESTED[0], [dict(o, spec={**o["spec"], "limited": {
        **o["spec"]["limited"], "lendablePercent": 0, "borrowingLimitPercent": 0}})
        if o["metadata"]["name"] == "global-default" else o for o in SUGGESTED[1]])
    ctl = FlowController(cfg, server_seats=1, wait_limit=10)
    decided: list[Any] = []
    first = ctl.start(request(ALICE))
    queued = ctl.start(request(ALICE), decided.append)
    assert first.granted and queued.state == "waiting"
    ctl.server_seats = 1000
    ctl.reconfigure(cfg)  # same queuing: the level keeps its QueueSet, and its new limit lets the queued one run
    assert decided == [queued] and queued.granted
    for t in (first, queued):
        ctl.finish(t)
