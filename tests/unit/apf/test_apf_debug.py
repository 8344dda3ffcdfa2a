"""The /debug/api_priority_and_fairness dumps in kube's format, and the apiserver_flowcontrol_* metrics the
Observer keeps, against a FlowController driven in process."""
from __future__ import annotations

import re

from prometheus_client import REGISTRY

from apiary_pb import envelope_pb2 as pb
from services.apf.config import BOOTSTRAP, Configuration
from services.apf.controller import FlowController
from services.apf.debug import dump, rfc3339nano, seat_seconds, tabwrite
from services.common.identity import user_pb
from services.common.metrics import LOOP_REGISTRY, exposition

ALICE = user_pb("alice", ["system:authenticated"])
BOB = user_pb("bob", ["system:authenticated"])
PROBE = user_pb("system:anonymous", ["system:unauthenticated"])


def get(user: pb.UserInfo, name: str = "c", verb: str = "get") -> pb.RequestAttributes:
    return pb.RequestAttributes(user=user, verb=verb, resource_request=True, api_version="v1",
                                resource="configmaps", namespace="demo", name=name,
                                path=f"/api/v1/namespaces/demo/configmaps/{name}")


def table(text: str) -> list[list[str]]:
    """A dump's rows, split as a reader of kube's output splits them (cells end with a comma)."""
    return [[c.strip() for c in re.split(r",\s+", line)] for line in text.splitlines()]


def test_tabwriter_aligns_as_gos():
    # tabwriter.NewWriter(w, 8, 0, 1, ' ', 0): min width 8, padding 1, the last cell not aligned
    assert tabwrite([("A", "BB", "C"), ("LongerName", "x", "y")]) == (
        "A,          BB,     C\n"
        "LongerName, x,      y\n")


def test_go_formats():
    assert seat_seconds(0) == "0.00000000ss"
    assert seat_seconds(3) == "3.00000000ss"
    assert seat_seconds(1.5) == "1.50000000ss"
    assert rfc3339nano(0) == "0001-01-01T00:00:00Z"
    assert rfc3339nano(1_700_000_000.25) == "2023-11-14T22:13:20.25Z"
    assert rfc3339nano(1_700_000_000) == "2023-11-14T22:13:20Z"


async def test_dumps_have_kubes_columns_and_the_requests():
    # 20 seats: global-default gets 2, so a third request of alice's waits in a queue
    ctl = FlowController(BOOTSTRAP, server_seats=20, wait_limit=60)
    running = [ctl.start(get(ALICE, f"c{i}")) for i in range(2)]
    queued = ctl.start(get(BOB, "q"))
    probe = ctl.start(pb.RequestAttributes(user=PROBE, verb="get", path="/readyz"))
    assert [t.state for t in running] == ["executing", "executing"] and queued.state == "waiting"
    assert probe.priority_level.name == "exempt" and probe.granted

    levels = table(dump(ctl, "dump_priority_levels"))
    assert levels[0] == ["PriorityLevelName", "ActiveQueues", "IsIdle", "IsQuiescing", "WaitingRequests",
                         "ExecutingRequests", "DispatchedRequests", "RejectedRequests", "TimedoutRequests",
                         "CancelledRequests"]
    by_name = {r[0]: r for r in levels[1:]}
    assert [r[0] for r in levels[1:]] == sorted(pl.name for pl in BOOTSTRAP.priority_levels)
    assert by_name["global-default"] == ["global-default", "1", "false", "false", "1", "2", "2", "0", "0", "0"]
    assert by_name["exempt"] == ["exempt", "0", "false", "false", "0", "1", "1", "0", "0", "0"]
    assert by_name["workload-low"] == ["workload-low", "0", "true", "false", "0", "0", "0", "0", "0", "0"]

    queues = table(dump(ctl, "dump_queues"))
    assert queues[0] == ["PriorityLevelName", "Index", "PendingRequests", "ExecutingRequests", "SeatsInUse",
                         "NextDispatchR", "InitialSeatsSum", "MaxSeatsSum", "TotalWorkSum"]
    gd = [r for r in queues[1:] if r[0] == "global-default"]
    assert len(gd) == 128 and [r[1] for r in gd] == [str(i) for i in range(128)]
    waiting = [r for r in gd if r[2] != "0"]
    assert len(waiting) == 1 and waiting[0][6:] == ["1", "1", "0.00300000ss"]  # 1 seat x kube's 3 ms
    assert sum(int(r[3]) for r in gd) == 2 and sum(int(r[4]) for r in gd) == 2
    assert all(r[5].endswith("ss") for r in gd)
    assert not [r for r in queues[1:] if r[0] in ("exempt", "catch-all")]  # no queues: exempt, Reject

    requests = table(dump(ctl, "dump_requests"))
    assert requests[0] == ["PriorityLevelName", "FlowSchemaName", "QueueIndex", "RequestIndexInQueue",
                           "FlowDistingsher", "ArriveTime", "InitialSeats", "FinalSeats", "AdditionalLatency",
                           "StartTime"]
    rows = requests[1:]
    assert len(rows) == 4
    bob = next(r for r in rows if r[4] == "bob")
    assert bob[:2] == ["global-default", "global-default"] and bob[3] == "0" and bob[9] == "0001-01-01T00:00:00Z"
    assert bob[6:9] == ["1", "0", "0s"] and bob[5].endswith("Z")
    alices = [r for r in rows if r[4] == "alice"]
    assert len(alices) == 2 and all(r[3] == "-1" and r[9] != "0001-01-01T00:00:00Z" for r in alices)
    assert next(r for r in rows if r[0] == "exempt")[1:5] == ["probes", "-1", "-1", ""]

    detailed = table(dump(ctl, "dump_requests", include_request_details=True))
    assert detailed[0][10:] == ["UserName", "Verb", "APIPath", "Namespace", "Name", "APIVersion", "Resource",
                                "SubResource"]
    bob = next(r for r in detailed[1:] if r[4] == "bob")
    assert bob[10:] == ["bob", "get", "/api/v1/namespaces/demo/configmaps/q", "demo", "q", "v1", "configmaps", ""]

    ctl.finish(queued)  # bob gave up while queued: cancelled
    for t in (*running, probe):
        ctl.finish(t)
    by_name = {r[0]: r for r in table(dump(ctl, "dump_priority_levels"))[1:]}
    assert by_name["global-default"] == ["global-default", "0", "true", "false", "0", "0", "2", "0", "0", "1"]
    assert table(dump(ctl, "dump_requests"))[1:] == []


