"""What a served resource is, as plain data: kube's APIResource and GroupVersion with what the registry adds
(etcd key prefix, Table columns, protobuf message, storage version). One ResourceInfo per kind and
version; the built-in ones are defined by services/apis, one module per API group, and a Catalogue
(catalogue.py) holds those a server serves.

A kind served in several versions or groups over one storage: every definition names the same key prefix,
and those not served in the storage version name a Conversion (conversion.py).
"""
from __future__ import annotations

import base64
import hashlib
from dataclasses import dataclass, field
from typing import Any

from apiary_pb import envelope_pb2 as pb

from .conversion import Conversion
from .printers import TableConvertor

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


# eq=False: a definition is one object, hashed by identity (the registry keys each kind's storage by it).
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
    # The Strategy class with the kind's rules (services.apis.strategies), called with this definition. Typed
    # as a plain type: a Strategy holds its ResourceInfo, so this module cannot name the class.
    strategy: type | None = field(default=None, repr=False)
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

    @property
    def converts_remotely(self) -> bool:
        """Whether this version's objects convert only through a call out (a CRD's conversion webhook)."""
        return self.conversion is not None and self.conversion.remote

    async def stored_remotely(self, env: pb.Object) -> pb.Object:
        """stored() for a kind that converts_remotely."""
        assert self.conversion is not None
        return (await self.conversion.to_storage_envelopes([env]))[0]

    async def served_remotely(self, envs: list[pb.Object], batch: bool = False) -> list[pb.Object]:
        """served() for a kind that converts_remotely: the objects not in this version go in one call (batch: a
        list's items)."""
        assert self.conversion is not None
        return await self.conversion.from_storage_envelopes(envs, self.api_version, self.kind, batch)

    async def through_storage(self, env: pb.Object) -> pb.Object:
        """A dry-run's answer as a write would have it: through the storage version and back (kube's
        DryRunnableStorage copies it through the storage codec), where that conversion is a call out."""
        if not self.converts_remotely:
            return env
        return (await self.served_remotely([await self.stored_remotely(env)]))[0]

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


def convert_object(obj: dict[str, Any], source: ResourceInfo, target: ResourceInfo) -> dict[str, Any]:
    """A whole object of source's version in target's (both sharing one storage), through the storage version."""
    if source is target:
        return obj
    stored = source.conversion.storage_object(obj) if source.conversion is not None else obj
    if target.conversion is None:  # target's version is the storage version
        return stored
    return target.conversion.served_object(stored, target.api_version, target.kind)
