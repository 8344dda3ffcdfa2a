"""The watch cache's event window (stored column-wise in blocks, its latest events as objects)
against a plain list of the same events."""

from __future__ import annotations

import random

import pytest

from services.apiserver.storage.watch_cache import (
    ADDED,
    DELETED,
    MODIFIED,
    RENDERED_EVENTS,
    CacheEvent,
    EventWindow,
)


def ev(rev: int) -> CacheEvent:
    type_ = (ADDED, MODIFIED, DELETED)[rev % 3]
    sel = ({"app": str(rev)}, None) if rev % 5 == 0 else None
    prev = None if type_ == ADDED else b"prev-%d" % rev
    prev_sel = ({"app": "old"}, None) if rev % 4 == 0 else None
    kind = "Pod" if rev % 50 else "Binding"  # a block holds one kind
    return CacheEvent(type_, f"/registry/pods/ns/o{rev}", rev, b"data-%d" % rev, sel, prev, prev_sel, kind, rev / 10)


def same(a: CacheEvent, b: CacheEvent) -> bool:
    return all(getattr(a, f) == getattr(b, f) for f in ("type", "key", "rev", "data", "sel", "prev", "prev_sel",
                                                        "kind", "time"))


@pytest.mark.parametrize("seed", range(5))
def test_window_matches_a_list_of_its_events(seed):
    rnd = random.Random(seed)
    window, model, rev = EventWindow(), [], 0
    for _ in range(3000):
        if model and rnd.random() < 0.3:
            for _ in range(rnd.randint(1, 300)):
                if not model:
                    break
                assert window.oldest_time() == model[0].time
                assert window.popleft() == model.pop(0).rev
        else:
            for _ in range(rnd.randint(1, 40)):
                rev += rnd.randint(0, 2)  # a transaction's events share a revision
                e = ev(rev)
                window.append(e)
                model.append(e)
        assert len(window) == len(model)
        if model:
            at = rnd.choice([0, model[0].rev - 1, model[-1].rev, rnd.randint(model[0].rev, model[-1].rev)])
            want = [e for e in model if e.rev > at]
            got = window.since(at)
            assert len(got) == len(want) and all(same(g, w) for g, w in zip(got, want))
    assert all(same(g, w) for g, w in zip(window, model))


def test_only_the_latest_events_keep_their_renderings():
    window = EventWindow()
    events = [ev(rev) for rev in range(1, RENDERED_EVENTS + 11)]
    for e in events:
        window.append(e)
    rendered = [e.watch_event(e.type) for e in events]
    assert all(e._out for e in events)  # a batch keeps them through its fan-out, however large
    window.forget_renderings()  # the next batch comes
    assert [e._out is not None for e in events] == [False] * 10 + [True] * RENDERED_EVENTS
    replay = window.since(0)
    assert replay[10:] == events[10:]  # the same objects: a replay shares their renderings
    assert replay[0] is not events[0] and replay[0].watch_event(replay[0].type) == rendered[0]
    window.clear()
    assert len(window) == 0 and window.since(0) == [] and all(e._out is None for e in events)
