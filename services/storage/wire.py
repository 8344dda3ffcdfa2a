"""Protobuf wire encoding by hand, for answers spliced from already-serialized objects.

An embedded message is encoded like a bytes field: tag, varint length, the message's bytes. So a
serialized apiary.Object can be placed in a WatchEvent (`Object object = 2`) or a ListResponse
(`repeated Object items = 1`, see RawListResponse in storage.proto) without being decoded, and
concatenating two serializations of a message merges them (map entries: the last one wins).
"""

from __future__ import annotations

from typing import Any

from services.common.protowire import field, varint

from .codec import STALE_FIELD

__all__ = ["STALE_SUFFIX", "field", "serialize", "varint", "watch_event"]


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


def serialize(message: Any) -> bytes:
    """gRPC response serializer: a message, or bytes that are already its serialization."""
    return message if type(message) is bytes else message.SerializeToString()
