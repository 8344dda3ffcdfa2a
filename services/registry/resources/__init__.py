"""What the registry serves: one definition per resource, one module per API group.

Each group module (core, rbac, apiregistration, authentication, authorization) declares its
GroupVersions: the group, the version, kube-aggregator's priorities, and for every kind a
ResourceInfo naming everything that is not behaviour: kind, plural, singular, short names,
categories, scope, verbs, subresources, etcd key prefix, Table columns, protobuf message, and the
Strategy class that holds the behaviour (defaulting, validation, update rules, selectable fields).
Discovery, OpenAPI, the catalogue's RESTMapper role, printing, storage keys and the proxy's protobuf
decoding all read these definitions; the OpenAPI schema of a kind is found in Kubernetes' own
definitions (schemas.py) by its group, version and kind, never typed here.

How to add a kind: write its Strategy (strategies/<group>.py: PrepareForCreate/Update, Validate,
selectable fields; the base class is enough for a plain kind), then add a ResourceInfo to its
group's GroupVersion in resources/<group>.py (a new group: a new module with a GroupVersion, listed
in GROUPS below). Give it Table columns (printers.name_age or a full TableConvertor) and, when
kubectl sends it as protobuf, the message's full name (its .proto in proto/k8s). Nothing else
changes: discovery, OpenAPI paths and schemas, printing, storage keys and fieldValidation follow.
A kind served in several versions or groups over one storage: every definition names the same key prefix,
and those not served in the storage version name a conversion (conversion.same_fields or renamed).
"""
from __future__ import annotations

import base64
import hashlib
import importlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from apiary_pb import envelope_pb2 as pb

    from ..conversion import Conversion
    from ..printers import TableConvertor
    from ..strategies import Strategy

STANDARD_VERBS = ("create", "delete", "deletecollection", "get", "list", "patch", "update", "watch")
STATUS_VERBS = ("get", "patch", "update")


@dataclass(frozen=True)
class SubresourceInfo:
    name: str
    kind: str
    verbs: tuple[str, ...]
    # The response kind's group and version when they are not the parent's (serviceaccounts/token answers
    # an authentication.k8s.io/v1 TokenRequest).
    group: str | None = None
    version: str | None = None


# eq=False: a definition is one object, hashed by identity (handlers key their strategies by it).
@dataclass(frozen=True, eq=False)
class ResourceInfo:
    group: str
    version: str
    kind: str
    plural: str
    singular: str
    namespaced: bool
    key_prefix: str  # etcd key prefix ending in "/"
    short_names: tuple[str, ...] = ()
    verbs: tuple[str, ...] = STANDARD_VERBS
    categories: tuple[str, ...] = ()
    subresources: tuple[SubresourceInfo, ...] = ()
    # Create-only and never stored: the answer is computed by the auth service (TokenReview, the
    # access reviews), as kube's registry/authentication and registry/authorization REST objects do.
    virtual: bool = False
    # The Strategy subclass with the kind's rules (strategies/).
    strategy: type[Strategy] | None = field(default=None, repr=False)
    # Table columns and cells (printers.TableConvertor); None: Name and Age.
    table: TableConvertor | None = field(default=None, repr=False)
    # Full name of the protobuf message a typed client sends (k8s_pb, generated from proto/k8s).
    protobuf: str = ""
    # kube's Store.ReturnDeletedObject: an immediate delete answers the deleted object, not a Status
    # with details (kube sets it for pods, services, serviceaccounts, namespaces, resourcequotas, ...).
    return_deleted_object: bool = False
    # Served in another version or group than storage holds (MutatingAdmissionPolicy v1alpha1/v1 are stored
    # as v1beta1, events.k8s.io/v1 Events as core/v1 ones): the storage version and the conversions to and
    # from it (conversion.py); None: stored as served.
    conversion: Conversion | None = field(default=None, repr=False)
    _sub: dict[str, SubresourceInfo] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        self._sub.update({s.name: s for s in self.subresources})

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def list_kind(self) -> str:
        return self.kind + "List"

    @property
    def group_resource(self) -> str:
        """configmaps, apiservices.apiregistration.k8s.io: how kube names a resource in messages."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    def subresource(self, name: str) -> SubresourceInfo | None:
        return self._sub.get(name)

    def key(self, namespace: str, name: str) -> str:
        if self.namespaced:
            return f"{self.key_prefix}{namespace}/{name}"
        return f"{self.key_prefix}{name}"

    def collection_prefix(self, namespace: str) -> str:
        """The key prefix of a list or watch; always ends in "/" so that "a" never matches "ab"."""
        if self.namespaced and namespace:
            return f"{self.key_prefix}{namespace}/"
        return self.key_prefix

    @property
    def storage_api_version(self) -> str:
        return self.conversion.storage_api_version if self.conversion is not None else self.api_version

    def stored(self, env: pb.Object) -> pb.Object:
        """env (in this version) as storage keeps it: in the kind's storage version."""
        return env if self.conversion is None else self.conversion.to_storage_envelope(env)

    def served(self, env: pb.Object) -> pb.Object:
        """A stored object (or one already served) in this version; type meta filled in where storage kept
        none. Idempotent: an object in this version is returned as it is."""
        if env.api_version == self.api_version and env.kind == self.kind:
            return env
        if self.conversion is not None:
            return self.conversion.from_storage_envelope(env, self.api_version, self.kind)
        if not env.kind:
            env.kind, env.api_version = self.kind, self.api_version
        return env

    def storage_version_hash(self) -> str:
        """discovery.StorageVersionHash of the storage version's group, version and kind."""
        if self.conversion is None:
            group, version, kind = self.group, self.version, self.kind
        else:
            (group, version), kind = self.conversion.storage_group_version, self.conversion.storage_kind
        digest = hashlib.sha256(f"{group}/{version}/{kind}".encode()).digest()
        return base64.b64encode(digest[:8]).decode()


