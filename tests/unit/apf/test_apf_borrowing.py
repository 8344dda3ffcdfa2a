"""Borrowing between levels: kube's allocation (conc_alloc.go, its randomized checks) and the periodic
re-adjustment of the current limits from seat demand (apf_controller's updateBorrowing)."""
from __future__ import annotations

import itertools
import random

import pytest

from apiary_pb import envelope_pb2 as pb
from services.apf.borrowing import AllocItem, Integrator, SeatDemandStats, compute_concurrency_allocation
from services.apf.config import (
    BOOTSTRAP,
    Configuration,
    FlowSchema,
    PolicyRules,
    PriorityLevel,
    Queuing,
    ResourceRule,
    Subject,
)
from services.apf.controller import FlowController
from services.common.identity import user_pb


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _partition(rng: random.Random, n: int, total: float) -> list[float]:
    cuts = sorted(rng.random() for _ in range(n - 1))
    edges = [0.0, *cuts, 1.0]
    return [(b - a) * total for a, b in itertools.pairwise(edges)]


def test_allocation_meets_kubes_conditions_on_random_problems() -> None:
    """kube's TestConcAlloc: the sum is met and every item is at fair x target unless a bound holds it."""
    rng = random.Random(1234567890)
    for _ in range(3000):
        n = rng.choice((1, 2, 3, 4, 6, 9))
        style = rng.randrange(20)
        items: list[AllocItem] = []
        if style == 0:  # bound from below
            required = rng.randrange(n * 3)
            items = [AllocItem(x + 2 * rng.random(), x, x + 3 * rng.random()) for x in _partition(rng, n, required)]
        elif style == 1:  # bound from above
            required = rng.randrange(n * 3) + 1
            for x in _partition(rng, n, required):
                lo = x * max(0.0, 1.25 * rng.random() - 1)
                items.append(AllocItem(lo + rng.random(), lo, x))
        else:
            for _ in range(n):
                lo = max(0.0, rng.random() * 5 - 1)
                items.append(AllocItem(lo + 2 * rng.random(), lo, lo + 3 * rng.random()))
            low, high = sum(i.lower for i in items), sum(i.upper for i in items)
            required = round(low + (high - low) * rng.random())
        while rng.random() < 0.25:
            items.insert(rng.randrange(len(items) + 1), AllocItem(0.0, 0.0, rng.random() + 0.00001))
        low, high = sum(i.lower for i in items), sum(i.upper for i in items)
        if low - required > 1e-10 or required - high > 1e-10:
            with pytest.raises(ValueError):
                compute_concurrency_allocation(required, items)
            continue
        allocs, fair = compute_concurrency_allocation(required, items)
        assert sum(allocs) == pytest.approx(required, rel=1e-9, abs=1e-9)
        for it, a in zip(items, allocs):
            want = fair * max(it.target, 0.001)
            if want <= it.lower:
                assert a == it.lower
            elif want >= it.upper:
                assert a == it.upper
            else:
                assert a == pytest.approx(want, rel=1e-9)


def test_allocation_errors() -> None:
    with pytest.raises(ValueError, match="lower bounds sum"):
        compute_concurrency_allocation(1, [AllocItem(2, 2, 3)])
    with pytest.raises(ValueError, match="upper bounds sum"):
        compute_concurrency_allocation(9, [AllocItem(2, 2, 3)])
    with pytest.raises(ValueError, match="below its lower bound"):
        compute_concurrency_allocation(2, [AllocItem(1, 2, 3)])


def test_integrator_and_smoothing() -> None:
    clock = Clock()
    i = Integrator(clock)
    i.set(4)
    clock.now += 1
    i.set(0)
    clock.now += 1
    duration, avg, dev, high = i.reset()
    assert (duration, avg, dev, high) == (2, 2, 2, 4)
    stats = SeatDemandStats()
    stats.update(duration, avg, dev, high)
    assert stats.smoothed == 4  # the envelope, at least
    stats.update(10, 0, 0, 0)
    assert stats.smoothed == pytest.approx(4 * 0.977)  # then it decays


