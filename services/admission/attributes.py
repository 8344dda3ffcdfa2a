"""admission.Attributes: what a plugin sees of one request, decoded only when a plugin asks.

Who asks and for what (user, group, version, resource, namespace, name) is the RequestAttributes
shape that authorization and priority and fairness see too; the operation, kind, objects and
options are admission's own."""
from __future__ import annotations

from typing import Any

import jsonpatch
import orjson

from apiary_pb import admission_pb2 as adpb
from apiary_pb import envelope_pb2 as pb
from services.apiserver.catalogue import Catalogue
from services.apiserver.resource import ResourceInfo, convert_object
from services.common.envelope import from_envelope, to_envelope

from .reinvocation import ReinvocationContext

CREATE, UPDATE, DELETE, CONNECT = "CREATE", "UPDATE", "DELETE", "CONNECT"


class Attributes:
    def __init__(self, request: adpb.AdmissionRequest, catalogue: Catalogue) -> None:
        self.request = request
        self.catalogue = catalogue  # the served kinds: their versions and groups sharing one storage
        self.warnings: list[str] = []
        # Audit annotations of the request (key -> value), as kube's admission.Attributes.AddAnnotation.
        self.audit_annotations: dict[str, str] = {}
        self._object: dict[str, Any] | None = None
        self._old_object: dict[str, Any] | None = None
        self._replaced = False
        self._reinvocation: ReinvocationContext | None = None

    @property
    def reinvocation(self) -> ReinvocationContext:
        """The request's reinvocation context, made when a plug-in that can run twice (a mutating webhook or
        policy that matched) first asks for it: most requests never meet one."""
        if self._reinvocation is None:
            self._reinvocation = ReinvocationContext()
        return self._reinvocation

    @property
    def should_reinvoke(self) -> bool:
        """Whether a reinvocable plug-in asked for a second pass of the mutating phase."""
        return self._reinvocation is not None and self._reinvocation.should_reinvoke

    @property
    def operation(self) -> str:
        return self.request.operation

    @property
    def group(self) -> str:
        return self.request.attributes.api_group

    @property
    def version(self) -> str:
        return self.request.attributes.api_version

    @property
    def kind(self) -> str:
        return self.request.kind

    @property
    def resource(self) -> str:
        return self.request.attributes.resource

    @property
    def subresource(self) -> str:
        return self.request.attributes.subresource

    @property
    def namespace(self) -> str:
        return self.request.attributes.namespace

    @property
    def name(self) -> str:
        return self.request.attributes.name

    @property
    def user(self) -> pb.UserInfo:
        return self.request.attributes.user

    @property
    def dry_run(self) -> bool:
        return self.request.dry_run

    @property
    def object(self) -> dict[str, Any] | None:
        """The new object as a dict (None for DELETE and CONNECT); decoded on first use."""
        if self._object is None and self.request.HasField("object"):
            self._object = from_envelope(self.request.object)
        return self._object

    @property
    def old_object(self) -> dict[str, Any] | None:
        if self._old_object is None and self.request.HasField("old_object"):
            self._old_object = from_envelope(self.request.old_object)
        return self._old_object

    def set_object(self, obj: dict[str, Any]) -> None:
        """A mutating plugin's new version of the object; the chain answers with it."""
        self._object = obj
        self._replaced = True

    def patch(self) -> bytes:
        """The mutating plugins' changes as a JSON Patch against the request's object (b"" for none).
        Only a replaced object costs a diff (and a second decode of the original, which a plugin may have
        changed in place)."""
        if not self._replaced or self._object is None or not self.request.HasField("object"):
            return b""
        ops = jsonpatch.make_patch(from_envelope(self.request.object), self._object).patch
        return orjson.dumps(ops) if ops else b""

    def object_pb(self) -> pb.Object | None:
        """The object to answer with: the request's own envelope unless a plugin replaced it."""
        if self._replaced and self._object is not None:
            return to_envelope(self._object)
        return self.request.object if self.request.HasField("object") else None

    def name_for_errors(self) -> str:
        """kube's extractResourceName: the request's name, else the object's, else "Unknown"."""
        if self.name:
            return self.name
        if self.request.HasField("object") and self.request.object.metadata.name:
            return self.request.object.metadata.name
        return "Unknown"

    @property
    def requested(self) -> Attributes:
        """The request as it came (a VersionedAttributes wraps it): its kind and resource are requestKind and
        requestResource."""
        return self


class VersionedAttributes:
    """The request as an admission extension matched through another version or group of its storage sees it
    (matchPolicy Equivalent; kube's VersionedAttributes): group, version, resource, kind and the objects in
    target's version, everything else the request's. A changed object is converted back to the request's."""

    def __init__(self, a: Attributes, source: ResourceInfo, target: ResourceInfo) -> None:
        self.requested = a
        self.source, self.target = source, target
        self._converted: dict[str, tuple[Any, Any]] = {}  # "object"/"old_object": (the request's, converted)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.requested, name)

    @property
    def group(self) -> str:
        return self.target.group

    @property
    def version(self) -> str:
        return self.target.version

    @property
    def resource(self) -> str:
        return self.target.plural

    @property
    def kind(self) -> str:
        sub = self.target.subresource(self.requested.subresource) if self.requested.subresource else None
        return sub.kind if sub is not None else self.target.kind

    def _in_target(self, key: str, obj: dict[str, Any] | None) -> dict[str, Any] | None:
        if obj is None:
            return None
        hit = self._converted.get(key)
        if hit is None or hit[0] is not obj:  # converted again when the request's object was replaced
            hit = self._converted[key] = (obj, convert_object(obj, self.source, self.target))
        return hit[1]

    @property
    def object(self) -> dict[str, Any] | None:
        return self._in_target("object", self.requested.object)

    @property
    def old_object(self) -> dict[str, Any] | None:
        return self._in_target("old_object", self.requested.old_object)

    def set_object(self, obj: dict[str, Any]) -> None:
        self.requested.set_object(convert_object(obj, self.target, self.source))


def in_version(a: Attributes, target: ResourceInfo | None) -> Attributes:
    """a as an extension matched in target's version sees it (a itself when target is None: an exact match)."""
    if target is None:
        return a
    source = a.catalogue.lookup(a.group, a.version, a.resource)
    if source is None:
        return a
    return VersionedAttributes(a, source, target)  # type: ignore[return-value]


def equivalent_resources(a: Attributes) -> tuple[ResourceInfo, ...]:
    """The definitions of the other versions and groups sharing the request's storage (kube's
    EquivalentResourceMapper), in the catalogue's order."""
    info = a.catalogue.lookup(a.group, a.version, a.resource)
    if info is None:
        return ()
    return tuple(o for o in a.catalogue.equivalents(info)[1:]
                 if not a.subresource or o.subresource(a.subresource) is not None)