async def test_metrics_with_kubes_names_and_labels():
    ctl = FlowController(BOOTSTRAP, server_seats=20, wait_limit=60)
    t = ctl.start(get(ALICE, verb="get"))
    ctl.finish(t)
    w = ctl.start(get(ALICE, verb="watch"))
    ctl.finish(w)
    sample = REGISTRY.get_sample_value
    scraped = LOOP_REGISTRY.get_sample_value  # what is read from the controller, on the loop (metrics.render)
    gd = {"priority_level": "global-default", "flow_schema": "global-default"}
    assert sample("apiserver_flowcontrol_request_execution_seconds_count", {**gd, "type": "regular"}) >= 1
    assert sample("apiserver_flowcontrol_request_execution_seconds_count", {**gd, "type": "watch"}) >= 1
    assert sample("apiserver_flowcontrol_work_estimated_seats_bucket", {**gd, "le": "1.0"}) >= 2
    level = {"priority_level": "global-default"}
    limits = ctl.levels["global-default"].limits
    assert sample("apiserver_flowcontrol_nominal_limit_seats", level) == limits.nominal == 2
    assert scraped("apiserver_flowcontrol_lower_limit_seats", level) == limits.lower == 1  # it lends 50%
    assert scraped("apiserver_flowcontrol_upper_limit_seats", level) == limits.upper  # no borrowing limit
    assert scraped("apiserver_flowcontrol_current_limit_seats", level) == ctl.levels["global-default"].current_limit
    assert scraped("apiserver_flowcontrol_seat_fair_frac") == ctl.fair_frac
    assert scraped("apiserver_flowcontrol_demand_seats_count", level) is not None
    assert scraped("apiserver_flowcontrol_demand_seats_bucket", {**level, "le": "6.0"}) is not None
    assert "# TYPE apiserver_flowcontrol_demand_seats histogram" in exposition().decode()

    q = [ctl.start(get(ALICE, f"x{i}")) for i in range(3)]
    assert q[2].state == "waiting"
    before = sample("apiserver_flowcontrol_rejected_requests_total", {**gd, "reason": "cancelled"}) or 0
    ctl.finish(q[2])
    assert sample("apiserver_flowcontrol_rejected_requests_total", {**gd, "reason": "cancelled"}) == before + 1
    for t in q[:2]:
        ctl.finish(t)


async def test_a_level_gone_with_requests_left_is_quiescing():
    ctl = FlowController(BOOTSTRAP, server_seats=20, wait_limit=60)
    t = ctl.start(get(ALICE))
    ctl.reconfigure(Configuration(tuple(pl for pl in BOOTSTRAP.priority_levels if pl.name != "global-default"),
                                  tuple(fs for fs in BOOTSTRAP.flow_schemas if fs.priority_level != "global-default")))
    row = {r[0]: r for r in table(dump(ctl, "dump_priority_levels"))[1:]}["global-default"]
    assert row[:6] == ["global-default", "0", "false", "true", "0", "1"]
    ctl.finish(t)
    assert "global-default" not in {r[0] for r in table(dump(ctl, "dump_priority_levels"))[1:]}
