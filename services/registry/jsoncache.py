"""A bounded LRU of objects' JSON, keyed by their serialized apiary.Object bytes.

The storage service answers LISTs from its watch cache with the same bytes for an object until it
changes (a change brings a new resourceVersion, hence new bytes), so repeated LISTs splice cached
JSON instead of decoding each item and encoding its metadata again. The bytes determine the JSON
(envelope.to_json is a function of the object), so an entry is never stale: old ones just age out.
"""
from __future__ import annotations

from collections import OrderedDict

from prometheus_client import Counter

from apiary_pb import envelope_pb2 as pb
from services.common import envelope

JSON_CACHE = Counter("apiary_registry_json_cache_total", "Lookups in the registry's object JSON cache.",
                     ["result"])
_HIT, _MISS = JSON_CACHE.labels("hit"), JSON_CACHE.labels("miss")
# Per entry beyond the two bytes' contents: two bytes headers, the OrderedDict's slot and link.
ENTRY_OVERHEAD = 200


class JSONCache:
    def __init__(self, max_bytes: int = 64 << 20, max_entries: int = 100_000) -> None:
        self.max_bytes, self.max_entries = max_bytes, max_entries
        self.size = 0
        self._entries: OrderedDict[bytes, bytes] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def to_json(self, raw_items: list[bytes], kind: str, api_version: str) -> list[bytes]:
        """The JSON of each serialized object; kind and apiVersion fill in an object without them."""
        entries = self._entries
        get, touch = entries.get, entries.move_to_end
        out: list[bytes] = []
        append = out.append
        hits = 0
        for raw in raw_items:
            js = get(raw)
            if js is not None:
                touch(raw)
                hits += 1
            else:
                obj = pb.Object.FromString(raw)
                if obj.kind:
                    js = envelope.to_json(obj)
                    self._put(raw, js)
                else:
                    obj.kind, obj.api_version = kind, api_version
                    js = envelope.to_json(obj)
            append(js)
        if hits:
            _HIT.inc(hits)
        if len(out) > hits:
            _MISS.inc(len(out) - hits)
        return out

    def _put(self, raw: bytes, js: bytes) -> None:
        cost = len(raw) + len(js) + ENTRY_OVERHEAD
        if cost > self.max_bytes:
            return
        self._entries[raw] = js
        self.size += cost
        entries = self._entries
        while self.size > self.max_bytes or len(entries) > self.max_entries:
            old_raw, old_js = entries.popitem(last=False)
            self.size -= len(old_raw) + len(old_js) + ENTRY_OVERHEAD
