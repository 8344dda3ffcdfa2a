"""The work estimates against kube 1.33's formulas and numbers (request/list_work_estimator.go,
mutating_work_estimator.go, apf_controller's max seats)."""
from __future__ import annotations

import pytest

from apiary_pb import envelope_pb2 as pb
from apiary_pb import storage_pb2 as spb
from services.apf.storagestats import STALE_AFTER, StorageStats
from services.apf.workestimator import StaleCount, WorkEstimate, WorkEstimator, level_max_seats
from services.common.identity import user_pb

ALICE = user_pb("alice", ["system:authenticated"])


def estimator(count: int | None = 799, watchers: int = 0, stale: bool = False) -> WorkEstimator:
    def object_count(group: str, resource: str) -> int | None:
        if stale:
            raise StaleCount(resource)
        return count
    return WorkEstimator(object_count, lambda *_: watchers)


def lst(verb: str = "list", name: str = "", **opts: object) -> pb.RequestAttributes:
    return pb.RequestAttributes(user=ALICE, verb=verb, resource_request=True, resource="configmaps",
                                namespace="default", name=name, list_options=pb.ListOptions(**opts))


@pytest.mark.parametrize("count,opts,seats", [
    (799, {}, 8),                                                    # consistent LIST: from the watch cache
    (799, {"resource_version": "0"}, 8),
    (799, {"limit": 399}, 8),                                        # paginated from the cache: every object
    (799, {"limit": 399, "continue": "token"}, 8),                   # from etcd: twice the page (798)
    (799, {"limit": 100, "resource_version": "123"}, 2),             # legacy exact read: etcd, 2 x 100
    (799, {"limit": 100, "resource_version": "123", "resource_version_match": "Exact"}, 2),
    (799, {"limit": 100, "resource_version": "123", "resource_version_match": "NotOlderThan"}, 8),
    (799, {"limit": 399, "continue": "t", "label_selector": "a=b"}, 10),   # 799 + 399 -> 12, capped at 10
    (5000, {}, 10),
    (0, {}, 1),
    (1, {}, 1),
    (101, {}, 2),
])
def test_list_seats_from_the_object_count(count: int, opts: dict, seats: int) -> None:
    assert estimator(count).estimate(lst(**opts)) == WorkEstimate(seats)


def test_list_of_one_name_unknown_and_stale_counts() -> None:
    assert estimator(5000).estimate(lst(name="one")).initial_seats == 1
    assert estimator(None).estimate(lst()).initial_seats == 1          # no count: an aggregated or new resource
    assert estimator(stale=True).estimate(lst()).initial_seats == 10   # a stale count: the maximum
    assert estimator(stale=True).estimate(lst(), max_seats=3).initial_seats == 3


def test_a_level_caps_the_seats_and_other_verbs_take_one() -> None:
    e = estimator(5000)
    assert e.estimate(lst(), max_seats=4).initial_seats == 4
    assert e.estimate(lst(), max_seats=40).initial_seats == 10  # never above kube's 10
    assert e.estimate(lst(verb="get", name="x")) == WorkEstimate(1)
    assert e.estimate(pb.RequestAttributes(user=ALICE, verb="get", path="/healthz")) == WorkEstimate(1)


def test_a_watch_costs_a_list_only_with_initial_events() -> None:
    e = estimator(5000)
    assert e.estimate(lst(verb="watch")).max_seats == 1
    assert e.estimate(lst(verb="watch", send_initial_events=True, resource_version_match="NotOlderThan")).max_seats == 10


@pytest.mark.parametrize("watchers,final,latency", [
    (0, 0, 0.0), (9, 0, 0.0), (10, 1, 0.005), (25, 3, 0.005), (100, 10, 0.005),
    (150, 10, 0.0075),   # 15 seats' work (75 ms of a seat) kept on the 10 seats allowed
])
def test_writes_hold_seats_for_their_watch_events(watchers: int, final: int, latency: float) -> None:
    d = pb.RequestAttributes(user=ALICE, verb="create", resource_request=True, resource="configmaps",
                             namespace="default")
    est = estimator(watchers=watchers).estimate(d)
    assert (est.initial_seats, est.final_seats) == (1, final)
    assert est.additional_latency == pytest.approx(latency)


def test_a_token_request_sends_no_event() -> None:
    d = pb.RequestAttributes(user=ALICE, verb="create", resource_request=True, resource="serviceaccounts",
                             subresource="token", namespace="default", name="sa")
    assert estimator(watchers=500).estimate(d) == WorkEstimate(1)


@pytest.mark.parametrize("nominal,hand,seats", [
    (5, 6, 1), (10, 6, 1), (15, 6, 2), (20, 6, 3), (35, 6, 5), (100, 6, 15), (200, 6, 30), (10, 1, 2), (100, 20, 5),
])
def test_level_max_seats_as_kube(nominal: int, hand: int, seats: int) -> None:
    assert level_max_seats(nominal, hand) == seats


def test_storage_stats_lookups() -> None:
    now = [1000.0]
    stats = StorageStats(None, clock=lambda: now[0])  # type: ignore[arg-type]
    stats.take(spb.StatsResponse(resources=[
        spb.ResourceStats(resource="configmaps", objects=5000, watchers=3, namespace_watchers={"default": 2},
                          object_watchers={"default/one": 4}),
        spb.ResourceStats(resource="clusterroles", objects=70, watchers=1, object_watchers={"admin": 5}),
        spb.ResourceStats(resource="foos.example.com", objects=12),
        spb.ResourceStats(resource="apiservices.apiregistration.k8s.io", objects=30)]))
    assert stats.object_count("", "configmaps") == 5000
    assert stats.object_count("rbac.authorization.k8s.io", "clusterroles") == 70  # built-in: the bare label
    assert stats.object_count("example.com", "foos") == 12
    assert stats.object_count("apiregistration.k8s.io", "apiservices") == 30
    assert stats.object_count("example.com", "configmaps") is None  # a custom group never borrows a built-in's
    assert stats.object_count("", "secrets") is None
    assert stats.watch_count("", "configmaps", "default", "one") == 3 + 2 + 4
    assert stats.watch_count("", "configmaps", "other", "") == 3
    assert stats.watch_count("rbac.authorization.k8s.io", "clusterroles", "", "admin") == 6
    now[0] += STALE_AFTER + 1
    with pytest.raises(StaleCount):
        stats.object_count("", "configmaps")
