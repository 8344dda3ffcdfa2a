"""A list's answer in parts (the registry's JSON list, APIRequest.chunked) made into the negotiated
form part by part, so that a large list asked for as PartialObjectMetadataList or as protobuf is
converted in bounded pieces between which the event loop serves other requests, as a JSON list or
a Table (sent on untouched) is.

The registry's parts are whole items: the first is the list object up to and with its first items
(`{"kind":...,"metadata":{...},"items":[...`), each next one more items (comma-led once items came
before them), and the last the list's end (`]}`), as services/apiserver/endpoints/lists.py makes them.

Protobuf needs the length of the whole list before its first byte (runtime.Unknown's raw field), so
its items are encoded part by part and kept, and the answer is written once the last part is in: the
proxy then holds the list's protobuf form (smaller than its JSON), never a whole decoded list.
"""
from __future__ import annotations

from typing import Any

import orjson
from google.protobuf import message_factory
from google.protobuf.message import Message

from k8s_pb import runtime_pb2 as runtime
from services.apiserver.negotiation import Output
from services.common.errors import InternalError
from services.common.protowire import varint

from .encoding import as_partial, partial_object, protobuf

END = b"]}"
_ITEMS_TAG = varint(2 << 3 | 2)  # a List message's repeated `items` (field 2), as Unknown's `raw`


def streams(output: Output) -> bool:
    """Whether a list in this form is made part by part (YAML is converted whole; a list asked for as
    one PartialObjectMetadata is a 406, answered by the one-shot path)."""
    return output.format != "yaml" and output.partial != "PartialObjectMetadata"


class ListParts:
    """The answer's bytes for each of the registry's parts: first(), then part() for each next one;
    what is left to write once they are all in, from end()."""

    def __init__(self, output: Output) -> None:
        self.output = output
        self.api_version = "meta.k8s.io/" + output.partial_version
        self.started = False  # items were written (or kept) before the next part
        self._item: type[Message] | None = None  # protobuf: the message of the list's items
        self._kept: list[bytes] = []
        self._size = 0
        self._head = b""
        self._envelope_start = self._envelope_end = b""

    def _items(self, items: list[Any]) -> list[Any]:
        return [partial_object(i, self.api_version) for i in items] if self.output.partial else items

    def first(self, body: bytes) -> bytes:
        obj = orjson.loads(body + END)
        if self.output.partial:
            obj = as_partial(obj, self.output)
        if self.output.format == "protobuf":
            self._begin_protobuf(obj)
            return b""
        head = orjson.dumps({"kind": obj["kind"], "apiVersion": obj["apiVersion"], "metadata": obj["metadata"]})
        return head[:-1] + b',"items":[' + self._json(obj["items"])

    def part(self, body: bytes) -> bytes:
        if body == END:
            return b"" if self.output.format == "protobuf" else END
        items = self._items(orjson.loads(b"[" + (body[1:] if body[:1] == b"," else body) + b"]"))
        if self.output.format == "protobuf":
            self._keep(items)
            return b""
        return self._json(items)

    def end(self) -> list[bytes]:
        """The protobuf answer, in the pieces kept (nothing for JSON: its end went with the last part)."""
        if self.output.format != "protobuf":
            return []
        raw_size = len(self._head) + self._size
        return [self._envelope_start + varint(raw_size) + self._head, *self._kept, self._envelope_end]

    def _json(self, items: list[Any]) -> bytes:
        if not items:
            return b""
        out = orjson.dumps(items)[1:-1]
        if self.started:
            out = b"," + out
        self.started = True
        return out

    def _begin_protobuf(self, obj: dict[str, Any]) -> None:
        """The List's message without its items, then its first items; the envelope around them."""
        api_version, kind = obj["apiVersion"], obj["kind"]
        pb = protobuf()
        cls = pb.ENCODABLE.get((api_version, kind))
        if cls is None:
            raise InternalError(f"no protobuf message for {api_version} {kind}")
        head = cls()
        pb.json_to_message({"metadata": obj["metadata"]}, head, skip_type_meta=True)
        self._head = head.SerializeToString()
        self._item = message_factory.GetMessageClass(cls.DESCRIPTOR.fields_by_name["items"].message_type)
        typ = runtime.Unknown(typeMeta=runtime.TypeMeta(apiVersion=api_version, kind=kind)).SerializeToString()
        self._envelope_start = pb.MAGIC + typ + varint(2 << 3 | 2)
        self._envelope_end = runtime.Unknown(contentEncoding="", contentType="").SerializeToString()
        self._keep(obj["items"])

    def _keep(self, items: list[Any]) -> None:
        assert self._item is not None
        pieces = []
        json_to_message = protobuf().json_to_message
        for item in items:
            msg = self._item()
            json_to_message(item, msg)
            data = msg.SerializeToString()
            pieces += (_ITEMS_TAG, varint(len(data)), data)
        if pieces:
            chunk = b"".join(pieces)
            self._kept.append(chunk)
            self._size += len(chunk)
