"""Protobuf wire encoding by hand, for messages spliced from bytes that are already serialized.

An embedded message is encoded like a bytes field: tag, varint length, the message's bytes; and
concatenating two serializations of a message merges them (a singular field: the last one wins).
Used where building a message with the protobuf library would copy a large payload again.
"""
from __future__ import annotations


def varint(n: int) -> bytes:
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def field(tag: int, payload: bytes) -> bytes:
    """A length-delimited field (tag is the field number)."""
    return varint(tag << 3 | 2) + varint(len(payload)) + payload


def bytes_field(tag: int, payload: bytes) -> list[bytes]:
    """A length-delimited field as parts to join with others (the payload is not copied here)."""
    return [varint(tag << 3 | 2), varint(len(payload)), payload]
