from __future__ import annotations

from collections import Counter

import pytest

from services.apf.config import Queuing
from services.apf.queueset import (CONCURRENCY_LIMIT, EXECUTING, FINISHED, QUEUE_FULL, REJECTED, TIME_OUT,
                                   WAITING, QueueSet, deal, flow_hash)


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
    assert qs.requests_waiting == 1 and qs.seats_executing == 2
    assert qs.release(a) == [c]
    assert c.state == EXECUTING and a.state == FINISHED
    assert qs.release(b) == [] and qs.release(c) == []
    assert qs.seats_executing == 0 and qs.requests_executing == 0


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
    assert qs.requests_waiting == 0 and qs.seats_executing == 1
    assert all(r.state == FINISHED for r in mine)
    assert qs.release(mine[0]) == []  # releasing twice is harmless
    assert qs.expire() == []
