"""The one owner of list JSON: the list object (kind, apiVersion, metadata) around its items, whole or in
parts as they arrive, and the list of objects a deletecollection answers with.

Items are never decoded here: storage hands their JSON (rendered once per object version in its watch
cache, comma-separated, as spb.RawListResponse.json_items carries it, or in parts of the body that
are passed on untouched) or the registry has their envelopes, whose JSON is spliced
(envelope.to_json). A Table is a printers' document around rows made from the same items' JSON,
part by part.
"""
from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any

import orjson

from apiary_pb import envelope_pb2 as pb
from apiary_pb import storage_pb2 as spb
from services.apiserver.resource import ResourceInfo
from services.common import envelope

Obj = dict[str, Any]
END = b"]}"


def list_meta(resp: spb.ListResponse | spb.RawListResponse) -> Obj:
    """ListMeta from storage's answer: resourceVersion, continue, remainingItemCount."""
    meta: Obj = {"resourceVersion": resp.resource_version}
    token = getattr(resp, "continue")
    if token:
        meta["continue"] = token
    if resp.HasField("remaining_item_count"):
        meta["remainingItemCount"] = resp.remaining_item_count
    return meta


def head(info: ResourceInfo, meta: Obj) -> bytes:
    """The list object up to its first item: `{"kind":...,"metadata":{...},"items":[`."""
    return orjson.dumps({"kind": info.list_kind, "apiVersion": info.api_version, "metadata": meta})[:-1] \
        + b',"items":['


def from_json_items(info: ResourceInfo, meta: Obj, items: bytes) -> bytes:
    """The list around its items' JSON (comma-separated)."""
    return b"".join((head(info, meta), items, END))


def from_envelopes(info: ResourceInfo, meta: Obj, items: list[pb.Object]) -> bytes:
    """The list of these objects, their bodies spliced, not decoded."""
    return from_json_items(info, meta, b",".join(envelope.to_json(e) for e in items))


async def rest_of(parts: AsyncIterator[bytes],
                  render: Callable[[bytes], bytes] | None = None) -> AsyncIterator[bytes]:
    """The list's body after its first part: storage's next parts, the items' JSON comma-led once items
    went before (wire.ListParts), passed on as they are, then the end of the list; render makes each
    part's items into what the answer holds instead (a Table's rows, one per item). Every part is whole
    items: the proxy transforms parts one by one."""
    async with contextlib.aclosing(parts):
        async for part in parts:
            if render is None:
                yield part
            elif part[:1] == b",":
                yield b"," + render(part[1:])
            else:
                yield render(part)
    yield END  # a list's items or a Table's rows, then the object
