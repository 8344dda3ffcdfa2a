"""Answers spliced from serialized objects parse as the messages they stand for."""

from __future__ import annotations

import orjson

from apiary_pb import envelope_pb2 as pb
from apiary_pb import storage_pb2 as spb
from services.apiserver.storage.codec import STALE_FIELD
from services.apiserver.storage.wire import STALE_SUFFIX, ListParts, json_parts, varint, watch_event
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


def _items(parts: list[bytes]) -> tuple[str, list[bytes]]:
    """The revision and the items of an answer in parts (wire.ListParts): a RawListResponse, then
    the items' JSON itself, comma-led after the first items."""
    first = spb.RawListResponse.FromString(parts[0])
    body = first.json_items + b"".join(parts[1:])
    return first.resource_version, orjson.loads(b"[" + body + b"]")


def test_list_parts_cut_items_one_way_however_they_come():
    """One rule cuts a list's parts: a hot cache's list at once, renderings one by one and etcd's
    pages give the same parts byte for byte; whole items in every part, about `size` bytes each; an
    answer in one part (an empty list's too) is a RawListResponse with every item, one in several is
    the head alone, then the items' JSON."""
    head = spb.RawListResponse(resource_version="9").SerializeToString()
    for n in (0, 1, 2, 7, 300):
        items = [b'{"i":%d,"pad":"%s"}' % (i, b"x" * (i * 37 % 200)) for i in range(n)]
        for size in (1, 64, 1000, 1 << 20):
            cut = list(json_parts(head, items, size))
            assert list(json_parts(head, iter(items), size)) == cut
            for page in (1, 3, 100):
                parts = ListParts(head, size)
                paged = [p for i in range(0, n, page) for p in parts.extend(items[i:i + page])]
                assert paged + [p for p in [parts.end()] if p is not None] == cut
            assert _items(cut) == ("9", [orjson.loads(i) for i in items])
            assert (len(cut) == 1) == (sum(map(len, items)) < size)  # the items fill no part
            if len(cut) == 1:
                assert spb.RawListResponse.FromString(cut[0]).json_items == b",".join(items)
                continue
            assert cut[0] == head and cut[1][:1] == b"{" and all(p[:1] == b"," for p in cut[2:])
            assert all(len(p) < size + 250 for p in cut[1:])
            assert all(orjson.loads(b"[" + p.removeprefix(b",") + b"]") for p in cut[1:])  # whole items
            if size == 1:
                assert len(cut) == n + 1
