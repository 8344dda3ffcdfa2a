"""Protobuf wire encoding by hand, for answers spliced from already-serialized objects.

An embedded message is encoded like a bytes field: tag, varint length, the message's bytes. So a
serialized apiary.Object can be placed in a WatchEvent (`Object object = 2`) or a ListResponse
(`repeated Object items = 1`, see RawListResponse in storage.proto) without being decoded, and
concatenating two serializations of a message merges them (map entries: the last one wins).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable, Iterator
from itertools import accumulate

from services.common.mux import part_bytes
from services.common.protowire import bytes_field, field, varint

from .codec import STALE_FIELD

__all__ = ["STALE_SUFFIX", "ListParts", "field", "json_parts", "varint", "watch_event"]


_TYPES: dict[str, bytes] = {}


def watch_event(type_: str, obj: bytes) -> bytes:
    """A serialized apiary.WatchEvent {type, object} with obj, a serialized apiary.Object."""
    head = _TYPES.get(type_)
    if head is None:
        head = _TYPES[type_] = field(1, type_.encode())
    return head + b"\x12" + varint(len(obj)) + obj


# Appended to a serialized Object: fields[STALE_FIELD] = "true" (an entry of `map<string,string>
# fields = 5`; a later map entry replaces an earlier one with the same key).
STALE_SUFFIX = field(5, field(1, STALE_FIELD.encode()) + field(2, b"true"))


class ListParts:
    """RawListResponses of about `size` bytes of items each (by default what the mux allows the
    current answer's next part: larger while no small call waits), the first starting with head (its
    resource_version field): a LIST's answer in parts (ListRequest.chunked), each made as soon as
    its items are in."""

    def __init__(self, head: bytes, size: int | None = None) -> None:
        self.head, self.fixed = head, size
        self.size = size or 0
        self.batch: list[bytes] = []
        self.n = 0
        self.first = True

    def add(self, item: bytes) -> bytes | None:
        """The next part, when this item completes one."""
        if not self.batch and self.fixed is None:  # a part's size is taken when its first item comes
            self.size = part_bytes()
        self.batch.append(item)
        self.n += len(item) + 1
        return self._part() if self.n >= self.size else None

    def end(self) -> bytes | None:
        """The last part (the only one of an empty list), unless the last item completed one."""
        return self._part() if self.batch or self.first else None

    def _part(self) -> bytes:
        out = b"".join((self.head if self.first else b"", *bytes_field(5, b",".join(self.batch))))
        self.batch, self.n, self.first = [], 0, False
        return out


def json_parts(head: bytes, items: Iterable[bytes], size: int | None = None) -> Iterator[bytes]:
    """ListParts of items, each made when it is asked for; its size is taken when it starts (by
    default mux.part_bytes()). Items in a list are cut where their summed lengths cross the size
    (bisect, no Python step per item: a hot cache's 10,000 items spent ~20 % of storage's CPU per
    LIST in the loop below)."""
    if isinstance(items, list):
        yield from _list_parts(head, items, size)
        return
    parts = ListParts(head, size)
    for item in items:
        if (part := parts.add(item)) is not None:
            yield part
    if (part := parts.end()) is not None:
        yield part


def _list_parts(head: bytes, items: list[bytes], size: int | None) -> Iterator[bytes]:
    ends = list(accumulate(map(len, items)))  # ends[i]: the bytes of items[:i + 1], commas aside
    start, done, first = 0, 0, True
    while start < len(items) or first:
        # the first item whose end reaches the part's size completes it (at least one item a part)
        stop = bisect_left(ends, done + (size or part_bytes()), start) + 1
        yield b"".join((head if first else b"", *bytes_field(5, b",".join(items[start:stop]))))
        if items:
            done = ends[min(stop, len(items)) - 1]
        start, first = stop, False
