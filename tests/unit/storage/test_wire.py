"""Answers spliced from serialized objects parse as the messages they stand for."""

from __future__ import annotations

from apiary_pb import envelope_pb2 as pb
from apiary_pb import storage_pb2 as spb
from services.apiserver.storage.codec import STALE_FIELD
from services.apiserver.storage.wire import STALE_SUFFIX, json_parts, varint, watch_event
from services.storage.server import serialize


def obj(name: str, size: int = 10) -> pb.Object:
    o = pb.Object(api_version="v1", kind="ConfigMap", body=b'{"data":{"k":"' + b"x" * size + b'"}}')
    o.metadata.name, o.metadata.resource_version = name, "7"
    o.metadata.labels["a"] = "b"
    return o


def test_varint():
    assert varint(0) == b"\x00"
    for n in (1, 127, 128, 300, 16383, 16384, 2**31, 2**40):
        assert varint(n) == spb.ListRequest(limit=n).SerializeToString()[1:]


def test_watch_event_is_a_watch_event():
    for size in (10, 200, 20_000):
        o = obj("a", size)
        raw = watch_event("MODIFIED", o.SerializeToString())
        assert raw == pb.WatchEvent(type="MODIFIED", object=o).SerializeToString()


def test_raw_list_response_is_a_list_response():
    items = [obj(f"o{i}", 50 * i) for i in range(5)]
    raw = spb.RawListResponse(items=[o.SerializeToString() for o in items], resource_version="9",
                              remaining_item_count=3, **{"continue": "c"}).SerializeToString()
    parsed = spb.ListResponse.FromString(raw)
    assert list(parsed.items) == items
    assert parsed.resource_version == "9" and getattr(parsed, "continue") == "c"
    assert parsed.remaining_item_count == 3
    back = spb.RawListResponse.FromString(spb.ListResponse(items=items).SerializeToString())
    assert [pb.Object.FromString(b) for b in back.items] == items


def test_stale_suffix_sets_the_field():
    o = obj("a")
    o.fields["metadata.name"] = "a"
    marked = pb.Object.FromString(o.SerializeToString() + STALE_SUFFIX)
    assert marked.fields[STALE_FIELD] == "true" and marked.fields["metadata.name"] == "a"
    assert marked.metadata == o.metadata and marked.body == o.body


def test_serialize_passes_bytes_through():
    o = obj("a")
    assert serialize(o) == o.SerializeToString()
    assert serialize(b"\x01\x02") == b"\x01\x02"


def test_json_parts_cut_a_list_as_they_cut_an_iterator():
    """A hot cache's list of renderings is cut by bisection, items from elsewhere one by one: the
    same items in both, whole in every part, about `size` bytes a part, the revision in the first
    only, and one part (with the revision) for an empty list."""
    head = spb.RawListResponse(resource_version="9").SerializeToString()
    for n in (0, 1, 2, 7, 300):
        items = [b'{"i":%d,"pad":"%s"}' % (i, b"x" * (i * 37 % 200)) for i in range(n)]
        for size in (1, 64, 1000, 1 << 20):
            cut = [spb.RawListResponse.FromString(p) for p in json_parts(head, items, size)]
            one_by_one = [spb.RawListResponse.FromString(p) for p in json_parts(head, iter(items), size)]
            for parts in (cut, one_by_one):
                assert [p.resource_version for p in parts] == ["9"] + [""] * (len(parts) - 1)
                assert b",".join(p.json_items for p in parts if p.json_items) == b",".join(items)
                assert all(p.json_items for p in parts) or n == 0
                assert all(len(p.json_items) < size + 250 for p in parts[:-1])
            assert len(cut) == (max(n, 1) if size == 1 else len(cut)) and (n > 0 or len(cut) == 1)
            assert abs(len(cut) - len(one_by_one)) <= max(1, len(cut) // 10)
