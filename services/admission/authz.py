"""The `authorizer` CEL variable of admission policies (kube's library.Authz), backed by apiary's
authorization: the auth service's Authorize, asked as the request's user.

CEL functions cannot wait, so an evaluation that meets a check whose decision is not known yet records it
and fails; the checks are then asked (concurrently) and the expressions evaluated again, until every
check they make is answered (expressions are deterministic: each pass asks only new questions)."""
from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from apiary_pb import auth_pb2 as apb
from apiary_pb import auth_pb2_grpc as authgrpc
from apiary_pb import envelope_pb2 as pb
from services.common import grpcutil
from services.common.errors import APIError

if TYPE_CHECKING:
    from .attributes import Attributes

T = TypeVar("T")

PENDING = "apiary: authorization check pending"
MAX_PASSES = 8

_stub: authgrpc.AuthStub | None = None


def configure(stub: authgrpc.AuthStub | None) -> None:
    """The auth service the admission service asks (set once by its assemble)."""
    global _stub
    _stub = stub


Key = tuple[str, str, str, str, str, str, str]  # path, group, resource, subresource, namespace, name, verb


class Checks:
    """The authorization decisions of one request's user, asked as expressions need them."""

    def __init__(self, user: pb.UserInfo) -> None:
        self.user = user
        self.decisions: dict[Key, dict[str, Any]] = {}
        self.pending: set[Key] = set()

    def functions(self) -> dict[str, Any]:
        def setter(field: str) -> Any:
            return lambda recv, value: {**recv, field: value}

        def check(recv: dict[str, Any], verb: str) -> dict[str, Any]:
            key: Key = (recv.get("path", ""), recv.get("group", ""), recv.get("resource", ""),
                        recv.get("subresource", ""), recv.get("namespace", ""), recv.get("name", ""), verb)
            hit = self.decisions.get(key)
            if hit is None:
                self.pending.add(key)
                raise RuntimeError(PENDING)
            return hit

        return {"group": setter("group"), "resource": setter("resource"), "subresource": setter("subresource"),
                "namespace": setter("namespace"), "name": setter("name"), "path": setter("path"),
                "check": check, "allowed": lambda d: d["allowed"], "reason": lambda d: d["reason"],
                "errored": lambda d: bool(d["error"]), "error": lambda d: d["error"]}

    async def resolve(self) -> None:
        keys, self.pending = list(self.pending), set()
        answers = await asyncio.gather(*(self._ask(k) for k in keys))
        self.decisions.update(zip(keys, answers))

    async def _ask(self, key: Key) -> dict[str, Any]:
        path, group, resource, sub, ns, name, verb = key
        return await authorize(pb.RequestAttributes(user=self.user, verb=verb, resource_request=not path,
                                                    namespace=ns, api_group=group, resource=resource,
                                                    subresource=sub, name=name, path=path))


async def authorize(attrs: pb.RequestAttributes) -> dict[str, Any]:
    """The authorizer's decision on attrs: {"allowed", "reason", "error"}; an unreachable auth service is an
    error, never an allow."""
    if _stub is None:
        return {"allowed": False, "reason": "", "error": "no authorizer configured"}
    try:
        resp = await grpcutil.call(_stub.Authorize(apb.AuthorizeRequest(attributes=attrs), timeout=10), "auth")
    except APIError as e:
        return {"allowed": False, "reason": "", "error": e.message}
    return {"allowed": resp.decision == "Allow", "reason": resp.reason, "error": resp.error}


def variable(a: Attributes) -> dict[str, Any]:
    """The `authorizer` value, with authorizer.requestResource set to the request's resource."""
    return {"requestResource": {"group": a.group, "resource": a.resource, "subresource": a.subresource,
                                "namespace": a.namespace, "name": a.name}}


def bind(values: dict[str, Any], functions: dict[str, Any], a: Attributes, checks: Checks) -> dict[str, Any]:
    """values gains the `authorizer` variable; the functions returned add its methods (policies' and
    webhooks' matchConditions bind it the same way)."""
    values["authorizer"] = variable(a)
    return {**functions, **checks.functions()}


async def settle(checks: Checks | None, evaluate: Callable[[], T]) -> T:
    """evaluate() until every authorization check its expressions make is answered (asked between
    passes, concurrently); without checks, once."""
    result = evaluate()
    for _ in range(MAX_PASSES - 1):
        if checks is None or not checks.pending:
            return result
        await checks.resolve()
        result = evaluate()
    return result