def test_idle_bootstrap_levels_share_the_seats_by_their_lower_bounds() -> None:
    """kube at 400 + 200 seats with no demand: sum of nominal limits 602, lower bounds 258, fair 2.33."""
    ctl = FlowController(BOOTSTRAP, server_seats=600, wait_limit=15, clock=Clock())
    assert {n: lv.current_limit for n, lv in ctl.levels.items()} == {
        "exempt": 0, "catch-all": 30, "system": 117, "node-high": 170, "leader-election": 58,
        "workload-high": 114, "workload-low": 56, "global-default": 56}
    assert ctl.fair_frac == pytest.approx(602 / 258.001)
    assert ctl.levels["global-default"].queueset.concurrency_limit == 56


def _two_levels(exempt_shares: int = 0, exempt_lendable: int = 0) -> Configuration:
    busy = PriorityLevel("busy", shares=20, lendable_percent=50, queuing=Queuing(16, 4, 1000))
    idle = PriorityLevel("idle", shares=10, lendable_percent=50, queuing=Queuing(16, 4, 1000))
    exempt = PriorityLevel("exempt", exempt=True, shares=exempt_shares, lendable_percent=exempt_lendable)
    catch = PriorityLevel("catch-all", shares=0, queuing=None)
    everything = (ResourceRule(("*",), ("*",), ("*",), ("*",), True),)
    schemas = tuple(FlowSchema(name, name, 100, "ByUser", (PolicyRules((Subject("Group", name),), everything),))
                    for name in ("busy", "idle"))
    mandatory = tuple(fs for fs in BOOTSTRAP.flow_schemas if fs.name in ("exempt", "catch-all"))
    return Configuration((exempt, busy, idle, catch), mandatory + schemas)


def _load(ctl: FlowController, level: str, n: int) -> None:
    for i in range(n):
        user = user_pb(f"{level}-{i % 7}", [level])
        ctl.start(pb.RequestAttributes(user=user, verb="get", resource_request=True, resource="pods",
                                       namespace="default", name="x"))


async def test_a_busy_level_borrows_the_idle_levels_seats() -> None:
    clock = Clock()
    ctl = FlowController(_two_levels(), server_seats=30, wait_limit=1000, clock=clock)
    busy, idle = ctl.levels["busy"], ctl.levels["idle"]
    assert (busy.limits.nominal, busy.limits.lower, idle.limits.nominal, idle.limits.lower) == (20, 10, 10, 5)
    # idle: shared by the lower bounds, two to one
    assert (busy.current_limit, idle.current_limit) == (20, 10)
    _load(ctl, "busy", 100)           # 100 seats wanted for a whole period, 5 of 30 seats idle
    clock.now += 10
    ctl.adjust_limits()
    assert busy.current_limit == 25 and idle.current_limit == 5   # all the idle level may lend
    assert busy.queueset.seats_in_use == 25
    # both busy: each back to its nominal share, two to one
    _load(ctl, "idle", 100)
    clock.now += 10
    ctl.adjust_limits()
    assert (busy.current_limit, idle.current_limit) == (20, 10)


async def test_the_exempt_level_lends_its_nominal_seats() -> None:
    clock = Clock()
    ctl = FlowController(_two_levels(exempt_shares=30, exempt_lendable=100), server_seats=60, wait_limit=1000,
                         clock=clock)
    assert ctl.levels["exempt"].limits.nominal == 30 and ctl.levels["exempt"].limits.lower == 0
    _load(ctl, "busy", 100)
    clock.now += 10
    ctl.adjust_limits()
    # busy's demand (100) is met from the exempt level's 30 idle seats and idle's lendable half
    assert ctl.levels["busy"].current_limit == 60 - 5 and ctl.levels["exempt"].current_limit == 0
    # the exempt level's own requests count as its demand
    admin = user_pb("admin", ["system:masters"])
    held = [ctl.start(pb.RequestAttributes(user=admin, verb="get", path="/version")) for _ in range(20)]
    assert all(t.granted for t in held) and ctl.levels["exempt"].seats_in_use == 20
    clock.now += 10
    ctl.adjust_limits()
    assert ctl.levels["exempt"].current_limit >= 20
