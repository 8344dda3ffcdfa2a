"""The watch cache without etcd: events applied by hand, watchers checked for kube's semantics."""

from __future__ import annotations

import asyncio

import pytest
from aetcd import rpc

from apiary_pb import envelope_pb2 as pb
from services.apiserver.storage import codec
from services.apiserver.storage.cacher import Cacher
from services.apiserver.storage.watch_cache import key_fields
from services.common.errors import Gone, Timeout
from services.common.selectors import SelectionPredicate
from tests.waiting import until

PREFIX = "/registry/pods/"


def value(name: str, **labels: str) -> bytes:
    o = pb.Object(api_version="v1", kind="Pod")
    o.metadata.name, o.metadata.namespace = name, "ns"
    o.metadata.labels.update(labels)
    return codec.encode(o)


def put(rev: int, name: str, **labels: str) -> rpc.WatchResponse:
    kv = rpc.KeyValue(key=f"{PREFIX}ns/{name}".encode(), value=value(name, **labels), mod_revision=rev)
    return rpc.WatchResponse(
        header=rpc.ResponseHeader(revision=rev), events=[rpc.Event(type=rpc.Event.PUT, kv=kv)]
    )


def delete(rev: int, name: str) -> rpc.WatchResponse:
    kv = rpc.KeyValue(key=f"{PREFIX}ns/{name}".encode(), mod_revision=rev)
    return rpc.WatchResponse(
        header=rpc.ResponseHeader(revision=rev), events=[rpc.Event(type=rpc.Event.DELETE, kv=kv)]
    )


def event(raw: bytes) -> pb.WatchEvent:
    """The cache hands out serialized WatchEvents."""
    assert isinstance(raw, bytes)
    return pb.WatchEvent.FromString(raw)


def drain(w) -> list[tuple[str, str, str]]:
    out = []
    while w.buf:
        _, raw = w.buf.popleft()
        ev = event(raw)
        out.append((ev.type, ev.object.metadata.name, ev.object.metadata.resource_version))
    return out


def names(items: list[bytes]) -> list[str]:
    return [pb.Object.FromString(o).metadata.name for o in items]


@pytest.fixture
def cacher() -> Cacher:
    c = Cacher(etcd=None, prefix=PREFIX, min_history=3, max_history=5)  # type: ignore[arg-type]
    c.watch_cache.rev = c.watch_cache.complete_since = 10
    return c


def test_events_fan_out_and_history_replays(cacher):
    everything = cacher.watch(PREFIX, SelectionPredicate(), 10)
    cacher._apply(put(11, "a"))
    cacher._apply(put(12, "a", x="1"))
    cacher._apply(delete(13, "a"))
    assert drain(everything) == [("ADDED", "a", "11"), ("MODIFIED", "a", "12"), ("DELETED", "a", "13")]
    late = cacher.watch(PREFIX, SelectionPredicate(), 11)
    assert drain(late) == [("MODIFIED", "a", "12"), ("DELETED", "a", "13")]
    assert cacher.watch_cache.store == {} and cacher.watch_cache.rev == 13


def test_deleted_event_carries_the_last_state(cacher):
    w = cacher.watch(PREFIX, SelectionPredicate(), 10)
    cacher._apply(put(11, "a", x="last"))
    cacher._apply(delete(12, "a"))
    added, deleted = event(w.buf.popleft()[1]), event(w.buf.popleft()[1])
    assert deleted.object.metadata.labels["x"] == "last"
    assert deleted.object.metadata.resource_version == "12"
    assert added.object.metadata.resource_version == "11"


def test_selector_transitions(cacher):
    w = cacher.watch(PREFIX, SelectionPredicate.parse("app=web", ""), 10)
    cacher._apply(put(11, "a", app="db"))
    cacher._apply(put(12, "a", app="web"))
    cacher._apply(put(13, "a", app="web", v="2"))
    cacher._apply(put(14, "a", app="db"))
    cacher._apply(delete(15, "a"))
    assert drain(w) == [("ADDED", "a", "12"), ("MODIFIED", "a", "13"), ("DELETED", "a", "14")]


