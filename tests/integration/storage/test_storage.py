"""Every apiary.Storage RPC against the real service process and a real etcd."""

from __future__ import annotations

import asyncio
import time
import uuid

import grpc
import httpx
import pytest

from apiary_pb import envelope_pb2 as pb
from apiary_pb import storage_pb2 as spb
from services.common import grpcutil
from services.common.errors import APIError, BadRequest, Conflict, NotFound
from tests.integration.storage.watch_events import WatchStream


def new_resource() -> str:
    """A resource of its own per test, so that tests sharing etcd never see each other's keys."""
    return f"t{uuid.uuid4().hex[:10]}"


def make(
    name: str,
    ns: str = "default",
    labels: dict[str, str] | None = None,
    fields: dict[str, str] | None = None,
    body: bytes = b"{}",
) -> pb.Object:
    o = pb.Object(api_version="v1", kind="Pod", body=body)
    o.metadata.name, o.metadata.namespace, o.metadata.uid = name, ns, f"uid-{name}"
    o.metadata.labels.update(labels or {})
    o.fields.update(fields or {})
    return o


async def call(coro):
    return await grpcutil.call(coro, "storage")


async def registered(storage, resource: str, n: int) -> None:
    """Until the storage service has n watchers of resource registered (as its metrics say): a
    watch from "0" sees only what happens after that."""
    line = f'apiserver_registered_watchers{{resource="{resource}"}} {float(n)}'
    deadline = time.monotonic() + 10
    async with httpx.AsyncClient() as c:
        while line not in (await c.get(f"{storage.health}/metrics")).text:
            assert time.monotonic() < deadline, f"never {n} watchers of {resource}"
            await asyncio.sleep(0.05)


async def create(stub, key: str, obj: pb.Object) -> pb.Object:
    return await call(stub.Create(spb.CreateRequest(key=key, object=obj)))


class Events:
    """A watch read by a background task: a timed-out read must not cancel the gRPC call."""

    def __init__(self, call) -> None:
        self.call = call
        self.queue: asyncio.Queue = asyncio.Queue()
        self.task = asyncio.create_task(self._pump())

    async def _pump(self) -> None:
        try:
            async for ev in self.call:
                await self.queue.put(ev)
            await self.queue.put(None)
        except grpc.aio.AioRpcError as e:
            await self.queue.put(e)

    def cancel(self) -> None:
        self.call.cancel()
        self.task.cancel()


def watch(stub, **req) -> Events:
    return Events(WatchStream(stub, spb.WatchRequest(**req)))


async def next_event(w: Events, timeout: float = 5.0) -> pb.WatchEvent:
    ev = await asyncio.wait_for(w.queue.get(), timeout)
    assert ev is not None, "watch ended"
    assert not isinstance(ev, Exception), ev
    return ev


async def no_event(w: Events, wait: float = 0.3) -> None:
    with pytest.raises(asyncio.TimeoutError):
        ev = await asyncio.wait_for(w.queue.get(), wait)
        raise AssertionError(f"unexpected event {ev}")


# Create / Get ----------------------------------------------------------------------------------


async def test_create_and_get(stub):
    r = new_resource()
    key = f"/registry/{r}/default/a"
    created = await create(stub, key, make("a", body=b'{"spec":{"x":1}}'))
    assert int(created.metadata.resource_version) > 0
    got = await call(stub.Get(spb.GetRequest(key=key)))
    assert got == created
    assert got.body == b'{"spec":{"x":1}}'

    # 409s come back from gRPC as errors.Conflict; the reason tells AlreadyExists apart.
    with pytest.raises(APIError) as e:
        await create(stub, key, make("a"))
    assert (e.value.code, e.value.reason) == (409, "AlreadyExists")
    assert e.value.message == f'{r} "a" already exists'
    assert e.value.details == {"name": "a", "kind": r}


async def test_create_ignores_incoming_resource_version(stub):
    key = f"/registry/{new_resource()}/default/a"
    o = make("a")
    o.metadata.resource_version = "12345"
    created = await create(stub, key, o)
    got = await call(stub.Get(spb.GetRequest(key=key)))
    assert got.metadata.resource_version == created.metadata.resource_version != "12345"


