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
and its selectable fields (computed by the served kind's strategy in the stored version's terms) stay.
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
        body = self.to_storage({k: v for k, v in obj.items() if k not in TYPE_META})
        out: Obj = {"apiVersion": self.storage_api_version, "kind": self.storage_kind}
        if "metadata" in obj:
            out["metadata"] = obj["metadata"]
        return out | body

    def served_object(self, stored: Obj, api_version: str, kind: str) -> Obj:
        """A whole object in the storage version (with metadata) as api_version/kind serve it."""
        body = self.from_storage({k: v for k, v in stored.items() if k not in TYPE_META})
        out: Obj = {"apiVersion": api_version, "kind": kind}
        if "metadata" in stored:
            out["metadata"] = stored["metadata"]
        return out | body

    def to_storage_envelope(self, env: pb.Object) -> pb.Object:
        return _convert(env, self.storage_api_version, self.storage_kind, self.to_storage)

    def from_storage_envelope(self, env: pb.Object, api_version: str, kind: str) -> pb.Object:
        """A stored object as api_version/kind serve it; an object stored in a version this conversion cannot
        read is a server error (kube's decoder fails the same way), never a silently wrong body."""
        if not self.can_read(env.api_version):
            raise errors.InternalError(f"{env.metadata.name}: stored as {env.api_version}, {env.kind}, which "
                                       f"{api_version}, {kind} cannot be converted from")
        return _convert(env, api_version, kind, self.from_storage)

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


def _convert(env: pb.Object, api_version: str, kind: str, fn: BodyConversion) -> pb.Object:
    out = pb.Object()
    out.CopyFrom(env)
    out.api_version, out.kind = api_version, kind
    if fn is not _same:
        out.body = orjson.dumps(fn(orjson.loads(env.body) if env.body else {}))
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
