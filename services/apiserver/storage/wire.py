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
    """A LIST's JSON answer in parts (ListRequest.chunked), cut by one rule wherever its items come
    from (a hot cache's list at once, renderings as they are made, etcd's pages): a part ends with
    the first item whose length, summed with those before it in the part, reaches the part's size
    (bisection over the summed lengths: no Python step per item). A part's size is taken when the
    part is cut (by default mux.part_bytes(): larger while no small call waits).

    An answer in one part is a RawListResponse: head (its resource_version field) and json_items.
    An answer in several is the head alone, then the items' JSON itself, comma-led once items went
    before it: the list body's continuation, which the registry and the proxy pass on unparsed."""

    def __init__(self, head: bytes, size: int | None = None) -> None:
        self.head, self.fixed = head, size
        self.batch: list[bytes] = []  # items collected and not yet in a part
        self.started = False  # the head went alone: items follow raw
        self.led = False  # items went: the next ones are comma-led

    def size(self) -> int:
        """The size of the part cut next."""
        return self.fixed or part_bytes()

    def extend(self, items: list[bytes]) -> Iterator[bytes]:
        """Collect items; the parts they complete, each cut when it is asked for."""
        batch = self.batch + items if self.batch else items
        ends = list(accumulate(map(len, batch)))  # ends[i]: the bytes of batch[:i + 1], commas aside
        start = 0
        # the first item whose end reaches the part's size completes it
        while (stop := bisect_left(ends, (ends[start - 1] if start else 0) + self.size(), start)) < len(ends):
            if not self.started:
                self.started = True
                yield self.head
            yield self._items(batch[start:stop + 1])
            start = stop + 1
        self.batch = batch[start:]

    def end(self) -> bytes | None:
        """The last part: the answer in one part when no part went before, else the items left
        (None: none are)."""
        if not self.started:
            return b"".join((self.head, *bytes_field(5, b",".join(self.batch))))
        return self._items(self.batch) if self.batch else None

    def _items(self, items: list[bytes]) -> bytes:
        out = b",".join((b"", *items) if self.led else items)
        self.led = True
        return out


def json_parts(head: bytes, items: Iterable[bytes], size: int | None = None) -> Iterator[bytes]:
    """ListParts of items, each made when it is asked for: a list's at once; items rendered as they
    are read are handed over a part's bytes at a time, so that little more than a part is rendered
    ahead of what is sent."""
    parts = ListParts(head, size)
    if isinstance(items, list):
        yield from parts.extend(items)
    else:
        batch: list[bytes] = []
        n, limit = 0, parts.size()
        for item in items:
            batch.append(item)
            n += len(item)
            if n >= limit:
                yield from parts.extend(batch)
                batch, n, limit = [], 0, parts.size()
        yield from parts.extend(batch)
    if (last := parts.end()) is not None:
        yield last