async def test_get_not_found_messages(stub):
    r = new_resource()
    with pytest.raises(NotFound) as e:
        await call(stub.Get(spb.GetRequest(key=f"/registry/{r}/default/nope")))
    assert e.value.message == f'{r} "nope" not found'
    with pytest.raises(NotFound) as e:
        await call(stub.Get(spb.GetRequest(key=f"/registry/example.k8s.io/{r}/v1.nope")))
    assert e.value.message == f'{r}.example.k8s.io "v1.nope" not found'
    assert e.value.details == {"name": "v1.nope", "group": "example.k8s.io", "kind": r}


async def test_get_bad_resource_version(stub):
    with pytest.raises(BadRequest):
        await call(stub.Get(spb.GetRequest(key=f"/registry/{new_resource()}/a", resource_version="abc")))


# Update ----------------------------------------------------------------------------------------


async def test_update(stub):
    r = new_resource()
    key = f"/registry/{r}/default/a"
    v1 = await create(stub, key, make("a"))
    changed = make("a", labels={"x": "1"})
    v2 = await call(
        stub.Update(
            spb.UpdateRequest(key=key, object=changed, expected_resource_version=v1.metadata.resource_version)
        )
    )
    assert int(v2.metadata.resource_version) > int(v1.metadata.resource_version)
    assert dict(v2.metadata.labels) == {"x": "1"}

    with pytest.raises(Conflict) as e:
        await call(
            stub.Update(
                spb.UpdateRequest(
                    key=key, object=make("a"), expected_resource_version=v1.metadata.resource_version
                )
            )
        )
    assert e.value.message == (
        f'Operation cannot be fulfilled on {r} "a": the object has been modified; '
        "please apply your changes to the latest version and try again"
    )

    # Writing what is stored already is a no-op: the resourceVersion stays.
    same = await call(
        stub.Update(
            spb.UpdateRequest(
                key=key,
                object=make("a", labels={"x": "1"}),
                expected_resource_version=v2.metadata.resource_version,
            )
        )
    )
    assert same.metadata.resource_version == v2.metadata.resource_version

    v3 = await call(stub.Update(spb.UpdateRequest(key=key, object=make("a", labels={"x": "3"}))))
    assert int(v3.metadata.resource_version) > int(v2.metadata.resource_version)
    got = await call(stub.Get(spb.GetRequest(key=key)))
    assert got == v3

    with pytest.raises(NotFound):
        await call(
            stub.Update(spb.UpdateRequest(key=f"/registry/{r}/default/missing", object=make("missing")))
        )
    with pytest.raises(NotFound):
        await call(
            stub.Update(
                spb.UpdateRequest(
                    key=f"/registry/{r}/default/missing",
                    object=make("missing"),
                    expected_resource_version="5",
                )
            )
        )


# Delete ----------------------------------------------------------------------------------------


async def test_delete_with_preconditions(stub):
    r = new_resource()
    key = f"/registry/{r}/default/a"
    v1 = await create(stub, key, make("a"))

    with pytest.raises(Conflict) as e:
        await call(stub.Delete(spb.DeleteRequest(key=key, precondition_uid="other")))
    assert e.value.message == (
        f'Operation cannot be fulfilled on {r} "a": Precondition failed: '
        "UID in precondition: other, UID in object meta: uid-a"
    )
    with pytest.raises(Conflict) as e:
        await call(stub.Delete(spb.DeleteRequest(key=key, precondition_resource_version="1")))
    assert e.value.message == (
        f'Operation cannot be fulfilled on {r} "a": Precondition failed: '
        f"ResourceVersion in precondition: 1, ResourceVersion in object meta: "
        f"{v1.metadata.resource_version}"
    )

    gone = await call(
        stub.Delete(
            spb.DeleteRequest(
                key=key, precondition_uid="uid-a", precondition_resource_version=v1.metadata.resource_version
            )
        )
    )
    assert gone.metadata.name == "a"
    assert int(gone.metadata.resource_version) > int(v1.metadata.resource_version)
    with pytest.raises(NotFound):
        await call(stub.Get(spb.GetRequest(key=key)))
    with pytest.raises(NotFound) as e:
        await call(stub.Delete(spb.DeleteRequest(key=key)))
    assert e.value.message == f'{r} "a" not found'


