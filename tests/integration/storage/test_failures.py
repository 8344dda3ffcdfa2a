"""Compaction (410 Gone), etcd stopped (504) and unreachable (503), each on an etcd of its own."""

from __future__ import annotations

import asyncio
import os
import signal
import time
import uuid
from urllib.parse import urlsplit

import aetcd
import grpc
import httpx
import pytest

from apiary_pb import envelope_pb2 as pb
from apiary_pb import storage_pb2 as spb
from apiary_pb import storage_pb2_grpc as sgrpc
from services.common import grpcutil
from services.common.errors import Gone, ServiceUnavailable, Timeout
from tests.integration.storage.watch_events import WatchStream

EXPIRED_CONTINUE = (
    "The provided continue parameter is too old to display a consistent list result. You can start a "
    "new list without the continue parameter, or use the continue token in this response to retrieve "
    "the remainder of the results. Continuing with the provided token results in an inconsistent list "
    "- objects that were created, modified, or deleted between the time the first chunk was returned "
    "and now may show up in the list."
)


def make(name: str) -> pb.Object:
    o = pb.Object(api_version="v1", kind="ConfigMap", body=b"{}")
    o.metadata.name, o.metadata.namespace = name, "default"
    return o


@pytest.fixture(scope="module")
def private(make_etcd, spawn_storage, tmp_path_factory):
    server = make_etcd()
    with spawn_storage(
        server.url, tmp_path_factory.mktemp("storage-private"), "--etcd-request-timeout", "1"
    ) as s:
        yield server, s


@pytest.fixture
async def stub(private):
    async with grpc.aio.insecure_channel(private[1].address) as ch:
        yield sgrpc.StorageStub(ch)


async def compact(url: str, revision: int) -> None:
    u = urlsplit(url)
    async with aetcd.Client(host=u.hostname, port=u.port) as client:
        await client.compact(revision, physical=True)


async def create(stub, key: str, name: str) -> pb.Object:
    return await grpcutil.call(stub.Create(spb.CreateRequest(key=key, object=make(name))))


async def test_compaction_gives_410(stub, private):
    r = f"t{uuid.uuid4().hex[:10]}"
    prefix = f"/registry/{r}/"
    first = await create(stub, f"{prefix}default/a", "a")
    await create(stub, f"{prefix}default/b", "b")
    page = await grpcutil.call(stub.List(spb.ListRequest(prefix=prefix, limit=1)))
    last = await create(stub, f"{prefix}default/c", "c")
    await compact(private[0].url, int(last.metadata.resource_version))

    # A watch from before the compaction: one ERROR event with a 410 Status, then the end.
    events = [
        ev
        async for ev in WatchStream(
            stub, spb.WatchRequest(prefix=prefix, resource_version=first.metadata.resource_version)
        )
    ]
    assert len(events) == 1 and events[0].type == "ERROR"
    st = events[0].status
    assert (st.code, st.reason, st.status) == (410, "Expired", "Failure")
    assert (
        st.message == f"too old resource version: {first.metadata.resource_version} "
        f"({last.metadata.resource_version})"
    )

    with pytest.raises(Gone) as e:
        await grpcutil.call(
            stub.List(spb.ListRequest(prefix=prefix, limit=1, **{"continue": getattr(page, "continue")}))
        )
    assert (e.value.code, e.value.reason, e.value.message) == (410, "Expired", EXPIRED_CONTINUE)
    # kube hands out a fresh, inconsistent token that continues from the same key at the latest revision
    assert e.value.list_continue
    rest = await grpcutil.call(stub.List(spb.ListRequest(prefix=prefix, limit=10,
                                                          **{"continue": e.value.list_continue})))
    assert [o.metadata.name for o in rest.items] == ["b", "c"]

    with pytest.raises(Gone) as e:
        await grpcutil.call(
            stub.List(
                spb.ListRequest(
                    prefix=prefix,
                    resource_version=first.metadata.resource_version,
                    resource_version_match="Exact",
                )
            )
        )
    assert e.value.reason == "Expired"

    # From the current revision everything still works.
    events = WatchStream(stub, spb.WatchRequest(prefix=prefix, resource_version=last.metadata.resource_version))
    d = await create(stub, f"{prefix}default/d", "d")
    ev = await asyncio.wait_for(events.read(), 5)
    assert ev.type == "ADDED" and ev.object == d
    events.cancel()


async def test_stopped_etcd_times_out_and_the_cache_resumes(stub, private):
    server, storage = private
    r = f"t{uuid.uuid4().hex[:10]}"
    prefix = f"/registry/{r}/"
    w = WatchStream(stub, spb.WatchRequest(prefix=prefix, resource_version="0"))
    a = await create(stub, f"{prefix}default/a", "a")
    assert (await asyncio.wait_for(w.read(), 5)).object == a
    os.kill(server.proc.pid, signal.SIGSTOP)
    try:
        start = time.monotonic()
        with pytest.raises(Timeout) as e:
            await create(stub, f"{prefix}default/b", "b")
        assert e.value.code == 504
        assert time.monotonic() - start < 5
    finally:
        os.kill(server.proc.pid, signal.SIGCONT)
    # The write may or may not have happened (as with kube); the watch still delivers what did.
    c = await create(stub, f"{prefix}default/c", "c")
    while True:
        ev = await asyncio.wait_for(w.read(), 10)
        if ev.object.metadata.name == "c":
            assert ev.object == c
            break
    w.cancel()


async def test_watch_cache_resumes_after_etcd_restarts(stub, private):
    server, _ = private
    r = f"t{uuid.uuid4().hex[:10]}"
    prefix = f"/registry/{r}/"
    a = await create(stub, f"{prefix}default/a", "a")
    w = WatchStream(stub, spb.WatchRequest(prefix=prefix, resource_version=a.metadata.resource_version))
    b = await create(stub, f"{prefix}default/b", "b")
    assert (await asyncio.wait_for(w.read(), 5)).object == b
    await asyncio.to_thread(server.restart)
    deadline = time.monotonic() + 10
    while True:  # the storage service reconnects on its own; until then writes are 503
        try:
            c = await create(stub, f"{prefix}default/c", "c")
            break
        except ServiceUnavailable:
            assert time.monotonic() < deadline
            await asyncio.sleep(0.2)
    ev = await asyncio.wait_for(w.read(), 15)
    assert ev.type == "ADDED" and ev.object == c
    w.cancel()


async def test_unreachable_etcd_is_503_and_not_ready(spawn_storage, unused_port, tmp_path):
    nowhere = f"http://127.0.0.1:{unused_port}"
    with spawn_storage(nowhere, tmp_path, "--etcd-request-timeout", "2") as storage:
        async with grpc.aio.insecure_channel(storage.address) as ch:
            stub = sgrpc.StorageStub(ch)
            start = time.monotonic()
            with pytest.raises(ServiceUnavailable) as e:
                await grpcutil.call(stub.Get(spb.GetRequest(key="/registry/pods/default/a")))
            assert e.value.code == 503 and e.value.headers.get("Retry-After") == "1"
            with pytest.raises((ServiceUnavailable, Timeout)):
                await grpcutil.call(
                    stub.Create(spb.CreateRequest(key="/registry/pods/default/a", object=make("a")))
                )
            with pytest.raises((ServiceUnavailable, Timeout)):
                async for _ in grpcutil.stream(WatchStream(stub, spb.WatchRequest(prefix="/registry/pods/"))):
                    pass
            assert time.monotonic() - start < 8
        r = httpx.get(f"{storage.health}/readyz", timeout=5)
        assert r.status_code == 500 and "[-]etcd failed" in r.text
