from __future__ import annotations

from collections import Counter

import pytest

from services.apf.config import Queuing
from services.apf.queueset import (
    CONCURRENCY_LIMIT,
    EXECUTING,
    FINISHED,
    LINGERING,
    QUEUE_FULL,
    REJECTED,
    TIME_OUT,
    WAITING,
    QueueSet,
    deal,
    flow_hash,
)
from services.apf.workestimator import WorkEstimate


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def make(limit: int = 1, queues: int = 8, hand: int = 2, length: int = 10, wait: float = 15.0):
    clock = Clock()
    return QueueSet(limit, Queuing(queues, hand, length), wait_limit=wait, clock=clock), clock


def test_deal_gives_distinct_cards_in_range() -> None:
    for flow in ("alice", "bob", "system:anonymous", "x" * 50):
        hand = deal(flow_hash(flow), 128, 6)
        assert len(hand) == 6 == len(set(hand))
        assert all(0 <= c < 128 for c in hand)
    assert deal(flow_hash("alice"), 128, 6) == deal(flow_hash("alice"), 128, 6)
    assert sorted(deal(12345, 4, 4)) == [0, 1, 2, 3]


def test_executes_then_queues_then_dispatches_on_release() -> None:
    qs, _ = make(limit=2)
    a, _ = qs.start("f/a")
    b, _ = qs.start("f/b")
    c, _ = qs.start("f/c")
    assert (a.state, b.state, c.state) == (EXECUTING, EXECUTING, WAITING)
    assert qs.requests_waiting == 1 and qs.seats_in_use == 2
    assert qs.release(a) == [c]
    assert c.state == EXECUTING and a.state == FINISHED
    assert qs.release(b) == [] and qs.release(c) == []
    assert qs.seats_in_use == 0 and qs.requests_executing == 0


def test_fair_dispatch_between_a_heavy_and_a_light_flow() -> None:
    """A flow that queued 20 requests does not starve a flow that queued 3 later."""
    qs, clock = make(limit=1, queues=64, hand=1)
    # pick two flows that land in different queues
    flows = [f"flow-{i}" for i in range(50)]
    heavy = flows[0]
    light = next(f for f in flows[1:] if deal(flow_hash(f), 64, 1) != deal(flow_hash(heavy), 64, 1))
    first, _ = qs.start(heavy)
    assert first.state == EXECUTING
    for _ in range(9):
        qs.start(heavy)
    for _ in range(3):
        qs.start(light)
    order = []
    running = first
    while True:
        clock.now += 1.0
        nxt = qs.release(running)
        if not nxt:
            break
        running = nxt[0]
        order.append(running.flow)
    # the light flow's three requests are served among the first few, not after the heavy backlog
    assert [i for i, f in enumerate(order) if f == light] == [0, 2, 4]
    assert Counter(order) == {heavy: 9, light: 3}


def test_shortest_queue_in_hand() -> None:
    qs, _ = make(limit=1, queues=2, hand=2, length=100)
    qs.start("a")  # executes
    w1, _ = qs.start("a")
    w2, _ = qs.start("a")
    assert w1.queue is not w2.queue  # the second one took the other, shorter queue


def test_queue_full() -> None:
    qs, _ = make(limit=1, queues=1, hand=1, length=2)
    qs.start("a")
    qs.start("a")
    qs.start("a")
    r, _ = qs.start("b")
    assert r.state == REJECTED and r.reason == QUEUE_FULL


def test_reject_type_concurrency_limit() -> None:
    qs = QueueSet(2, None, wait_limit=15)
    a, _ = qs.start("a")
    b, _ = qs.start("a")
    c, _ = qs.start("a")
    assert (a.state, b.state, c.state) == (EXECUTING, EXECUTING, REJECTED)
    assert c.reason == CONCURRENCY_LIMIT
    assert qs.release(a) == []
    d, _ = qs.start("a")
    assert d.state == EXECUTING


def test_time_out() -> None:
    qs, clock = make(limit=1, wait=5.0)
    a, _ = qs.start("a")
    b, _ = qs.start("b")
    clock.now += 2
    c, _ = qs.start("c")
    assert qs.next_deadline() == pytest.approx(105.0)
    clock.now += 3.5
    assert qs.expire() == [b]
    assert b.state == REJECTED and b.reason == TIME_OUT and b.wait == pytest.approx(5.5)
    assert qs.next_deadline() == pytest.approx(107.0)
    assert qs.release(a) == [c]
    assert qs.next_deadline() is None and qs.expire() == []