# List ------------------------------------------------------------------------------------------


async def test_list_pagination_is_a_consistent_snapshot(stub):
    r = new_resource()
    prefix = f"/registry/{r}/"
    for i in range(7):
        await create(stub, f"{prefix}default/o{i}", make(f"o{i}"))
    await create(stub, f"/registry/{r}x/default/other", make("other"))  # a sibling prefix stays out

    page1 = await call(stub.List(spb.ListRequest(prefix=prefix, limit=3)))
    assert [o.metadata.name for o in page1.items] == ["o0", "o1", "o2"]
    assert page1.remaining_item_count == 4
    token = getattr(page1, "continue")
    assert token

    # Changes after the first page are not part of the list.
    await create(stub, f"{prefix}default/o3a", make("o3a"))
    await call(stub.Delete(spb.DeleteRequest(key=f"{prefix}default/o5")))

    page2 = await call(stub.List(spb.ListRequest(prefix=prefix, limit=3, **{"continue": token})))
    assert [o.metadata.name for o in page2.items] == ["o3", "o4", "o5"]
    assert page2.resource_version == page1.resource_version
    page3 = await call(
        stub.List(spb.ListRequest(prefix=prefix, limit=3, **{"continue": getattr(page2, "continue")}))
    )
    assert [o.metadata.name for o in page3.items] == ["o6"]
    assert getattr(page3, "continue") == ""
    assert not page3.HasField("remaining_item_count")

    whole = await call(stub.List(spb.ListRequest(prefix=prefix)))
    assert [o.metadata.name for o in whole.items] == ["o0", "o1", "o2", "o3", "o3a", "o4", "o6"]
    assert int(whole.resource_version) > int(page1.resource_version)
    for o in whole.items:
        assert o.metadata.resource_version


async def test_list_namespace_prefix_and_exact_resource_version(stub):
    r = new_resource()
    a = await create(stub, f"/registry/{r}/ns1/a", make("a", "ns1"))
    await create(stub, f"/registry/{r}/ns2/b", make("b", "ns2"))
    ns1 = await call(stub.List(spb.ListRequest(prefix=f"/registry/{r}/ns1/")))
    assert [o.metadata.name for o in ns1.items] == ["a"]
    then = await call(
        stub.List(
            spb.ListRequest(
                prefix=f"/registry/{r}/",
                resource_version=a.metadata.resource_version,
                resource_version_match="Exact",
            )
        )
    )
    assert [o.metadata.name for o in then.items] == ["a"]
    assert then.resource_version == a.metadata.resource_version


async def test_list_selectors(stub):
    r = new_resource()
    prefix = f"/registry/{r}/"
    for i in range(10):
        await create(
            stub,
            f"{prefix}ns{i % 2}/o{i}",
            make(
                f"o{i}",
                f"ns{i % 2}",
                labels={"parity": "even" if i % 2 == 0 else "odd", "i": str(i)},
                fields={"status.phase": "Running" if i < 5 else "Pending"},
            ),
        )

    def names(resp):
        return [o.metadata.name for o in resp.items]

    even = await call(stub.List(spb.ListRequest(prefix=prefix, label_selector="parity=even")))
    assert names(even) == ["o0", "o2", "o4", "o6", "o8"]
    some = await call(stub.List(spb.ListRequest(prefix=prefix, label_selector="i in (1,3,9),parity!=even")))
    assert names(some) == ["o1", "o3", "o9"]
    running = await call(stub.List(spb.ListRequest(prefix=prefix, field_selector="status.phase=Running")))
    assert names(running) == ["o0", "o2", "o4", "o1", "o3"]
    # metadata.name/namespace work without the registry filling them in Object.fields.
    by_ns = await call(
        stub.List(spb.ListRequest(prefix=prefix, field_selector="metadata.namespace=ns1,metadata.name!=o1"))
    )
    assert names(by_ns) == ["o3", "o5", "o7", "o9"]

    # Pages fill up to the limit across several etcd reads; no remaining count with a selector.
    page = await call(stub.List(spb.ListRequest(prefix=prefix, limit=2, label_selector="parity=odd")))
    assert names(page) == ["o1", "o3"]
    assert not page.HasField("remaining_item_count")
    seen = names(page)
    while getattr(page, "continue"):
        page = await call(
            stub.List(
                spb.ListRequest(
                    prefix=prefix,
                    limit=2,
                    label_selector="parity=odd",
                    **{"continue": getattr(page, "continue")},
                )
            )
        )
        seen += names(page)
    assert seen == ["o1", "o3", "o5", "o7", "o9"]


