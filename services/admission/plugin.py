"""The admission plugin interface (k8s.io/apiserver/pkg/admission): a name, the operations it
handles, and admit (mutating phase) and/or validate (validating phase).

A plugin rejects a request by raising an APIError (usually Forbidden, NotFound or
Invalid); mutating plugins change the object through Attributes.set_object.
"""
from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from .attributes import CONNECT, CREATE, DELETE, UPDATE, Attributes

ALL_OPERATIONS = frozenset({CREATE, UPDATE, DELETE, CONNECT})


class Plugin:
    name = ""
    operations: frozenset[str] = ALL_OPERATIONS

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
