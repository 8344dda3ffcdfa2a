"""What the endpoints and the generic store share (k8s.io/apiserver's RequestScope and registry/rest): the
request scope a verb runs in, the admission and validation hooks a handler passes down to the store, and the
object rules both apply.

It sits below both: the store takes behaviour as function arguments (kube's rest.ValidateObjectFunc)
instead of reaching up into the handlers, so neither imports the other's module.
"""
from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from apiary_pb import envelope_pb2 as pb
from apiary_pb import registry_pb2 as rpb
from services.apiserver import validation as v
from services.apiserver.resource import ResourceInfo
from services.common import errors
from services.common.errors import BadRequest

from .rest import Strategy

Obj = dict[str, Any]


class Scope(Protocol):
    """One request as a verb sees it (endpoints.request.Request is the one implementation)."""

    req: rpb.APIRequest
    info: ResourceInfo
    strategy: Strategy
    timing: dict[str, float]
    warnings: list[str]
    audit_annotations: dict[str, str]  # from admission, for the request's audit events
    admit: bool            # False: the server's own writes (bootstrap), which skip admission
    no_validators: bool    # the mutating phase said no validating plugin applies

    @property
    def namespace(self) -> str: ...

    @property
    def dry_run(self) -> bool: ...

    @property
    def schema_name(self) -> str:
        """The kind's definition among Kubernetes' own (services/apis/schemas.json)."""
        ...

    @property
    def field_manager(self) -> str: ...

    @property
    def update_manager(self) -> str: ...

    def for_item(self, namespace: str) -> Scope:
        """The scope for one object of a collection request (its own namespace when the request spans
        all of them), with fresh admission state."""
        ...


# Mutating admission: (scope, name, the object, the current object's envelope or None) -> the object,
# changed or not. The current object travels as the envelope storage gave (not serialized again).
AdmitFunc = Callable[[Scope, str, Obj | None, pb.Object | None], Awaitable[Obj | None]]
# Validation after the strategy's (RBAC escalation, validating admission): (scope, name, object, current
# object, object's envelope, current object's envelope). The object's envelope is the one storage gets:
# a write serializes its object once.
ValidateFunc = Callable[[Scope, str, Obj | None, Obj | None, pb.Object | None, pb.Object | None],
                        Awaitable[None]]


def ensure_namespace(r: Scope, obj: Obj) -> None:
    """rest.EnsureObjectNamespaceMatchesRequestNamespace."""
    meta = obj["metadata"]
    want = r.namespace
    have = meta.get("namespace") or ""
    if have == want:
        return
    if not have or not want:
        if want:
            meta["namespace"] = want
        else:
            meta.pop("namespace", None)
        return
    raise BadRequest("the namespace of the provided object does not match the namespace sent on the request")


def invalid(r: Scope, obj: Obj, causes: list[v.Cause]) -> errors.Invalid:
    """The 422 for an object of the request's kind."""
    name = (obj.get("metadata") or {}).get("name") or ""
    return errors.invalid(r.info.kind, r.info.group, name, causes)


def options_invalid(kind: str, causes: list[v.Cause]) -> errors.Invalid:
    """The 422 for bad CreateOptions/UpdateOptions/PatchOptions/DeleteOptions."""
    return errors.invalid(kind, "meta.k8s.io", "", causes)