@pytest.mark.parametrize(
    "req",
    [
        {"label_selector": "a in (b"},
        {"label_selector": "=x"},
        {"field_selector": "nooperator"},
        {"continue": "not-a-token!"},
        {"continue": "eyJ2IjoibWV0YS5rOHMuaW8vdjEiLCJydiI6MSwic3RhcnQiOiIuLi8uLi9ldGMifQ"},
        {"resource_version": "x"},
    ],
)
async def test_list_bad_input(stub, req):
    with pytest.raises(BadRequest):
        await call(stub.List(spb.ListRequest(prefix=f"/registry/{new_resource()}/", **req)))


# Watch -----------------------------------------------------------------------------------------


async def test_watch_from_empty_rv_sends_state_then_changes(stub):
    r = new_resource()
    prefix = f"/registry/{r}/"
    await create(stub, f"{prefix}default/a", make("a"))
    await create(stub, f"{prefix}default/b", make("b"))
    w = watch(stub, prefix=prefix)
    try:
        first = [await next_event(w), await next_event(w)]
        assert [(e.type, e.object.metadata.name) for e in first] == [("ADDED", "a"), ("ADDED", "b")]
        c = await create(stub, f"{prefix}default/c", make("c"))
        ev = await next_event(w)
        assert (ev.type, ev.object.metadata.name, ev.object.metadata.resource_version) == (
            "ADDED",
            "c",
            c.metadata.resource_version,
        )
        c2 = await call(
            stub.Update(spb.UpdateRequest(key=f"{prefix}default/c", object=make("c", labels={"v": "2"})))
        )
        ev = await next_event(w)
        assert ev.type == "MODIFIED" and ev.object == c2
        gone = await call(stub.Delete(spb.DeleteRequest(key=f"{prefix}default/a")))
        ev = await next_event(w)
        assert ev.type == "DELETED" and ev.object.metadata.name == "a"
        assert ev.object.metadata.resource_version == gone.metadata.resource_version
    finally:
        w.cancel()


async def test_watch_from_zero_and_from_rv(stub):
    r = new_resource()
    prefix = f"/registry/{r}/"
    a = await create(stub, f"{prefix}default/a", make("a"))
    w0 = watch(stub, prefix=prefix, resource_version="0")
    try:
        ev = await next_event(w0)
        assert (ev.type, ev.object.metadata.name) == ("ADDED", "a")
        b = await create(stub, f"{prefix}default/b", make("b"))
        ev = await next_event(w0)
        assert (ev.type, ev.object.metadata.name) == ("ADDED", "b")
        upd = await call(
            stub.Update(spb.UpdateRequest(key=f"{prefix}default/a", object=make("a", labels={"x": "y"})))
        )
        assert (await next_event(w0)).type == "MODIFIED"
        await call(stub.Delete(spb.DeleteRequest(key=f"{prefix}default/b")))
        assert (await next_event(w0)).type == "DELETED"
    finally:
        w0.cancel()

    # From a resourceVersion: exactly the changes after it, replayed from the watch cache.
    w = watch(stub, prefix=prefix, resource_version=a.metadata.resource_version)
    try:
        evs = [await next_event(w) for _ in range(3)]
        assert [(e.type, e.object.metadata.name) for e in evs] == [
            ("ADDED", "b"),
            ("MODIFIED", "a"),
            ("DELETED", "b"),
        ]
        assert evs[0].object == b and evs[1].object == upd
        await no_event(w)
    finally:
        w.cancel()

    # A resource nobody watched yet: the cache starts at the requested revision.
    r2 = new_resource()
    x = await create(stub, f"/registry/{r2}/default/x", make("x"))
    await create(stub, f"/registry/{r2}/default/y", make("y"))
    w = watch(stub, prefix=f"/registry/{r2}/", resource_version=x.metadata.resource_version)
    try:
        ev = await next_event(w)
        assert (ev.type, ev.object.metadata.name) == ("ADDED", "y")
        await no_event(w)
    finally:
        w.cancel()


