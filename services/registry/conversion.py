"""One kind served in two groups from one storage (kube's events: core/v1 Event and events.k8s.io/v1 Event,
both under /registry/events/, stored as core/v1).

A definition served in a version other than its storage's names a Conversion; the storage client converts
every object it writes to the stored version and every object it reads to the served one, so the store,
admission and validation see the request's version and storage holds one. Lists and watches of such a kind
take the decoded path (storage's pre-rendered JSON is the stored version's).

Only the body changes: metadata is the same in both versions, so an envelope converts without decoding
it, and its selectable fields (computed by the served kind's strategy in the stored version's terms) stay.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson

from apiary_pb import envelope_pb2 as pb

Obj = dict[str, Any]


@dataclass(frozen=True)
class Conversion:
    storage_api_version: str
    storage_kind: str
    served_api_version: str
    served_kind: str
    # bodies (apiVersion, kind and metadata aside): served -> stored, stored -> served
    to_storage: Callable[[Obj], Obj]
    from_storage: Callable[[Obj], Obj]

    def storage_object(self, obj: Obj) -> Obj:
        """A whole served object (with metadata) in the stored version."""
        body = self.to_storage({k: v for k, v in obj.items() if k not in ("apiVersion", "kind", "metadata")})
        out: Obj = {"apiVersion": self.storage_api_version, "kind": self.storage_kind}
        if "metadata" in obj:
            out["metadata"] = obj["metadata"]
        return out | body

    def to_storage_envelope(self, env: pb.Object) -> pb.Object:
        return _convert(env, self.storage_api_version, self.storage_kind, self.to_storage)

    def served_envelope(self, env: pb.Object) -> pb.Object:
        return _convert(env, self.served_api_version, self.served_kind, self.from_storage)


def _convert(env: pb.Object, api_version: str, kind: str, fn: Callable[[Obj], Obj]) -> pb.Object:
    out = pb.Object()
    out.CopyFrom(env)
    out.api_version, out.kind = api_version, kind
    body = orjson.loads(env.body) if env.body else {}
    out.body = orjson.dumps(fn(body))
    return out


def renamed(mapping: dict[str, str]) -> Callable[[Obj], Obj]:
    """A body conversion that renames top-level fields and keeps the others as they are."""
    def convert(body: Obj) -> Obj:
        return {mapping.get(k, k): v for k, v in body.items()}
    return convert