def test_key_filters(cacher):
    one = cacher.watch(f"{PREFIX}ns/a", SelectionPredicate(), 10)
    cacher._apply(put(11, "ab"))
    cacher._apply(put(12, "a"))
    assert drain(one) == [("ADDED", "a", "12")]


def test_window_eviction_gives_410(cacher):
    for rev in range(11, 18):
        cacher._apply(put(rev, f"o{rev}"))
    assert len(cacher.watch_cache.history) == 5
    assert cacher.watch_cache.complete_since == 12
    with pytest.raises(Gone) as e:
        cacher.watch(PREFIX, SelectionPredicate(), 11)
    assert e.value.reason == "Expired" and e.value.message == "too old resource version: 11 (12)"
    assert [r for r, _ in cacher.watch(PREFIX, SelectionPredicate(), 12).buf] == [13, 14, 15, 16, 17]


def test_window_drops_events_older_than_its_history_by_the_cache_clock():
    """Past min_history, events older than history_seconds leave the window (the clock is the cache's)."""
    now = 0.0
    c = Cacher(etcd=None, prefix=PREFIX, min_history=2, history_seconds=10,  # type: ignore[arg-type]
               clock=lambda: now)
    cache = c.watch_cache
    cache.rev = cache.complete_since = 10
    for rev in range(11, 14):
        c._apply(put(rev, f"o{rev}"))
    assert [ev.rev for ev in cache.history] == [11, 12, 13]
    now = 11.0
    c._apply(put(14, "o14"))
    assert [ev.rev for ev in cache.history] == [13, 14]
    assert cache.complete_since == 12


def test_progress_notification_does_not_move_the_revision(cacher):
    """etcd 3.5.1 can send a requested progress notification ahead of the events it covers."""
    cacher._apply(rpc.WatchResponse(header=rpc.ResponseHeader(revision=40)))
    assert cacher.watch_cache.rev == 10


class CountingEtcd:
    """range(prefix, revision, keys_only, min_mod_revision) over a list of (key, mod_revision)."""

    def __init__(self, kvs: list[tuple[str, int]], current: int) -> None:
        self.kvs, self.current, self.calls = kvs, current, 0

    async def range(self, key, end=None, *, revision=0, keys_only=False, min_mod_revision=0, **_):
        self.calls += 1
        k = key.decode()
        inside = [(n, r) for n, r in self.kvs if (n.startswith(k) if end else n == k)]
        kept = [n for n, r in inside if r >= min_mod_revision]
        return rpc.RangeResponse(header=rpc.ResponseHeader(revision=self.current), count=len(inside),
                                 kvs=[rpc.KeyValue(key=n.encode()) for n in kept])


async def test_wait_fresh_asks_etcd_what_changed_under_the_prefix():
    c = Cacher(etcd=None, prefix=PREFIX)  # type: ignore[arg-type]
    cache = c.watch_cache
    cache.rev = cache.complete_since = 10
    c._apply(put(11, "a"))
    c._apply(put(12, "b"))
    # etcd is at 50 through other resources' writes; nothing changed here after 12: fresh at 50
    c.etcd = CountingEtcd([(f"{PREFIX}ns/a", 11), (f"{PREFIX}ns/b", 12)], 50)  # type: ignore[assignment]
    assert await c.wait_fresh(PREFIX, 50, timeout=1) == 50
    assert cache.rev == 12  # the cache's own revision only moves with its events
    assert await c.wait_fresh(f"{PREFIX}ns/a", 50, timeout=1) == 50
    assert await c.wait_fresh(PREFIX, 12, timeout=1) == 12 and c.etcd.calls == 2  # caught up: no question
    # what etcd confirmed is kept while the cache stays at 12: the same read again asks nothing
    assert await c.wait_fresh(PREFIX, 50, timeout=1) == 50 and c.etcd.calls == 2
    # a change under the prefix after 50 (the event still on its way): not fresh until it arrives
    c.etcd = CountingEtcd([(f"{PREFIX}ns/a", 11), (f"{PREFIX}ns/b", 12), (f"{PREFIX}ns/c", 52)], 55)  # type: ignore[assignment]
    with pytest.raises(Timeout, match="Too large resource version: 55, current: 12"):
        await c.wait_fresh(PREFIX, 55, timeout=0.2)
    asked = c.etcd.calls
    waiter = asyncio.create_task(c.wait_fresh(PREFIX, 55, timeout=2))
    await until(lambda: c.etcd.calls > asked, what="the waiter asking etcd")
    c._apply(put(52, "c"))
    assert await waiter == 55 and cache.rev == 52
    # a delete after the cache's revision shows as fewer keys in etcd than in the cache
    c.etcd = CountingEtcd([(f"{PREFIX}ns/a", 11), (f"{PREFIX}ns/c", 52)], 60)  # type: ignore[assignment]
    with pytest.raises(Timeout, match="Too large resource version: 60, current: 52"):
        await c.wait_fresh(PREFIX, 60, timeout=0.2)
    assert await c.wait_fresh(f"{PREFIX}ns/a", 60, timeout=1) == 60  # other keys are fine