async def test_watch_one_key_and_namespace(stub, storage):
    r = new_resource()
    w_key = watch(stub, prefix=f"/registry/{r}/ns1/a", resource_version="0")
    w_ns = watch(stub, prefix=f"/registry/{r}/ns2/", resource_version="0")
    try:
        await registered(storage, r, 2)
        await create(stub, f"/registry/{r}/ns1/ab", make("ab", "ns1"))
        await create(stub, f"/registry/{r}/ns2/b", make("b", "ns2"))
        await create(stub, f"/registry/{r}/ns1/a", make("a", "ns1"))
        ev = await next_event(w_key)
        assert (ev.type, ev.object.metadata.name) == ("ADDED", "a")
        ev = await next_event(w_ns)
        assert (ev.type, ev.object.metadata.name) == ("ADDED", "b")
        await no_event(w_key)
        await no_event(w_ns)
    finally:
        w_key.cancel()
        w_ns.cancel()


async def test_watch_with_selectors_turns_transitions_into_added_and_deleted(stub):
    r = new_resource()
    prefix = f"/registry/{r}/"
    key = f"{prefix}default/a"
    await create(stub, f"{prefix}default/b", make("b", labels={"app": "web"}))
    w = watch(stub, prefix=prefix, label_selector="app=web", field_selector="status.phase!=Failed")
    try:
        ev = await next_event(w)
        assert (ev.type, ev.object.metadata.name) == ("ADDED", "b")
        await create(stub, key, make("a", labels={"app": "db"}))
        await no_event(w)
        v = await call(stub.Update(spb.UpdateRequest(key=key, object=make("a", labels={"app": "web"}))))
        ev = await next_event(w)
        assert ev.type == "ADDED" and ev.object == v
        v = await call(
            stub.Update(spb.UpdateRequest(key=key, object=make("a", labels={"app": "web", "x": "1"})))
        )
        ev = await next_event(w)
        assert ev.type == "MODIFIED" and ev.object == v
        left = await call(
            stub.Update(
                spb.UpdateRequest(
                    key=key,
                    object=make("a", labels={"app": "web", "x": "1"}, fields={"status.phase": "Failed"}),
                )
            )
        )
        ev = await next_event(w)
        # The last state that matched, at the revision where it stopped matching.
        assert ev.type == "DELETED" and ev.object.metadata.labels["x"] == "1"
        assert "status.phase" not in ev.object.fields
        assert ev.object.metadata.resource_version == left.metadata.resource_version
        await call(stub.Delete(spb.DeleteRequest(key=key)))
        await no_event(w)
    finally:
        w.cancel()


async def test_watch_bookmarks_and_initial_events_end(stub):
    r = new_resource()
    prefix = f"/registry/{r}/"
    a = await create(stub, f"{prefix}default/a", make("a"))
    w = watch(
        stub,
        prefix=prefix,
        resource_version="",
        allow_bookmarks=True,
        send_initial_events=True,
        label_selector="nothing",
    )
    try:
        ev = await next_event(w)
        assert ev.type == "BOOKMARK"
        assert ev.object.metadata.annotations["k8s.io/initial-events-end"] == "true"
        assert int(ev.object.metadata.resource_version) >= int(a.metadata.resource_version)
        # Nothing matches "nothing", yet the client learns how far the stream has got.
        b = await create(stub, f"{prefix}default/b", make("b"))
        ev = await next_event(w, timeout=5)
        assert ev.type == "BOOKMARK" and not ev.object.kind
        assert int(ev.object.metadata.resource_version) >= int(b.metadata.resource_version)
    finally:
        w.cancel()