@dataclass(frozen=True)
class GroupVersion:
    """One served group-version, with the priorities kube-aggregator gives its local APIService
    (apiVersionPriorities: the group's minimum, then the version's)."""
    group: str
    version: str
    group_priority: int
    version_priority: int
    resources: tuple[ResourceInfo, ...]
    # Kinds of this group-version that are no resource of their own (TokenRequest: serviceaccounts/token).
    kinds: tuple[ResourceInfo, ...] = ()

    def __post_init__(self) -> None:
        for r in self.resources + self.kinds:
            if (r.group, r.version) != (self.group, self.version):
                raise ValueError(f"{r.kind} is {r.api_version}, not in {self.group}/{self.version}")


def review(group: str, version: str, kind: str, plural: str, strategy: type[Strategy], protobuf: str = "",
           namespaced: bool = False) -> ResourceInfo:
    """A create-only kind the auth service answers (TokenReview, the access reviews)."""
    return ResourceInfo(group=group, version=version, kind=kind, plural=plural, singular=plural[:-1],
                        namespaced=namespaced, key_prefix="", verbs=("create",), virtual=True,
                        strategy=strategy, protobuf=protobuf)


def body_kind(group: str, version: str, kind: str, strategy: type[Strategy]) -> ResourceInfo:
    """The kind a subresource's body carries when it is not the parent's (autoscaling/v1 Scale, core/v1
    Binding, policy/v1 Eviction): decoded and validated, never stored under its own name."""
    return ResourceInfo(group=group, version=version, kind=kind, plural=kind.lower(), singular=kind.lower(),
                        namespaced=True, key_prefix="", verbs=(), virtual=True, strategy=strategy)


# autoscaling/v1 Scale: what every /scale reads and writes (kube's ScaleREST)
SCALE = SubresourceInfo("scale", "Scale", STATUS_VERBS, "autoscaling", "v1")


def status(kind: str) -> SubresourceInfo:
    """A kind's /status: the same kind, read and written apart from its spec."""
    return SubresourceInfo("status", kind, STATUS_VERBS)


def workload(group: str, kind: str, strategy: type[Strategy], table: TableConvertor,
             short_names: tuple[str, ...] = (), scale: bool = False) -> ResourceInfo:
    """A v1 workload kind (apps, batch): namespaced, in the "all" category, with /status and, when it runs
    replicas, /scale; stored under /registry/<plural>/ and sent by typed clients as k8s.io.api.<group>.v1.<Kind>."""
    plural = kind.lower() + "s"
    return ResourceInfo(group=group, version="v1", kind=kind, plural=plural, singular=kind.lower(),
                        namespaced=True, key_prefix=f"/registry/{plural}/", short_names=short_names,
                        categories=("all",), subresources=((SCALE,) if scale else ()) + (status(kind),),
                        strategy=strategy, table=table, protobuf=f"k8s.io.api.{group}.v1.{kind}")


# The group modules, each with its GROUP_VERSIONS (imported on first use: they import the strategies,
# which import this module).
GROUPS = ("core", "apiregistration", "authentication", "authorization", "apps", "batch", "rbac", "discovery",
          "admissionregistration", "coordination", "events", "networking", "policy", "scheduling", "storage")


def group_versions() -> tuple[GroupVersion, ...]:
    """Every served group-version, core first, from the group modules."""
    out: tuple[GroupVersion, ...] = ()
    for name in GROUPS:
        out += importlib.import_module(f"{__name__}.{name}").GROUP_VERSIONS
    return out


def all_kinds() -> tuple[ResourceInfo, ...]:
    """Every kind a request body may carry: the resources and the subresources' own kinds."""
    return tuple(r for gv in group_versions() for r in gv.resources + gv.kinds)