def test_slow_watcher_is_cut_off(cacher):
    cacher.watcher_capacity = 2
    w = cacher.watch(PREFIX, SelectionPredicate(), 10)
    for rev in range(11, 14):
        cacher._apply(put(rev, f"o{rev}"))
    assert w.closed and w not in cacher.watchers


def test_snapshot(cacher):
    cache = cacher.watch_cache
    cacher._apply(put(11, "b", app="web"))
    cacher._apply(put(12, "a", app="web"))
    cacher._apply(put(13, "c"))
    assert names(cache.snapshot(PREFIX, SelectionPredicate.parse("app=web", ""))) == ["a", "b"]
    assert names(cache.snapshot(f"{PREFIX}ns/c", SelectionPredicate())) == ["c"]
    assert names(cache.snapshot(PREFIX, SelectionPredicate())) == ["a", "b", "c"]
    assert names(cache.snapshot(PREFIX, SelectionPredicate.parse("", "metadata.name=c"))) == ["c"]
    assert names(cache.snapshot(PREFIX, SelectionPredicate.parse("", "metadata.namespace=other"))) == []
    assert names(cache.snapshot(f"{PREFIX}ns/", SelectionPredicate.parse("!app", ""))) == ["c"]
    assert names(cache.snapshot(f"{PREFIX}n/", SelectionPredicate())) == []
    # the sorted key index follows deletes and creates
    cacher._apply(delete(14, "a"))
    cacher._apply(put(15, "aa"))
    assert names(cache.snapshot(PREFIX, SelectionPredicate())) == ["aa", "b", "c"]
    got = pb.Object.FromString(cache.get(f"{PREFIX}ns/b"))
    assert got.metadata.resource_version == "11" and got.metadata.labels["app"] == "web"
    # only objects whose key does not tell their selectable fields carry a selection entry
    assert set(cache.selection) == {f"{PREFIX}ns/b"}


def test_key_fields():
    assert key_fields("/registry/pods/ns/a") == {"metadata.name": "a", "metadata.namespace": "ns"}
    assert key_fields("/registry/namespaces/a") == {"metadata.name": "a", "metadata.namespace": ""}
    assert key_fields("/registry/apiregistration.k8s.io/apiservices/v1.apps") == {
        "metadata.name": "v1.apps", "metadata.namespace": ""}
    assert key_fields("/registry/example.com/widgets/ns/w") == {
        "metadata.name": "w", "metadata.namespace": "ns"}


def test_selection_kept_when_the_key_does_not_tell(cacher):
    o = pb.Object(api_version="v1", kind="Pod")
    o.metadata.name, o.metadata.namespace = "p", "ns"
    o.fields["status.phase"] = "Running"
    kv = rpc.KeyValue(key=f"{PREFIX}ns/p".encode(), value=codec.encode(o), mod_revision=11)
    cacher._apply(rpc.WatchResponse(header=rpc.ResponseHeader(revision=11),
                                    events=[rpc.Event(type=rpc.Event.PUT, kv=kv)]))
    cache = cacher.watch_cache
    assert names(cache.snapshot(PREFIX, SelectionPredicate.parse("", "status.phase=Running"))) == ["p"]
    assert names(cache.snapshot(PREFIX, SelectionPredicate.parse("", "status.phase!=Running"))) == []
    both = SelectionPredicate.parse("", "metadata.name=p,metadata.namespace=ns")
    assert names(cache.snapshot(PREFIX, both)) == ["p"]
    w = cacher.watch(PREFIX, SelectionPredicate.parse("", "status.phase=Running"), 10)
    assert drain(w) == [("ADDED", "p", "11")]


