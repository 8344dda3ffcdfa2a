"""One kind, several versions or groups, one storage: a kind's storage version and the conversions between it
and each version it is served in (kube's storage encoding version and its scheme's conversion functions).

A definition served in a version other than the one its storage holds names a Conversion: the storage
version (apiVersion and kind) and how a body converts to and from it. kube's examples:

- MutatingAdmissionPolicy(+Binding), served as admissionregistration.k8s.io v1alpha1, v1beta1 and v1 and
  stored as v1beta1: the fields are the same in every version (same_fields: identity bodies, only the type
  meta changes);
- events.k8s.io/v1 Event, stored as a core/v1 Event under the same keys: fields renamed (renamed).

ResourceInfo.stored/served (resource.py) apply it: the storage client writes every object in the
storage version and reads it back in the request's, so the store, validation, admission and the field manager
see the request's version and storage holds one. Lists and watches of such a kind take the decoded path
(storage's pre-rendered JSON is the stored version's); discovery's storageVersionHash names the storage version.

Only the body changes: metadata is the same in every version, so an envelope converts without decoding it,
and its selectable fields (computed by the served kind's strategy in the stored version's terms) stay. The one
exception is kube's: autoscaling/v1 HorizontalPodAutoscalers keep what v1 cannot hold in annotations
(with_annotations: the body conversions read and write metadata.annotations too).
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, ClassVar

import orjson

from apiary_pb import envelope_pb2 as pb
from services.common import errors

Obj = dict[str, Any]
BodyConversion = Callable[[Obj], Obj]
TYPE_META = ("apiVersion", "kind", "metadata")


def _same(body: Obj) -> Obj:
    return body


@dataclass(frozen=True)
class Conversion:
    """How one served version converts to and from its kind's storage version."""
    storage_api_version: str
    storage_kind: str
    # bodies (apiVersion, kind and metadata aside): served -> stored, stored -> served
    to_storage: BodyConversion = _same
    from_storage: BodyConversion = _same
    # The top-level fields renamed on the way to storage (served name -> stored name), when the body
    # conversion is only that: the field manager translates the paths of entries made in another version.
    renames: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    # The apiVersions whose bodies storage may hold, each read with from_storage: the storage version, and for
    # kinds whose versions have the same fields, the ones older code stored.
    readable: frozenset[str] = frozenset()
    # The body conversions also take and give {"metadata": {"annotations": ...}} (an old version keeping the
    # fields it lacks in annotations, as autoscaling/v1 HorizontalPodAutoscalers do).
    with_annotations: bool = False
    # Converted by a call out (a CRD's conversion webhook, services/apiserver/webhook/converter.py): only the
    # async forms below convert, and a list's items go in one call.
    remote: ClassVar[bool] = False

    @property
    def identity(self) -> bool:
        return self.to_storage is _same and self.from_storage is _same

    @property
    def storage_group_version(self) -> tuple[str, str]:
        group, _, version = self.storage_api_version.rpartition("/")
        return group, version

    def can_read(self, api_version: str) -> bool:
        """Whether a stored object of api_version ("" when stored without type meta) reads with from_storage."""
        return not api_version or api_version == self.storage_api_version or api_version in self.readable

    def storage_object(self, obj: Obj) -> Obj:
        """A whole served object (with metadata) in the storage version."""
        return self._whole(obj, self.to_storage, self.storage_api_version, self.storage_kind)

    def served_object(self, stored: Obj, api_version: str, kind: str) -> Obj:
        """A whole object in the storage version (with metadata) as api_version/kind serve it."""
        return self._whole(stored, self.from_storage, api_version, kind)

    def _whole(self, obj: Obj, fn: BodyConversion, api_version: str, kind: str) -> Obj:
        body = fn(self._body(obj, (obj.get("metadata") or {}).get("annotations")))
        out: Obj = {"apiVersion": api_version, "kind": kind}
        if "metadata" in obj:
            out["metadata"] = obj["metadata"]
        if self.with_annotations:
            annotations = (body.pop("metadata", None) or {}).get("annotations")
            meta = out["metadata"] = dict(out.get("metadata") or {})
            meta.pop("annotations", None)
            if annotations:
                meta["annotations"] = annotations
        return out | body

    def _body(self, obj: Obj, annotations: Any) -> Obj:
        body = {k: v for k, v in obj.items() if k not in TYPE_META}
        if self.with_annotations:
            body["metadata"] = {"annotations": dict(annotations or {})}
        return body

    def to_storage_envelope(self, env: pb.Object) -> pb.Object:
        return self._convert_envelope(env, self.storage_api_version, self.storage_kind, self.to_storage)

    def from_storage_envelope(self, env: pb.Object, api_version: str, kind: str) -> pb.Object:
        """A stored object as api_version/kind serve it; an object stored in a version this conversion cannot
        read is a server error (kube's decoder fails the same way), never a silently wrong body."""
        if not self.can_read(env.api_version):
            raise errors.InternalError(f"{env.metadata.name}: stored as {env.api_version}, {env.kind}, which "
                                       f"{api_version}, {kind} cannot be converted from")
        return self._convert_envelope(env, api_version, kind, self.from_storage)

    async def to_storage_envelopes(self, envs: list[pb.Object]) -> list[pb.Object]:
        """envs in the storage version (the remote form; here as to_storage_envelope)."""
        return [self.to_storage_envelope(e) for e in envs]

    async def from_storage_envelopes(self, envs: list[pb.Object], api_version: str, kind: str,
                                     batch: bool = False) -> list[pb.Object]:
        """Stored objects as api_version/kind serve them (batch: a list's items); those already in it as they are."""
        return [e if e.api_version == api_version and e.kind == kind else
                self.from_storage_envelope(e, api_version, kind) for e in envs]

    def field_path(self, path: tuple[str, ...], to_storage: bool) -> tuple[str, ...]:
        """A managedFields path ("f:name" elements) in the other version's names."""
        if not self.renames or not path:
            return path
        names = self.renames if to_storage else {v: k for k, v in self.renames.items()}
        head = path[0]
        if head.startswith("f:") and head[2:] in names:
            return ("f:" + names[head[2:]],) + path[1:]
        return path


    def _convert_envelope(self, env: pb.Object, api_version: str, kind: str, fn: BodyConversion) -> pb.Object:
        out = pb.Object()
        out.CopyFrom(env)
        out.api_version, out.kind = api_version, kind
        if fn is _same:
            return out
        body = fn(self._body(orjson.loads(env.body) if env.body else {}, env.metadata.annotations))
        if self.with_annotations:
            out.metadata.annotations.clear()
            out.metadata.annotations.update((body.pop("metadata", None) or {}).get("annotations") or {})
        out.body = orjson.dumps(body)
        return out


def same_fields(storage_api_version: str, kind: str, versions: tuple[str, ...] = ()) -> Conversion:
    """A kind whose versions have the same fields (only the type meta changes); objects stored in any of
    versions (apiVersions) by older code read as they are."""
    return Conversion(storage_api_version, kind, readable=frozenset(versions))


def renamed(storage_api_version: str, kind: str, mapping: dict[str, str]) -> Conversion:
    """A conversion that renames top-level fields (served -> stored) and keeps the others as they are."""
    back = {v: k for k, v in mapping.items()}

    def to_storage(body: Obj) -> Obj:
        return {mapping.get(k, k): v for k, v in body.items()}

    def from_storage(body: Obj) -> Obj:
        return {back.get(k, k): v for k, v in body.items()}
    return Conversion(storage_api_version, kind, to_storage, from_storage, MappingProxyType(dict(mapping)))


Paths = set[tuple[str, ...]]
PathTranslator = Callable[[Paths, str, str], Paths]