async def test_watch_bad_input(stub):
    w = WatchStream(stub, spb.WatchRequest(prefix=f"/registry/{new_resource()}/", label_selector="a in ("))
    with pytest.raises(BadRequest):
        async for _ in grpcutil.stream(w):
            pass


async def test_many_watchers_share_one_cache(stub, storage):
    r = new_resource()
    prefix = f"/registry/{r}/"
    ws = [watch(stub, prefix=prefix, resource_version="0") for _ in range(5)]
    try:
        await registered(storage, r, 5)
        await create(stub, f"{prefix}default/a", make("a"))
        for w in ws:
            assert (await next_event(w)).object.metadata.name == "a"
        text = httpx.get(f"{storage.health}/metrics").text
        assert f'apiserver_registered_watchers{{resource="{r}"}} 5.0' in text
        assert 'etcd_request_duration_seconds_count{operation="create"' in text
        assert f'apiserver_storage_objects{{resource="{r}"}} 1.0' in text
    finally:
        for w in ws:
            w.cancel()


async def test_reads_at_any_version_come_from_the_watch_cache(stub):
    r = new_resource()
    prefix = f"/registry/{r}/"
    w = watch(stub, prefix=prefix, resource_version="0")
    try:
        a = await create(stub, f"{prefix}default/a", make("a", labels={"k": "v"}))
        await next_event(w)  # the cache has seen it
        got = await call(stub.Get(spb.GetRequest(key=f"{prefix}default/a", resource_version="0")))
        assert got == a
        with pytest.raises(NotFound):
            await call(stub.Get(spb.GetRequest(key=f"{prefix}default/zz", resource_version="0")))
        listed = await call(
            stub.List(spb.ListRequest(prefix=prefix, resource_version="0", label_selector="k=v", limit=1))
        )
        assert list(listed.items) == [a]
        assert int(listed.resource_version) >= int(a.metadata.resource_version)
        assert getattr(listed, "continue") == ""
    finally:
        w.cancel()


async def test_too_large_resource_version_is_504(stub):
    r = new_resource()
    a = await create(stub, f"/registry/{r}/default/a", make("a"))
    future = str(int(a.metadata.resource_version) + 1000)
    with pytest.raises(APIError) as e:
        await call(stub.Get(spb.GetRequest(key=f"/registry/{r}/default/a", resource_version=future)))
    assert e.value.code == 504 and e.value.message.startswith(f"Too large resource version: {future}")
    with pytest.raises(APIError) as e:
        await call(stub.List(spb.ListRequest(prefix=f"/registry/{r}/", resource_version=future)))
    assert e.value.code == 504


async def test_list_as_json_from_the_cache_and_from_etcd(stub):
    """ListRequest.json: the items' JSON as clients see them, the same from the watch cache and from etcd."""
    import orjson

    from services.common import envelope

    r = new_resource()
    prefix = f"/registry/{r}/"
    made = [await create(stub, f"{prefix}ns/o{i}", make(f"o{i}", "ns", labels={"i": str(i)})) for i in range(3)]
    bare = make("nokind", "ns")
    bare.kind = bare.api_version = ""
    made.append(await create(stub, f"{prefix}ns/p", bare))

    def items(resp) -> list:
        assert not resp.items
        return orjson.loads(b"[" + resp.json_items + b"]")

    paged = await call(stub.List(spb.ListRequest(prefix=prefix, limit=2, json=True, kind="Pod", api_version="v1")))
    assert [o["metadata"]["name"] for o in items(paged)] == ["o0", "o1"] and getattr(paged, "continue")
    for rv in ("", "0"):  # consistent (cache once caught up) and any (cache)
        resp = await call(stub.List(spb.ListRequest(prefix=prefix, resource_version=rv, json=True, kind="Pod",
                                                    api_version="v1")))
        got = items(resp)
        assert [o["metadata"]["name"] for o in got] == ["o0", "o1", "o2", "nokind"]
        assert got[:3] == [orjson.loads(envelope.to_json(o)) for o in made[:3]]
        assert got[3]["kind"] == "Pod" and got[3]["apiVersion"] == "v1"
        assert got[0]["metadata"]["resourceVersion"] == made[0].metadata.resource_version
    one = await call(stub.List(spb.ListRequest(prefix=prefix, label_selector="i=1", resource_version="0", json=True)))
    assert [o["metadata"]["name"] for o in items(one)] == ["o1"]


