"""The admission plugin interface (k8s.io/apiserver/pkg/admission): a name, the operations it
handles, the resources it concerns, and admit (mutating phase) and/or validate (validating phase).

A plugin rejects a request by raising an APIError (usually Forbidden, NotFound or
Invalid); mutating plugins change the object through Attributes.set_object.
"""
from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from apiary_pb import registry_pb2_grpc as rgrpc
from services.apiserver.catalogue import Catalogue

from .attributes import CONNECT, CREATE, DELETE, UPDATE, Attributes
from .informers import shared_informers

ALL_OPERATIONS = frozenset({CREATE, UPDATE, DELETE, CONNECT})
GroupResource = tuple[str, str]
PODS: GroupResource = ("", "pods")


class Plugin:
    """What a plug-in concerns is declared on its class, as data the chain reads once per kind of request
    (chain.py), where kube's plug-ins check a.GetResource() and a.GetSubresource() first thing: a plug-in
    is never asked about a request it does not concern.

    operations: kube's admission.Handler operations; handles() may narrow them by state (no webhooks, no
    LimitRanges: nothing to do). resources: the (group, resource) pairs it concerns, None for every
    resource; validated_resources: those of its validating phase when they differ (None: resources).
    subresources: whether it sees requests for a subresource (pods/status, deployments/scale, ...)."""

    name = ""
    operations: frozenset[str] = ALL_OPERATIONS
    resources: frozenset[GroupResource] | None = None
    validated_resources: frozenset[GroupResource] | None = None
    subresources = True

    def handles(self, operation: str) -> bool:
        return operation in self.operations

    async def start(self) -> None:
        """Start informers and the like; called once before serving."""

    async def stop(self) -> None:
        """Stop what start() started."""

    def ready(self) -> bool:
        """Whether the plugin can decide yet (its caches are synced)."""
        return True


@runtime_checkable
class WantsCatalogue(Protocol):
    """A plugin that reads the server's kinds (kube's WantsRESTMapper initializer)."""

    def set_catalogue(self, catalogue: Catalogue) -> None: ...


@runtime_checkable
class MutatingPlugin(Protocol):
    name: str

    def handles(self, operation: str) -> bool: ...

    async def admit(self, a: Attributes) -> None: ...


@runtime_checkable
class ValidatingPlugin(Protocol):
    name: str

    def handles(self, operation: str) -> bool: ...

    async def validate(self, a: Attributes) -> None: ...


PluginConfig = dict[str, Any] | None


class InformerPlugin(Plugin):
    """A plug-in that reads one kind from the shared informers (kube's plugins with a lister): started
    and stopped with them, ready once that kind is synced."""

    def __init__(self, registry: rgrpc.RegistryStub, group: str, version: str, resource: str) -> None:
        self.registry = registry
        self.factory = shared_informers(registry)
        self.informer = self.factory.informer(group, version, resource)

    async def start(self) -> None:
        self.factory.start()

    async def stop(self) -> None:
        await self.factory.stop()

    def ready(self) -> bool:
        return self.informer.synced.is_set()
