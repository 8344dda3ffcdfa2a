"""What an aggregated API server declares: kinds, their versions, the hub, strategies, admission.

kube's apiserver library spreads this over a scheme (types, conversions, defaults), a registry
Store with its strategy and admission plug-ins; here one `Kind` holds it. Objects travel as plain
dicts in Kubernetes JSON form: a version's dict is what clients send and receive, the hub's dict
is the internal type every version converts to and from (kube's "internal version"). Conversions
and defaulting see and return only the parts of an object below metadata (spec, status, ...); the
kit carries apiVersion, kind and metadata itself.
"""
from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from services.apiserver.fielderrors import Cause
from services.common import errors

Obj = dict[str, Any]

CREATE, UPDATE, DELETE = "CREATE", "UPDATE", "DELETE"


# Kinds ---------------------------------------------------------------------------------------------


def _identity(obj: Obj) -> Obj:
    return obj


def _no_defaults(obj: Obj) -> None:
    return None


@dataclass
class Version:
    """One served version of a kind: its OpenAPI schema (of the whole object but metadata, which the
    kit adds), its conversions to and from the hub, and its defaulting (kube's SetDefaults_*, run
    on every object decoded in this version, in place)."""

    schema: Obj
    to_hub: Callable[[Obj], Obj] = _identity
    from_hub: Callable[[Obj], Obj] = _identity
    default: Callable[[Obj], None] = _no_defaults


@dataclass(frozen=True)
class Column:
    """A Table column after NAME (kube's printer columns); `cell` reads the hub object."""

    name: str
    type: str
    cell: Callable[[Obj], Any]
    description: str = ""
    format: str = ""
    priority: int = 0


class Strategy:
    """kube's RESTCreateStrategy/RESTUpdateStrategy, on hub objects. Override what the kind needs."""

    def initialize(self, server: Any) -> None:
        """Called once the server is configured, before it serves (to take informers, for instance)."""

    def prepare_for_create(self, obj: Obj) -> None:
        """Clear or compute what a client may not set (status, for instance)."""

    def prepare_for_update(self, obj: Obj, old: Obj) -> None:
        """Carry over what an update may not change."""

    def validate(self, obj: Obj) -> list[Cause]:
        return []

    def validate_update(self, obj: Obj, old: Obj) -> list[Cause]:
        return self.validate(obj)


@dataclass
class Kind:
    """A resource: names, scope, versions (the first one stored), its hub strategy and Table columns."""

    kind: str
    plural: str
    versions: dict[str, Version]
    namespaced: bool = True
    singular: str = ""
    short_names: Sequence[str] = ()
    categories: Sequence[str] = ()
    strategy: Strategy = field(default_factory=Strategy)
    columns: Sequence[Column] = ()
    storage_version: str = ""

    def __post_init__(self) -> None:
        self.singular = self.singular or self.kind.lower()
        self.storage_version = self.storage_version or next(iter(self.versions))


# Admission -----------------------------------------------------------------------------------------


@dataclass
class Attributes:
    """kube's admission.Attributes: what a plug-in sees of a request (objects in hub form)."""

    operation: str
    kind: Kind
    group: str
    version: str
    namespace: str
    name: str
    obj: Obj | None
    old: Obj | None
    user: Any
    dry_run: bool = False

    def forbidden(self, why: str) -> errors.Forbidden:
        """admission.NewForbidden: `<resource>.<group> "<name>" is forbidden: <why>`."""
        return errors.forbidden(self.kind.plural, self.group, self.name, why)


class AdmissionPlugin:
    """An admission plug-in; `handles` selects the requests it sees. `initialize` is kube's plug-in
    initializer: it receives the server (its informers, for instance) before the first request."""

    name = ""
    operations: Sequence[str] = (CREATE, UPDATE)
    resources: Sequence[str] = ()  # plurals; empty: every resource

    def initialize(self, server: Any) -> None:
        return None

    def handles(self, a: Attributes) -> bool:
        return a.operation in self.operations and (not self.resources or a.kind.plural in self.resources)

    async def admit(self, a: Attributes) -> None:
        """Mutating admission: change a.obj in place."""

    async def validate(self, a: Attributes) -> None:
        """Validating admission: raise a.forbidden(...) to refuse."""

    def ready(self) -> bool:
        return True


AsyncCheck = Callable[[], Awaitable[bool]]
