"""Authorizers decide whether a user may do a verb on a resource or a non-resource path.

Like kube's authorizer union: each one answers Allow, Deny or NoOpinion; the first
Allow or Deny wins; if every authorizer has no opinion the request is denied.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from apiary_pb import auth_pb2 as apb

ALLOW, DENY, NO_OPINION = "Allow", "Deny", "NoOpinion"


@dataclass(frozen=True)
class Decision:
    decision: str
    reason: str = ""
    authorizer: str = ""  # which module decided; "" when nobody had an opinion


class Authorizer(Protocol):
    name: str

    async def authorize(self, attrs: apb.Attributes) -> tuple[str, str]:
        """(decision, reason)."""
        ...


class Union:
    def __init__(self, authorizers: list[Authorizer]) -> None:
        self.authorizers = authorizers

    async def authorize(self, attrs: apb.Attributes) -> Decision:
        reasons: list[str] = []
        for a in self.authorizers:
            decision, reason = await a.authorize(attrs)
            if decision in (ALLOW, DENY):
                return Decision(decision, reason, a.name)
            if reason:
                reasons.append(reason)
        return Decision(NO_OPINION, "\n".join(reasons))