def test_fields_the_key_tells_are_left_out_of_the_cached_bytes(cacher):
    def apply(rev: int, name: str, **fields: str) -> None:
        o = pb.Object(api_version="v1", kind="Pod")
        o.metadata.name, o.metadata.namespace = name, "ns"
        o.fields.update({"metadata.name": name, "metadata.namespace": "ns", **fields})
        kv = rpc.KeyValue(key=f"{PREFIX}ns/{name}".encode(), value=codec.encode(o), mod_revision=rev)
        cacher._apply(rpc.WatchResponse(header=rpc.ResponseHeader(revision=rev),
                                        events=[rpc.Event(type=rpc.Event.PUT, kv=kv)]))

    w = cacher.watch(PREFIX, SelectionPredicate.parse("", "metadata.name=a"), 10)
    apply(11, "a")
    apply(12, "b", **{"status.phase": "Running"})
    cache = cacher.watch_cache
    assert dict(pb.Object.FromString(cache.get(f"{PREFIX}ns/a")).fields) == {}
    assert dict(pb.Object.FromString(cache.get(f"{PREFIX}ns/b")).fields) == {
        "metadata.name": "b", "metadata.namespace": "ns", "status.phase": "Running"}
    assert names(cache.snapshot(PREFIX, SelectionPredicate.parse("", "metadata.name=a,metadata.namespace=ns"))) == ["a"]
    assert names(cache.snapshot(PREFIX, SelectionPredicate.parse("", "metadata.name!=b"))) == ["a"]
    assert drain(w) == [("ADDED", "a", "11")]


def json_names(blob: bytes) -> list[str]:
    import orjson
    return [o["metadata"]["name"] for o in orjson.loads(b"[" + blob + b"]")]


def snapshot_json(c: Cacher, prefix: str, pred: SelectionPredicate, kind: str, api_version: str) -> bytes:
    """The items' JSON comma-separated, as storage answers a JSON list."""
    return b",".join(c.watch_cache.snapshot_json_items(prefix, pred, kind, api_version))


def test_snapshot_json_renders_once_per_object_version(cacher):
    import orjson

    from services.common import envelope
    from services.apiserver.storage.json_cache import JSONBudget

    cache = cacher.watch_cache
    cacher._apply(put(11, "b", app="web"))
    cacher._apply(put(12, "a"))
    blob = snapshot_json(cacher, PREFIX, SelectionPredicate(), "Pod", "v1")
    # the JSON clients see, resourceVersion included, exactly as the registry would render it
    expected = [envelope.to_json(pb.Object.FromString(d))
                for d in cache.snapshot(PREFIX, SelectionPredicate())]
    assert blob == b",".join(expected)
    assert orjson.loads(b"[" + blob + b"]")[1]["metadata"]["resourceVersion"] == "11"
    kept = cache.json[f"{PREFIX}ns/a"]
    assert snapshot_json(cacher, PREFIX, SelectionPredicate(), "Pod", "v1") == blob
    assert cache.json[f"{PREFIX}ns/a"] is kept  # served again without rendering
    assert json_names(snapshot_json(cacher, PREFIX, SelectionPredicate.parse("app=web", ""), "Pod", "v1")) == ["b"]
    assert json_names(snapshot_json(cacher, f"{PREFIX}ns/a", SelectionPredicate(), "Pod", "v1")) == ["a"]
    assert snapshot_json(cacher, f"{PREFIX}other/", SelectionPredicate(), "Pod", "v1") == b""
    # a change renders the new state; a delete forgets the rendering and gives back its budget
    cacher._apply(put(13, "a", app="db"))
    assert f"{PREFIX}ns/a" not in cache.json
    out = orjson.loads(b"[" + snapshot_json(cacher, PREFIX, SelectionPredicate(), "Pod", "v1") + b"]")
    assert out[0]["metadata"]["labels"] == {"app": "db"} and out[0]["metadata"]["resourceVersion"] == "13"
    used = cache.json.budget.used
    cacher._apply(delete(14, "a"))
    assert f"{PREFIX}ns/a" not in cache.json and cache.json.budget.used < used
    # within the byte budget: the oldest renderings go first, the answer stays complete
    small = Cacher(etcd=None, prefix=PREFIX, json_budget=JSONBudget(limit=1))  # type: ignore[arg-type]
    small._apply(put(11, "x"))
    assert json_names(snapshot_json(small, PREFIX, SelectionPredicate(), "Pod", "v1")) == ["x"]
    assert small.watch_cache.json == {} and small.watch_cache.json.budget.used == 0


