"""k8s.io/apiserver's registry/rest: the Strategy, the rules every kind follows (PrepareForCreate/Update,
Validate, selectable fields), which each kind's own strategy (services.apis.strategies) extends. It imports only
types and this library: a strategy knows no catalogue, no storage and no service."""
from __future__ import annotations

import copy
import functools
import time
from typing import Any, ClassVar

from apiary_pb import envelope_pb2 as pb
from services.apiserver import validation as v
from services.apiserver.resource import ResourceInfo
from services.common.errors import BadRequest

Obj = dict[str, Any]


# The last second formatted, and its text: a create stamps the time twice (creationTimestamp, its
# managedFields entry), and strftime costs more than the rest of the stamping.
_second: tuple[int, str] = (-1, "")


def now_rfc3339() -> str:
    """The current UTC time to the second, as kube's metav1.Time marshals it."""
    global _second
    now = int(time.time())
    if _second[0] != now:
        _second = (now, time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now)))
    return _second[1]


class Strategy:
    """Rules shared by every kind; subclasses add their own."""

    # Top-level fields an update of the main resource must keep from the old object (status, for kinds with one).
    status_fields: tuple[str, ...] = ()
    # Top-level fields whose change bumps metadata.generation (set to 1 on create); () : no generation.
    spec_fields: tuple[str, ...] = ()
    # RBAC kinds: a write must not grant what the caller does not hold (the auth service decides).
    escalation_checked = False
    # rest.GarbageCollectionDeleteStrategy: what a delete without propagationPolicy does to the
    # dependents: "DeleteDependents" (Background, every kind apiary serves, as kube's v1 kinds),
    # "OrphanDependents" (kube's old extensions/v1beta1 kinds) or "Unsupported".
    default_garbage_collection_policy = "DeleteDependents"
    # A deprecated served version's warning, sent with every answer to a request on it ("" : none).
    deprecation_warning = ""
    # Whether /status is the kind's own strategy with only status kept (see for_subresource).
    status_subresource = False
    # Whether a strategic merge patch applies: kube's custom resources have no patch strategies, so their
    # handler answers such a patch 415.
    strategic_merge_patch = True

    def __init__(self, info: ResourceInfo) -> None:
        self.info = info

    def refuse(self, verb: str) -> None:
        """Raise the error of a verb the kind serves but refuses for now (a terminating CRD's create: 405)."""

    # Decoding ----------------------------------------------------------------

    def cannot_handle(self, why: str) -> BadRequest:
        i = self.info
        return BadRequest(f'{i.kind} in version "{i.version}" cannot be handled as a {i.kind}: {why}')

    def canonicalize(self, obj: Obj) -> None:
        """Defaulting and the v1 -> internal conversion quirks (stringData, port defaults)."""

    # kube's field label conversion: the metadata fields a selector may name (the default conversion's two;
    # Node and Namespace take metadata.name only), and old names a selector may still use
    meta_field_labels: ClassVar[frozenset[str]] = frozenset({"metadata.name", "metadata.namespace"})
    field_label_aliases: ClassVar[dict[str, str]] = {}

    @functools.cached_property
    def field_labels(self) -> frozenset[str]:
        """The fields a field selector may name for this kind (kube's field label conversion set)."""
        return frozenset(self.selectable_fields({})) - {"metadata.namespace"} | self.meta_field_labels | \
            frozenset(self.field_label_aliases)

    def selectable_fields(self, obj: Obj) -> dict[str, str]:
        meta = obj.get("metadata") or {}
        fields = {"metadata.name": meta.get("name") or ""}
        if self.info.namespaced:
            fields["metadata.namespace"] = meta.get("namespace") or ""
        return fields

    # Create / update ---------------------------------------------------------

    def prepare_for_create(self, obj: Obj) -> None:
        pass

    def prepare_for_create_as(self, obj: Obj, user: pb.UserInfo) -> None:
        """PrepareForCreate with the request's user, which kube's strategies read from the context (a
        CertificateSigningRequest records its requester); most kinds do not look at it."""
        self.prepare_for_create(obj)

    def prepare_for_update(self, obj: Obj, old: Obj) -> None:
        for f in self.status_fields:
            if f in old:
                obj[f] = copy.deepcopy(old[f])
            else:
                obj.pop(f, None)

    def spec_changed(self, obj: Obj, old: Obj) -> bool:
        """Whether an update moves metadata.generation (after PrepareForUpdate restored what it keeps)."""
        return any(obj.get(f) != old.get(f) for f in self.spec_fields)

    def validate_name(self, obj: Obj, name: str) -> list[str]:
        return v.is_dns1123_subdomain(name)

    def validate(self, obj: Obj) -> list[v.Cause]:
        meta = obj.get("metadata") or {}
        return v.validate_object_meta(meta, self.info.namespaced, lambda n: self.validate_name(obj, n))

    def validate_update(self, obj: Obj, old: Obj) -> list[v.Cause]:
        return self.validate(obj) + v.validate_object_meta_update(obj.get("metadata") or {},
                                                                  old.get("metadata") or {})

    def for_subresource(self, subresource: str) -> "Strategy":
        """The strategy of a subresource's writes: /status keeps all but status from the stored object
        (kube's StatusStrategy) where the kind says it has one; other subresources write as the kind."""
        if subresource == "status" and self.status_subresource:
            return SubresourceStrategy(self, ("status",))
        return self


class SubresourceStrategy(Strategy):
    """/status and /finalize: only `keep_new` fields change; everything else comes from the old object."""

    def __init__(self, parent: Strategy, keep_new: tuple[str, ...]) -> None:
        super().__init__(parent.info)
        self.parent = parent
        self.keep_new = keep_new
        self.spec_fields = parent.spec_fields

    def canonicalize(self, obj: Obj) -> None:
        self.parent.canonicalize(obj)

    def selectable_fields(self, obj: Obj) -> dict[str, str]:
        return self.parent.selectable_fields(obj)

    def prepare_for_update(self, obj: Obj, old: Obj) -> None:
        meta, old_meta = obj.setdefault("metadata", {}), old.get("metadata") or {}
        for k in ("labels", "annotations", "finalizers", "ownerReferences"):
            if k in old_meta:
                meta[k] = copy.deepcopy(old_meta[k])
            else:
                meta.pop(k, None)
        for k in list(obj):
            if k not in ("apiVersion", "kind", "metadata") and k not in self.keep_new:
                obj.pop(k)
        for k, val in old.items():
            if k not in ("apiVersion", "kind", "metadata") and k not in self.keep_new:
                obj[k] = copy.deepcopy(val)

    def validate_name(self, obj: Obj, name: str) -> list[str]:
        return self.parent.validate_name(obj, name)

    def validate_update(self, obj: Obj, old: Obj) -> list[v.Cause]:
        return self.parent.validate_update(obj, old)


def strategy_for(info: ResourceInfo) -> Strategy:
    """The kind's Strategy, as its definition names it (ResourceInfo.strategy)."""
    if info.strategy is None:
        raise LookupError(f"{info.api_version} {info.kind} has no strategy in its definition")
    strategy: Strategy = info.strategy(info)
    return strategy