async def test_watches_multiplexed_on_one_stream(stub, storage):
    """Storage.Watches: many watches on one stream, as the registry holds them; each sees its own
    events (selectors, transitions) in order, an event shared by several crosses once."""
    from services.common.watchmux import WatchMuxClient

    r = new_resource()
    prefix = f"/registry/{r}/"
    start = await create(stub, f"{prefix}ns/seed", make("seed", "ns"))
    rv = start.metadata.resource_version
    client = WatchMuxClient(stub.Watches, "storage")
    batches: list = []
    real_read = client._read

    async def spy_read(stream):  # count how often an event crossed the stream
        orig = stream.call
        it = orig.__aiter__()

        class Counting:
            def __aiter__(self):
                return self

            async def __anext__(self):
                batch = await it.__anext__()
                batches.append(batch)
                return batch

            def cancel(self):
                orig.cancel()
        stream.call = Counting()
        await real_read(stream)
    client._read = spy_read

    async def collect(n: int, **kw) -> list[tuple[str, str]]:
        out = []
        async for raw in client.watch(spb.WatchRequest(prefix=prefix, resource_version=rv, **kw)):
            ev = pb.WatchEvent.FromString(raw)
            out.append((ev.type, ev.object.metadata.name))
            if len(out) == n:
                return out
        return out

    everything = asyncio.create_task(collect(3))
    webs = [asyncio.create_task(collect(2, label_selector="app=web")) for _ in range(5)]
    await registered(storage, r, 6)  # every watch attached before the events: each crosses once
    await create(stub, f"{prefix}ns/a", make("a", "ns", labels={"app": "web"}))
    a = await call(stub.Get(spb.GetRequest(key=f"{prefix}ns/a")))
    a.metadata.labels["app"] = "db"
    await call(stub.Update(spb.UpdateRequest(key=f"{prefix}ns/a", object=a)))
    await create(stub, f"{prefix}ns/b", make("b", "ns"))
    assert await asyncio.wait_for(everything, 10) == [("ADDED", "a"), ("MODIFIED", "a"), ("ADDED", "b")]
    for w in webs:
        assert await asyncio.wait_for(w, 10) == [("ADDED", "a"), ("DELETED", "a")]
    deliveries = [d for b in batches for d in b.deliveries]
    added_a = [d for d in deliveries if pb.WatchEvent.FromString(d.event).type == "ADDED"
               and pb.WatchEvent.FromString(d.event).object.metadata.name == "a"]
    assert sum(len(d.ids) for d in added_a) == 6 and len(added_a) < 6  # shared deliveries

    # a resourceVersion before the window: the ERROR event (410), then the end; bad input: the error
    await call(stub.Delete(spb.DeleteRequest(key=f"{prefix}ns/b")))
    events = [pb.WatchEvent.FromString(raw)
              async for raw in client.watch(spb.WatchRequest(prefix=prefix, resource_version="1"))]
    assert [e.type for e in events] == ["ERROR"] and events[0].status.code == 410
    with pytest.raises(BadRequest):
        async for _ in client.watch(spb.WatchRequest(prefix=prefix, label_selector="a in (")):
            pass
    await client.close()