def test_snapshot_json_over_the_budget_keeps_the_newest_renderings():
    from services.common import envelope
    from services.apiserver.storage.json_cache import JSONBudget

    names = ["a", "b", "c", "d"]
    c = Cacher(etcd=None, prefix=PREFIX, json_budget=JSONBudget())  # type: ignore[arg-type]
    cache = c.watch_cache
    for rev, name in enumerate(names, 11):
        c._apply(put(rev, name))
    costs = {f"{PREFIX}ns/{n}": len(envelope.to_json(pb.Object.FromString(cache.store[f"{PREFIX}ns/{n}"])))
             + len(f"{PREFIX}ns/{n}") + JSONBudget.ENTRY_OVERHEAD for n in names}
    # room for the renderings of two objects: a list of four keeps the last two it rendered
    cache.json.budget.limit = costs[f"{PREFIX}ns/c"] + costs[f"{PREFIX}ns/d"]
    assert sum(map(len, cache.store.values())) <= cache.json.budget.limit // 2  # not a scan (below)
    assert json_names(snapshot_json(c, PREFIX, SelectionPredicate(), "Pod", "v1")) == names
    assert list(cache.json) == [f"{PREFIX}ns/c", f"{PREFIX}ns/d"]
    assert cache.json.budget.used == cache.json.budget.limit
    # "a" rendered anew pushes out the oldest rendering, "c"
    assert json_names(snapshot_json(c, f"{PREFIX}ns/a", SelectionPredicate(), "Pod", "v1")) == ["a"]
    assert list(cache.json) == [f"{PREFIX}ns/d", f"{PREFIX}ns/a"]


def test_a_list_larger_than_half_the_budget_keeps_none_of_its_renderings():
    """Scan resistance: a list whose objects outweigh half the budget is rendered as it is read and
    kept nowhere; what smaller reads rendered stays."""
    from services.apiserver.storage.json_cache import JSONBudget

    c = Cacher(etcd=None, prefix=PREFIX, json_budget=JSONBudget())  # type: ignore[arg-type]
    cache = c.watch_cache
    for rev, name in enumerate(["a", "b", "c", "d"], 11):
        c._apply(put(rev, name))
    assert json_names(snapshot_json(c, f"{PREFIX}ns/a", SelectionPredicate(), "Pod", "v1")) == ["a"]
    kept, used = dict(cache.json), cache.json.budget.used
    cache.json.budget.limit = 2 * sum(map(len, cache.store.values())) - 2  # the four objects: just over half
    assert json_names(snapshot_json(c, PREFIX, SelectionPredicate(), "Pod", "v1")) == ["a", "b", "c", "d"]
    assert cache.json == kept and cache.json.budget.used == used
    cache.json.budget.limit = 10 << 20  # a small list of a large budget: kept
    assert json_names(snapshot_json(c, PREFIX, SelectionPredicate(), "Pod", "v1")) == ["a", "b", "c", "d"]
    assert len(cache.json) == 4


def test_snapshot_json_fills_a_missing_kind_without_keeping_it(cacher):
    import orjson

    o = pb.Object()
    o.metadata.name, o.metadata.namespace = "k", "ns"
    kv = rpc.KeyValue(key=f"{PREFIX}ns/k".encode(), value=codec.encode(o), mod_revision=11)
    cacher._apply(rpc.WatchResponse(header=rpc.ResponseHeader(revision=11),
                                    events=[rpc.Event(type=rpc.Event.PUT, kv=kv)]))
    item = orjson.loads(snapshot_json(cacher, PREFIX, SelectionPredicate(), "Pod", "v1"))
    assert item["kind"] == "Pod" and item["apiVersion"] == "v1"
    assert cacher.watch_cache.json == {}


