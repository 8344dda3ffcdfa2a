"""--authorization-mode: AlwaysAllow, AlwaysDeny and RBAC (Node is accepted and ignored: apiary has no kubelets)."""
from __future__ import annotations

import logging

from apiary_pb import envelope_pb2 as pb

from . import ALLOW, DENY, NO_OPINION, Authorizer
from .rbac import Attributes, RBACIndex, Rule

log = logging.getLogger(__name__)

STAR_RULES = (Rule(("*",), ("*",), ("*",)), Rule(("*",), non_resource_urls=("*",)))


class AlwaysAllow:
    name = "AlwaysAllow"

    async def authorize(self, attrs: pb.RequestAttributes) -> tuple[str, str]:
        return ALLOW, ""

    def rules_for(self, user: str, groups: tuple[str, ...], namespace: str) -> list[Rule]:
        return list(STAR_RULES)


class AlwaysDeny:
    name = "AlwaysDeny"

    async def authorize(self, attrs: pb.RequestAttributes) -> tuple[str, str]:
        return DENY, "Everything is forbidden."

    def rules_for(self, user: str, groups: tuple[str, ...], namespace: str) -> list[Rule]:
        return []


def rbac_attributes(a: pb.RequestAttributes) -> Attributes:
    return Attributes(a.user.name, tuple(a.user.groups), a.verb, a.resource_request, a.namespace, a.api_group,
                      a.resource, a.subresource, a.name, a.path)


class RBACAuthorizer:
    """kube's RBAC authorizer over an RBACIndex kept current by informers. Never denies: a request no
    rule allows gets NoOpinion with an empty reason, so the union denies it."""

    name = "RBAC"

    def __init__(self, index: RBACIndex) -> None:
        self.index = index

    async def authorize(self, attrs: pb.RequestAttributes) -> tuple[str, str]:
        allowed, reason = self.index.authorize(rbac_attributes(attrs))
        return (ALLOW, reason) if allowed else (NO_OPINION, "")

    def rules_for(self, user: str, groups: tuple[str, ...], namespace: str) -> list[Rule]:
        return self.index.rules_for(user, groups, namespace)


MODES = ("AlwaysAllow", "AlwaysDeny", "RBAC", "Node")


def parse_modes(value: str, index: RBACIndex | None = None) -> list[Authorizer]:
    """A comma list of kube's mode names, each at most once. RBAC reads `index`."""
    names = [m.strip() for m in value.split(",") if m.strip()]
    if not names:
        raise ValueError("at least one authorization-mode must be passed")
    seen: set[str] = set()
    out: list[Authorizer] = []
    for n in names:
        if n not in MODES:
            raise ValueError(f"authorization-mode {n!r} is not a valid mode (known: {', '.join(MODES)})")
        if n in seen:
            raise ValueError(f"authorization-mode {n!r} has mode specified more than once")
        seen.add(n)
        if n == "Node":
            log.info("authorization mode Node ignored: apiary serves no kubelets")
        elif n == "RBAC":
            out.append(RBACAuthorizer(index if index is not None else RBACIndex()))
        elif n == "AlwaysAllow":
            out.append(AlwaysAllow())
        else:
            out.append(AlwaysDeny())
    return out
