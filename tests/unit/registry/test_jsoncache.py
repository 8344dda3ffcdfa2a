"""The registry's JSON cache: same answers as envelope.to_json, bounded, kind filled in."""
from __future__ import annotations

import orjson

from apiary_pb import envelope_pb2 as pb
from services.common import envelope
from services.registry.jsoncache import ENTRY_OVERHEAD, JSONCache


def raw(name: str, rv: str = "1", kind: str = "ConfigMap") -> bytes:
    o = pb.Object(api_version="v1" if kind else "", kind=kind, body=b'{"data":{"a":"b"}}')
    o.metadata.name, o.metadata.namespace, o.metadata.resource_version = name, "ns", rv
    return o.SerializeToString()


def test_same_json_as_to_json_and_hits():
    cache = JSONCache()
    items = [raw(f"o{i}") for i in range(10)]
    want = [envelope.to_json(pb.Object.FromString(r)) for r in items]
    assert cache.to_json(items, "ConfigMap", "v1") == want
    assert len(cache) == 10
    assert cache.to_json([bytes(r) for r in items], "ConfigMap", "v1") == want
    changed = raw("o1", rv="2")
    assert orjson.loads(cache.to_json([changed], "ConfigMap", "v1")[0])["metadata"]["resourceVersion"] == "2"


def test_kind_filled_in_and_not_cached():
    cache = JSONCache()
    out = orjson.loads(cache.to_json([raw("a", kind="")], "Secret", "v1")[0])
    assert out["kind"] == "Secret" and out["apiVersion"] == "v1"
    assert len(cache) == 0


def test_bounded_lru():
    items = [raw(f"o{i}") for i in range(10)]
    js = envelope.to_json(pb.Object.FromString(items[0]))
    per = len(items[0]) + len(js) + ENTRY_OVERHEAD
    cache = JSONCache(max_bytes=per * 5, max_entries=100)
    cache.to_json(items[:5], "ConfigMap", "v1")
    cache.to_json(items[:1], "ConfigMap", "v1")   # o0 most recently used
    cache.to_json(items[5:7], "ConfigMap", "v1")  # evicts o1, o2
    assert len(cache) == 5 and cache.size <= cache.max_bytes
    assert set(cache._entries) == {items[i] for i in (0, 3, 4, 5, 6)}
    small = JSONCache(max_entries=3)
    small.to_json(items, "ConfigMap", "v1")
    assert len(small) == 3
