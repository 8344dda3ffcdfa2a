"""The object envelope: typed metadata plus the rest of the object as JSON bytes.

The JSON output path splices the body bytes after a freshly encoded metadata
object, so a stored object is never decoded just to be sent back.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson

from apiary_pb import envelope_pb2 as pb

from .errors import BadRequest

_STR_FIELDS = (
    ("name", "name"),
    ("generateName", "generate_name"),
    ("namespace", "namespace"),
    ("uid", "uid"),
    ("resourceVersion", "resource_version"),
)
KNOWN_META = {
    "name", "generateName", "namespace", "uid", "resourceVersion", "generation", "creationTimestamp",
    "deletionTimestamp", "deletionGracePeriodSeconds", "labels", "annotations", "ownerReferences",
    "finalizers", "managedFields", "selfLink",
}


def _str_map(value: Any, field: str) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise BadRequest(f"metadata.{field}: expected a map of strings")
    return value


def to_envelope(obj: dict[str, Any]) -> pb.Object:
    """Split a decoded object into the envelope. Raises BadRequest on ill-typed metadata."""
    meta = obj.get("metadata") or {}
    if not isinstance(meta, dict):
        raise BadRequest("metadata: expected an object")
    out = pb.Object(api_version=str(obj.get("apiVersion") or ""), kind=str(obj.get("kind") or ""))
    m = out.metadata
    try:
        for key, attr in _STR_FIELDS:
            v = meta.get(key)
            if v is not None:
                if not isinstance(v, str):
                    raise BadRequest(f"metadata.{key}: expected a string")
                setattr(m, attr, v)
        if meta.get("generation") is not None:
            m.generation = int(meta["generation"])
        if meta.get("creationTimestamp"):
            m.creation_timestamp = str(meta["creationTimestamp"])
        if meta.get("deletionTimestamp"):
            m.deletion_timestamp = str(meta["deletionTimestamp"])
        if meta.get("deletionGracePeriodSeconds") is not None:
            m.deletion_grace_period_seconds = int(meta["deletionGracePeriodSeconds"])
        # each map and list only when there (an empty one costs a call on the message all the same)
        labels, annotations = meta.get("labels"), meta.get("annotations")
        if labels is not None:
            m.labels.update(_str_map(labels, "labels"))
        if annotations is not None:
            m.annotations.update(_str_map(annotations, "annotations"))
        for ref in meta.get("ownerReferences") or []:
            r = m.owner_references.add(
                api_version=ref.get("apiVersion", ""), kind=ref.get("kind", ""),
                name=ref.get("name", ""), uid=ref.get("uid", ""),
            )
            if ref.get("controller") is not None:
                r.controller = bool(ref["controller"])
            if ref.get("blockOwnerDeletion") is not None:
                r.block_owner_deletion = bool(ref["blockOwnerDeletion"])
        fins = meta.get("finalizers")
        if fins:
            if not isinstance(fins, list) or not all(isinstance(f, str) for f in fins):
                raise BadRequest("metadata.finalizers: expected a list of strings")
            m.finalizers.extend(fins)
        for mf in meta.get("managedFields") or []:
            m.managed_fields.add(
                manager=mf.get("manager", ""), operation=mf.get("operation", ""),
                api_version=mf.get("apiVersion", ""), time=mf.get("time", "") or "",
                fields_type=mf.get("fieldsType", ""),
                fields_v1=orjson.dumps(mf["fieldsV1"]) if mf.get("fieldsV1") is not None else b"",
                subresource=mf.get("subresource", ""),
            )
    except (TypeError, ValueError, AttributeError) as e:
        raise BadRequest(f"metadata: {e}") from None
    rest = {k: v for k, v in obj.items() if k not in ("apiVersion", "kind", "metadata")}
    out.body = orjson.dumps(rest) if rest else b"{}"
    return out


def meta_dict(m: pb.ObjectMeta, fields_v1: Callable[[bytes], Any] = orjson.loads) -> dict[str, Any]:
    """ObjectMeta as Kubernetes JSON, in kube-apiserver's field order, empty fields left out; each
    managedFields entry's fieldsV1 (JSON bytes, as to_envelope keeps it) as fields_v1 reads it."""
    d: dict[str, Any] = {}
    if m.name:
        d["name"] = m.name
    if m.generate_name:
        d["generateName"] = m.generate_name
    if m.namespace:
        d["namespace"] = m.namespace
    if m.uid:
        d["uid"] = m.uid
    if m.resource_version:
        d["resourceVersion"] = m.resource_version
    if m.generation:
        d["generation"] = m.generation
    if m.creation_timestamp:
        d["creationTimestamp"] = m.creation_timestamp
    if m.deletion_timestamp:
        d["deletionTimestamp"] = m.deletion_timestamp
    if m.HasField("deletion_grace_period_seconds"):
        d["deletionGracePeriodSeconds"] = m.deletion_grace_period_seconds
    if m.labels:
        d["labels"] = dict(m.labels)
    if m.annotations:
        d["annotations"] = dict(m.annotations)
    if m.owner_references:
        refs = []
        for r in m.owner_references:
            ref: dict[str, Any] = {"apiVersion": r.api_version, "kind": r.kind, "name": r.name, "uid": r.uid}
            if r.HasField("controller"):
                ref["controller"] = r.controller
            if r.HasField("block_owner_deletion"):
                ref["blockOwnerDeletion"] = r.block_owner_deletion
            refs.append(ref)
        d["ownerReferences"] = refs
    if m.finalizers:
        d["finalizers"] = list(m.finalizers)
    if m.managed_fields:
        mfs = []
        for e in m.managed_fields:
            mf: dict[str, Any] = {"manager": e.manager, "operation": e.operation, "apiVersion": e.api_version}
            if e.time:
                mf["time"] = e.time
            if e.fields_type:
                mf["fieldsType"] = e.fields_type
            if e.fields_v1:
                mf["fieldsV1"] = fields_v1(e.fields_v1)
            if e.subresource:
                mf["subresource"] = e.subresource
            mfs.append(mf)
        d["managedFields"] = mfs
    return d


def from_envelope(o: pb.Object) -> dict[str, Any]:
    """The whole object as a dict (kind, apiVersion, metadata, then the body)."""
    out: dict[str, Any] = {"kind": o.kind, "apiVersion": o.api_version, "metadata": meta_dict(o.metadata)}
    if o.body and o.body != b"{}":
        out.update(orjson.loads(o.body))
    return out


def to_json(o: pb.Object) -> bytes:
    """Encode without decoding the body: splice it after the metadata."""
    # each fieldsV1 spliced as it is kept (orjson's own output), not decoded to be encoded again
    head = orjson.dumps({"kind": o.kind, "apiVersion": o.api_version,
                         "metadata": meta_dict(o.metadata, orjson.Fragment)})
    body = o.body
    if not body or body == b"{}":
        return head
    return head[:-1] + b"," + body[1:]

