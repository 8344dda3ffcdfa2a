"""Authorizers decide whether a user may do a verb on a resource or a non-resource path.

Like kube's authorizer union: each one answers Allow, Deny or NoOpinion; the first
Allow or Deny wins; if every authorizer has no opinion the request is denied.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from apiary_pb import envelope_pb2 as pb
from services.common import tracing

ALLOW, DENY, NO_OPINION = "Allow", "Deny", "NoOpinion"
INF = float("inf")


@dataclass(frozen=True)
class Decision:
    decision: str
    reason: str = ""
    authorizer: str = ""  # which module decided; "" when nobody had an opinion
    error: str = ""       # why an authorizer could not decide (a webhook down): kube answers 500 unless allowed
    ttl: float = float("inf")  # how long the decision may be reused (webhook answers are cached for their TTLs)


class Authorizer(Protocol):
    name: str

    async def authorize(self, attrs: pb.RequestAttributes) -> tuple[str, str]:
        """(decision, reason)."""
        ...


class Union:
    def __init__(self, authorizers: list[Authorizer]) -> None:
        self.authorizers = authorizers

    async def authorize(self, attrs: pb.RequestAttributes) -> Decision:
        reasons: list[str] = []
        errors: list[str] = []
        ttl = float("inf")   # the decision holds while every answer it rests on holds
        traced = tracing.ENABLED and tracing.recording()
        for a in self.authorizers:
            decision, reason, error, answer_ttl = await (asked(a, attrs) if traced else evaluated(a, attrs))
            ttl = min(ttl, answer_ttl)
            if error:
                errors.append(error)
            if decision in (ALLOW, DENY):
                return Decision(decision, reason, a.name, error, ttl)
            if reason:
                reasons.append(reason)
        # utilerrors.NewAggregate: one error as is, several as [a, b]
        error = errors[0] if len(errors) == 1 else "[" + ", ".join(errors) + "]" if errors else ""
        return Decision(NO_OPINION, "\n".join(reasons), "", error, ttl)


async def evaluated(a: Authorizer, attrs: pb.RequestAttributes) -> tuple[str, str, str, float]:
    """(decision, reason, error, how long it may be reused) of one authorizer."""
    evaluate = getattr(a, "evaluate", None)
    if evaluate is not None:
        return await evaluate(attrs)
    decision, reason = await a.authorize(attrs)
    return decision, reason, "", INF


async def asked(a: Authorizer, attrs: pb.RequestAttributes) -> tuple[str, str, str, float]:
    """One authorizer of a sampled request's chain in its span ("authorizer RBAC"), with its decision."""
    with tracing.span(f"authorizer {a.name}") as span:
        answer = await evaluated(a, attrs)
        span.set_attributes({"decision": answer[0], "reason": answer[1]} if not answer[2]
                            else {"decision": answer[0], "reason": answer[1], "error": answer[2]})
        return answer
