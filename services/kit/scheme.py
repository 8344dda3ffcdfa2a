"""The scheme: objects between the wire (a served version), the hub and storage (the storage
version, in apiary's envelope), with defaulting on every decode, as kube's codecs do."""
from __future__ import annotations

import copy
import re
from collections.abc import Sequence
from typing import Any

import orjson

from apiary_pb import envelope_pb2 as pb
from services.common import envelope
from services.common.errors import BadRequest

from .api import Kind, Obj

TYPE_META = ("apiVersion", "kind", "metadata")


def _split(obj: Obj) -> tuple[Obj, Obj]:
    """(metadata, the rest below it)."""
    return dict(obj.get("metadata") or {}), {k: v for k, v in obj.items() if k not in TYPE_META}


def _unknown(value: Any, schema: Obj, path: str, out: list[str]) -> None:
    if isinstance(value, dict):
        props = schema.get("properties")
        if props is None:
            return  # a free-form object (or a map, additionalProperties) keeps every key
        for k, v in value.items():
            p = f"{path}.{k}" if path else k
            if k in props:
                _unknown(v, props[k], p, out)
            else:
                out.append(p)
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for i, v in enumerate(value):
            _unknown(v, schema["items"], f"{path}[{i}]", out)


def unknown_fields(kind: Kind, version: str, obj: Obj) -> list[str]:
    """Paths of the fields neither the version's schema nor ObjectMeta declares (kube's strict decoding)."""
    out = [f"metadata.{k}" for k in (obj.get("metadata") or {}) if k not in envelope.KNOWN_META]
    schema = kind.versions[version].schema
    props = schema.get("properties") or {}
    for k, v in obj.items():
        if k in TYPE_META:
            continue
        if k not in props:
            out.append(k)
        else:
            _unknown(v, props[k], k, out)
    return out


def drop(obj: Obj, paths: list[str]) -> None:
    """Remove unknown fields, as kube's decoder does not keep them (paths of unknown_fields)."""
    for path in paths:
        node: Any = obj
        steps = re.findall(r"[^.\[\]]+|\[\d+\]", path)
        for step in steps[:-1]:
            node = node[int(step[1:-1])] if step.startswith("[") else node.get(step)
            if node is None:
                break
        else:
            if isinstance(node, dict):
                node.pop(steps[-1], None)


class Scheme:
    def __init__(self, group: str, kinds: Sequence[Kind]) -> None:
        self.group = group
        self.kinds = {k.plural: k for k in kinds}
        self.by_kind = {k.kind: k for k in kinds}

    def api_version(self, version: str) -> str:
        return f"{self.group}/{version}"

    # wire <-> hub ------------------------------------------------------------------------------------

    def decode(self, kind: Kind, version: str, obj: Obj) -> Obj:
        """A request body in `version` to the hub, defaulted; BadRequest when it names another kind."""
        if not isinstance(obj, dict):
            raise BadRequest("the body of the request must be an object")
        av, k = obj.get("apiVersion"), obj.get("kind")
        if (av and av != self.api_version(version)) or (k and k != kind.kind):
            raise BadRequest(f"the API version in the data ({av}) does not match the expected API version "
                             f"({self.api_version(version)})" if av != self.api_version(version) else
                             f"the kind in the data ({k}) does not match the expected kind ({kind.kind})")
        return self.to_hub(kind, version, obj)

    def to_hub(self, kind: Kind, version: str, obj: Obj) -> Obj:
        meta, rest = _split(obj)
        v = kind.versions[version]
        v.default(rest)
        hub = v.to_hub(rest)
        hub["metadata"] = meta
        return hub

    def from_hub(self, kind: Kind, version: str, hub: Obj) -> Obj:
        meta, rest = _split(hub)
        out: Obj = {"kind": kind.kind, "apiVersion": self.api_version(version), "metadata": meta}
        out.update(kind.versions[version].from_hub(copy.deepcopy(rest)))
        return out

    # storage <-> hub ---------------------------------------------------------------------------------

    def to_storage(self, kind: Kind, hub: Obj) -> pb.Object:
        return envelope.to_envelope(self.from_hub(kind, kind.storage_version, hub))

    def from_storage(self, kind: Kind, obj: pb.Object) -> Obj:
        stored = envelope.from_envelope(obj)
        version = obj.api_version.rpartition("/")[2] or kind.storage_version
        if version not in kind.versions:
            version = kind.storage_version
        return self.to_hub(kind, version, stored)

    def render(self, kind: Kind, version: str, obj: pb.Object) -> Obj:
        """A stored object as a client of `version` sees it."""
        return self.from_hub(kind, version, self.from_storage(kind, obj))

    def render_json(self, kind: Kind, version: str, obj: pb.Object) -> bytes:
        return orjson.dumps(self.render(kind, version, obj))
