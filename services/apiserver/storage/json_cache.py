"""Objects' JSON as clients see it, rendered once and kept beside their bytes until they change
(kube's cachingObject keeps an object's serializations the same way), within a byte budget shared
by every watch cache of the process: a LIST answered as JSON from the cache is then one join, with
no per-object decoding.
"""

from __future__ import annotations

from collections import OrderedDict

from apiary_pb import envelope_pb2 as pb


class JSONBudget:
    """The bytes every cache of a process may spend on objects' rendered JSON (entries count their
    JSON, the key and a fixed overhead; the object's bytes are the cache's own)."""

    ENTRY_OVERHEAD = 100  # the dict slot and the JSON bytes object's header

    def __init__(self, limit: int = 128 << 20) -> None:
        self.limit = limit
        self.used = 0


def cost(key: str, js: bytes) -> int:
    """What an entry takes of the budget."""
    return len(js) + len(key) + JSONBudget.ENTRY_OVERHEAD


class RenderedJSON(OrderedDict[str, bytes]):
    """One watch cache's renderings, key -> JSON, charged to the shared budget.

    An OrderedDict, whose oldest entry is found at once (a dict's next(iter()) walks the slots its
    evictions emptied: a LIST larger than the budget spent ~0.35 s of the event loop per 20,000
    objects on that, growing with each)."""

    def __init__(self, budget: JSONBudget) -> None:
        super().__init__()
        self.budget = budget

    def keep(self, key: str, js: bytes) -> None:
        """Keep js for key; this cache's oldest renderings go first to make room, and a cache with
        nothing left to give keeps none."""
        budget = self.budget
        need = cost(key, js)
        self.forget(key)
        while budget.used + need > budget.limit and self:
            k, old = self.popitem(last=False)
            budget.used -= cost(k, old)
        if budget.used + need <= budget.limit:
            self[key] = js
            budget.used += need

    def forget(self, key: str) -> None:
        """Drop key's rendering (its object changed) and give back its bytes."""
        js = self.pop(key, None)
        if js is not None:
            self.budget.used -= cost(key, js)

    def clear(self) -> None:
        budget = self.budget
        for k, js in self.items():
            budget.used -= cost(k, js)
        super().clear()


def fill_kind(obj: pb.Object, kind: str, api_version: str) -> bool:
    """Give an object stored without kind and apiVersion the request's; whether it had to."""
    if obj.kind:
        return False
    obj.kind, obj.api_version = kind, api_version
    return True
