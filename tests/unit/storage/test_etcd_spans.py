"""The shared etcd client's events (services/apiserver/storage/etcd.py): a sampled request's etcd call an event
of the current span named as kube's etcd client names its span, with key, revision and duration, the trace carried on to etcd; nothing at all
for a request that is not sampled; background tasks (a watch cache's feed) in no request's trace."""
from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from aetcd import rpc

from services.apiserver.storage.etcd import Etcd, compare_version, op_put
from services.common import tracing
from tests.tracing_memory import UNSAMPLED, Spans, sampled, started


@pytest.fixture()
def spans() -> Iterator[Spans]:
    with started() as s:
        yield s


class FakeKV:
    """etcd's KV service answering at revision 42, keeping each call's metadata."""

    def __init__(self) -> None:
        self.metadata: list[Any] = []

    async def Range(self, request: rpc.RangeRequest, timeout: float, **kw: Any) -> rpc.RangeResponse:
        self.metadata.append(kw.get("metadata"))
        return rpc.RangeResponse(header=rpc.ResponseHeader(revision=42), count=1)

    async def Txn(self, request: rpc.TxnRequest, timeout: float, **kw: Any) -> rpc.TxnResponse:
        self.metadata.append(kw.get("metadata"))
        return rpc.TxnResponse(header=rpc.ResponseHeader(revision=43), succeeded=True)


def etcd_with(kv: FakeKV) -> Etcd:
    etcd = Etcd("http://127.0.0.1:1", 1.0)
    etcd.kv = kv  # type: ignore[assignment]
    return etcd


def events(spans: Spans, name: str) -> list[Any]:
    """The events `name` on the request's root (the span current around the etcd calls)."""
    (root,) = spans.named("GET")
    return [e for e in root.events if e.name == name]


async def test_a_sampled_range_and_txn_are_events_with_key_and_revision(spans: Spans) -> None:
    kv = FakeKV()
    etcd = etcd_with(kv)
    key = b"/registry/configmaps/default/one"
    with sampled():
        await etcd.range(key, op="get", resource="configmaps")
        await etcd.txn([compare_version(key, 0)], [op_put(key, b"v")], [], op="create", resource="configmaps")
    assert [s.name for s in spans.finished()] == ["GET"]  # no span of their own: events of the caller's span
    (get,) = events(spans, "etcdserverpb.KV/Range")
    assert {k: v for k, v in get.attributes.items() if k != "duration_ms"} == {
        "key": key.decode(), "op": "get", "resource": "configmaps", "revision": 42, "count": 1}
    assert get.attributes["duration_ms"] >= 0
    (txn,) = events(spans, "etcdserverpb.KV/Txn")
    assert {k: v for k, v in txn.attributes.items() if k != "duration_ms"} == {
        "key": key.decode(), "op": "create", "resource": "configmaps", "revision": 43, "succeeded": True}
    (root,) = spans.named("GET")
    # etcd is told which span called it
    sent = [dict(md)[tracing.HEADER] for md in kv.metadata]
    assert sent == [f"00-{root.context.trace_id:032x}-{root.context.span_id:016x}-01"] * 2


async def test_a_range_at_a_revision_says_which(spans: Spans) -> None:
    etcd = etcd_with(FakeKV())
    with sampled():
        await etcd.range(b"/registry/pods/", b"/registry/pods0", revision=7, limit=500, op="list", resource="pods")
    (event,) = events(spans, "etcdserverpb.KV/Range")
    assert event.attributes["range_end"] == "/registry/pods0"
    assert event.attributes["at_revision"] == 7 and event.attributes["limit"] == 500


async def test_an_unsampled_request_makes_no_span_and_sends_no_metadata(spans: Spans) -> None:
    kv = FakeKV()
    etcd = etcd_with(kv)
    with sampled(UNSAMPLED):
        await etcd.range(b"/registry/pods/a", op="get", resource="pods")
    await etcd.range(b"/registry/pods/b", op="get", resource="pods")  # no trace at all
    assert spans.finished() == []
    assert kv.metadata == [None, None]


async def test_a_detached_task_is_in_no_request_trace(spans: Spans) -> None:
    etcd = etcd_with(FakeKV())
    with sampled():
        assert tracing.recording()
        await asyncio.create_task(etcd.range(b"/registry/pods/a", op="get", resource="pods"),
                                  context=tracing.detached())
    assert events(spans, "etcdserverpb.KV/Range") == []


async def test_shared_revision_reads_are_in_no_request_trace(spans: Spans) -> None:
    etcd = etcd_with(FakeKV())
    with sampled():
        assert await etcd.current_revision("pods") == 42
    assert events(spans, "etcdserverpb.KV/Range") == []