async def test_list_as_json_in_parts_on_the_calls_stream(stub, monkeypatch: pytest.MonkeyPatch):
    """ListRequest.chunked on the Calls stream: parts of about mux.PART_BYTES while a small call waits
    on the caller's side (Frame.quiet unset), larger ones (up to QUIET_PART_BYTES) for a quiet
    caller; the first the revision alone, then whole items' JSON in each; together the same items as
    the answer in one piece."""
    import orjson

    from services.common import mux
    from services.common.mux import client as mux_client

    r = new_resource()
    prefix = f"/registry/{r}/"
    body = orjson.dumps({"data": {"pad": "x" * 2000}})
    await asyncio.gather(*(create(stub, f"{prefix}ns/o{i:03d}", make(f"o{i:03d}", "ns", body=body))
                           for i in range(200)))
    calls = mux.MuxClient(stub.Calls, "storage", {"List": spb.RawListResponse})
    req = spb.ListRequest(prefix=prefix, resource_version="0", json=True, chunked=True)
    quiet = [p async for p, _ in calls.call_stream("List", req)]
    monkeypatch.setattr(mux_client, "quiet", lambda: False)
    parts = [(p, more) async for p, more in calls.call_stream("List", req)]
    assert len(parts) >= 3 and [m for _, m in parts] == [True] * (len(parts) - 1) + [False]
    # the head alone (the revision), then the items' JSON itself, comma-led after the first
    head = spb.RawListResponse.FromString(parts[0][0])
    assert head.resource_version and not head.json_items
    assert all(len(p) < 2 * mux.PART_BYTES for p, _ in parts)
    assert parts[1][0][:1] == b"{" and all(p[:1] == b"," for p, _ in parts[2:])
    items = orjson.loads(b"[" + b"".join(p for p, _ in parts[1:]) + b"]")
    assert [o["metadata"]["name"] for o in items] == [f"o{i:03d}" for i in range(200)]
    assert len(quiet) < len(parts)
    quiet_first = spb.RawListResponse.FromString(quiet[0])
    assert orjson.loads(b"[" + quiet_first.json_items + b"".join(quiet[1:]) + b"]") == items
    whole = await call(stub.List(spb.ListRequest(prefix=prefix, resource_version="0", json=True, chunked=True)))
    assert orjson.loads(b"[" + whole.json_items + b"]") == items  # unary: always one piece


async def test_list_as_json_in_parts_from_etcd(stub, monkeypatch: pytest.MonkeyPatch):
    """An unpaginated JSON list that etcd answers (resourceVersionMatch=Exact) comes in parts too,
    read page by page (server.LIST_PAGE objects) at one revision: the same items as the cache's
    (parts of about mux.PART_BYTES: a caller with a small call waiting)."""
    import orjson

    from services.common import mux
    from services.common.mux import client as mux_client

    monkeypatch.setattr(mux_client, "quiet", lambda: False)

    r = new_resource()
    prefix = f"/registry/{r}/"
    body = orjson.dumps({"data": {"pad": "y" * 1500}})
    await asyncio.gather(*(create(stub, f"{prefix}ns/o{i:03d}", make(f"o{i:03d}", "ns", body=body))
                           for i in range(300)))
    calls = mux.MuxClient(stub.Calls, "storage", {"List": spb.RawListResponse})

    async def read(**kw: str) -> tuple[str, list[dict], int]:
        req = spb.ListRequest(prefix=prefix, json=True, chunked=True, kind="Thing", api_version="v1", **kw)
        parts = [p async for p, _ in calls.call_stream("List", req)]
        first = spb.RawListResponse.FromString(parts[0])  # then the items' JSON itself
        return (first.resource_version, orjson.loads(b"[" + first.json_items + b"".join(parts[1:]) + b"]"),
                len(parts))

    rv, cached, _ = await read(resource_version="0")
    # Writes after rv are not in a list at rv.
    await create(stub, f"{prefix}ns/o999", make("o999", "ns", body=body))
    rv2, from_etcd, n = await read(resource_version=rv, resource_version_match="Exact")
    assert rv2 == rv and n >= 2
    assert [o["metadata"]["name"] for o in from_etcd] == [f"o{i:03d}" for i in range(300)]
    assert from_etcd == cached
    with pytest.raises(APIError) as e:
        await anext(calls.call_stream("List", spb.ListRequest(
            prefix=prefix, json=True, chunked=True, resource_version="99999999", resource_version_match="Exact")))
    assert e.value.code == 504