def test_each_request_waits_its_own_limit() -> None:
    """kube's per-request wait limit (a quarter of the request's budget): a later arrival with a shorter
    limit times out first; without one, or beyond it, the level's limit applies."""
    qs, clock = make(limit=1, wait=15.0)
    a, _ = qs.start("a")
    b, _ = qs.start("b", wait_limit=10.0)
    c, _ = qs.start("c", wait_limit=2.0)
    d, _ = qs.start("d")
    assert qs.next_deadline() == pytest.approx(102.0)
    clock.now += 2.5
    assert qs.expire() == [c]
    assert qs.next_deadline() == pytest.approx(110.0)
    clock.now += 8
    assert qs.expire() == [b]
    assert qs.next_deadline() == pytest.approx(115.0)
    assert qs.release(a) == [d]
    e, _ = qs.start("e", wait_limit=60.0)  # the level's limit (--apf-queue-wait-seconds) caps it
    assert e.deadline == pytest.approx(clock.now + 15.0)


def test_withdraw_waiting_and_release_everything_of_a_stream() -> None:
    """What the servicer does when a stream breaks: release each of its requests, in any order."""
    qs, _ = make(limit=2)
    mine = [qs.start("mine")[0] for _ in range(4)]   # 2 executing, 2 waiting
    other, _ = qs.start("other")
    assert [r.state for r in mine] == [EXECUTING, EXECUTING, WAITING, WAITING] and other.state == WAITING
    dispatched = []
    for r in reversed(mine):
        dispatched += qs.release(r)
    assert dispatched == [other] and other.state == EXECUTING
    assert qs.requests_waiting == 0 and qs.seats_in_use == 1
    assert all(r.state == FINISHED for r in mine)
    assert qs.release(mine[0]) == []  # releasing twice is harmless
    assert qs.expire() == []


def test_a_wide_request_waits_for_its_seats_and_narrower_ones_do_not_overtake_it() -> None:
    qs, _ = make(limit=4, queues=1, hand=1)
    a, _ = qs.start("a", WorkEstimate(2))
    b, _ = qs.start("a", WorkEstimate(2))
    wide, _ = qs.start("a", WorkEstimate(3))
    narrow, _ = qs.start("a", WorkEstimate(1))
    assert (a.state, b.state, wide.state, narrow.state) == (EXECUTING, EXECUTING, WAITING, WAITING)
    assert (qs.seats_in_use, qs.seats_waiting) == (4, 4)
    assert qs.release(a) == []                 # 2 free: the head needs 3, and it goes first
    assert qs.release(b) == [wide, narrow]
    assert qs.seats_in_use == 4 and wide.seats == 3


def test_a_request_wider_than_the_limit_runs_alone() -> None:
    qs, _ = make(limit=2, queues=1, hand=1)
    small, _ = qs.start("a")
    huge, _ = qs.start("a", WorkEstimate(10))
    assert huge.state == WAITING
    assert qs.release(small) == [huge] and qs.seats_in_use == 10
    later, _ = qs.start("a")
    assert later.state == WAITING            # over the limit: nothing else until it ends
    assert qs.release(huge) == [later]


def test_final_seats_linger_after_the_request_ends() -> None:
    qs, _ = make(limit=2, queues=1, hand=1)
    write, _ = qs.start("a", WorkEstimate(1, 2, 0.005))
    other, _ = qs.start("a")
    assert write.seats == 2 and other.state == WAITING
    assert qs.release(write) == [] and write.state == LINGERING and qs.seats_in_use == 2
    assert qs.release_final(write) == [other] and write.state == FINISHED
    capped, _ = qs.start("b", WorkEstimate(1, 5, 0.005))   # final seats beyond the limit: fewer, longer
    qs.release(other)
    assert capped.state == EXECUTING
    assert (capped.estimate.final_seats, capped.estimate.additional_latency) == (2, pytest.approx(0.0125))


def test_queue_full_only_while_every_seat_is_taken() -> None:
    qs, _ = make(limit=2, queues=1, hand=1, length=1)
    a, _ = qs.start("a", WorkEstimate(2))
    qs.start("a")
    r, _ = qs.start("a")
    assert r.state == REJECTED and r.reason == QUEUE_FULL
    qs.release(a)
    assert qs.seats_in_use == 1


def test_virtual_time_advances_by_the_seats_each_active_queue_gets() -> None:
    qs, clock = make(limit=4, queues=8, hand=1)
    flows = [f"f{i}" for i in range(40)]
    two = [flows[0], next(f for f in flows if deal(flow_hash(f), 8, 1) != deal(flow_hash(flows[0]), 8, 1))]
    for f in two:
        for _ in range(4):
            qs.start(f)
    r0 = qs.current_r
    clock.now += 1.0
    qs.expire()
    qs.start(two[0])
    assert qs.current_r - r0 == pytest.approx(4 / 2)   # min(8 wanted, 4 seats) / 2 active queues, 1 s