def test_attached_watcher_gets_events_straight_from_the_dispatch(cacher):
    """A watch on a multiplexed stream: buffered events first, then each event handed over as it is
    applied (no buffer, no wake-up); the same bytes for every watcher; refused deliveries cut it off."""
    a = cacher.watch(PREFIX, SelectionPredicate(), 10)
    b = cacher.watch(PREFIX, SelectionPredicate.parse("app=web", ""), 10)
    cacher._apply(put(11, "x", app="web"))
    got_a: list[bytes] = []
    got_b: list[bytes] = []
    assert a.attach(lambda ev: got_a.append(ev) or True) == 1
    assert b.attach(lambda ev: got_b.append(ev) or True) == 1
    a.wake.clear()
    cacher._apply(put(12, "x", app="db"))   # leaves b's selection: DELETED for b
    cacher._apply(put(13, "y", app="web"))
    assert not a.buf and not a.wake.is_set()
    assert [(event(e).type, event(e).object.metadata.name) for e in got_a] == [
        ("ADDED", "x"), ("MODIFIED", "x"), ("ADDED", "y")]
    assert [(event(e).type, event(e).object.metadata.resource_version) for e in got_b] == [
        ("ADDED", "11"), ("DELETED", "12"), ("ADDED", "13")]
    assert got_a[2] is got_b[2]  # serialized once, shared
    backlog = cacher.watch(PREFIX, SelectionPredicate(), 10)  # 3 events buffered from history
    assert backlog.attach(lambda ev: False) == 0 and backlog.closed and backlog.overflowed
    cacher.remove(backlog)
    refused = cacher.watch(PREFIX, SelectionPredicate(), 13)
    refused.attach(lambda ev: False)
    cacher._apply(put(14, "z"))
    assert refused.closed and refused.overflowed and refused not in cacher.watchers
    assert a in cacher.watchers and len(got_a) == 4


class SlowEtcd(CountingEtcd):
    """CountingEtcd whose answers wait for release."""

    def __init__(self, kvs: list[tuple[str, int]], current: int) -> None:
        super().__init__(kvs, current)
        self.release = asyncio.Event()

    async def range(self, key, end=None, **kw):
        await self.release.wait()
        return await super().range(key, end, **kw)


async def test_concurrent_reads_share_one_question_to_etcd():
    """The readers of one moment ask etcd once (as of the latest revision asked, which answers for the
    earlier ones too); one that gives up does not take the others' answer with it."""
    c = Cacher(etcd=None, prefix=PREFIX)  # type: ignore[arg-type]
    c.watch_cache.rev = c.watch_cache.complete_since = 10
    c._apply(put(11, "a"))
    etcd = c.etcd = SlowEtcd([(f"{PREFIX}ns/a", 11)], 50)  # type: ignore[assignment]
    first = asyncio.create_task(c.wait_fresh(f"{PREFIX}ns/a", 50, timeout=2))
    await until(lambda: etcd.calls == 0 and c._asking, what="the first question")
    readers = [asyncio.create_task(c.wait_fresh(f"{PREFIX}ns/a", rv, timeout=2)) for rv in (40, 50, 50)]
    await asyncio.sleep(0)
    first.cancel()
    etcd.release.set()
    assert await asyncio.gather(*readers) == [40, 50, 50]
    assert etcd.calls == 1
    # a later revision is a new question; the cache moving on voids what etcd confirmed
    etcd.current = 60
    assert await c.wait_fresh(f"{PREFIX}ns/a", 60, timeout=1) == 60 and etcd.calls == 2
    c._apply(put(61, "a"))
    etcd.current = 70
    assert await c.wait_fresh(f"{PREFIX}ns/a", 70, timeout=1) == 70 and etcd.calls == 3
    assert await c.wait_fresh(f"{PREFIX}ns/a", 70, timeout=1) == 70 and etcd.calls == 3
