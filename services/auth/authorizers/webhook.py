"""Webhook authorization: a SubjectAccessReview sent to a remote service (kube's webhook authorizer).

matchConditions (CEL over the SubjectAccessReview spec as `request`: resourceAttributes with all its
fields for a resource request, nonResourceAttributes otherwise, so `has(request.resourceAttributes)`
tells them apart) decide whether the webhook is asked at all: any false → NoOpinion without a call. Allowed and denied answers are cached for
authorizedTTL / unauthorizedTTL; a failed call (down, timeout, bad answer) or a matchCondition that
fails to evaluate is never cached and answers the failurePolicy's decision (Deny or NoOpinion)
together with the error, which the proxy turns into kube's 500 unless another authorizer allows.
"""
from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import orjson
from prometheus_client import Counter, Histogram

from apiary_pb import envelope_pb2 as pb

from services.common import cel
from ..webhookclient import WebhookClient, WebhookError
from . import ALLOW, DENY, NO_OPINION

log = logging.getLogger(__name__)

MAX_ENTRIES = 10_000
INF = float("inf")

EVALUATIONS = Counter(
    "apiserver_authorization_webhook_evaluations", "Round-trips to authorization webhooks.", ["name", "result"])
DURATION = Histogram(
    "apiserver_authorization_webhook_duration_seconds", "Request latency in seconds.", ["name", "result"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30))
FAIL_OPEN = Counter(
    "apiserver_authorization_webhook_evaluations_fail_open",
    "NoOpinion results due to webhook timeout or error.", ["name", "result"])
MATCH_ERRORS = Counter(
    "apiserver_authorization_match_condition_evaluation_errors",
    "Total number of errors when an authorization webhook encounters a match condition error split by "
    "authorizer type and identifier", ["type", "name"])
MATCH_EXCLUSIONS = Counter(
    "apiserver_authorization_match_condition_exclusions",
    "Total number of exclusions when an authorization webhook is skipped by match conditions, split by "
    "authorizer type and identifier", ["type", "name"])


@dataclass
class WebhookSettings:
    name: str
    timeout: float
    version: str = "v1"                     # subjectAccessReviewVersion
    authorized_ttl: float = 300.0
    unauthorized_ttl: float = 30.0
    failure_policy: str = NO_OPINION         # Deny or NoOpinion
    match_conditions: list[cel.Program] = field(default_factory=list)


def review_spec(a: pb.RequestAttributes) -> dict[str, Any]:
    """SubjectAccessReviewSpec (v1 JSON) for the attributes."""
    spec: dict[str, Any] = {}
    if a.resource_request:
        spec["resourceAttributes"] = {"namespace": a.namespace, "verb": a.verb, "group": a.api_group,
                                      "version": a.api_version, "resource": a.resource,
                                      "subresource": a.subresource, "name": a.name}
    else:
        spec["nonResourceAttributes"] = {"path": a.path, "verb": a.verb}
    spec["user"] = a.user.name
    spec["groups"] = list(a.user.groups)
    if a.user.extra:
        spec["extra"] = {k: list(v.values) for k, v in a.user.extra.items()}
    spec["uid"] = a.user.uid
    return spec


class WebhookAuthorizer:
    """One authorizer of the chain asking a webhook; its answers cached on `clock` (monotonic seconds)."""

    def __init__(self, settings: WebhookSettings, client: WebhookClient,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.settings = settings
        self.client = client
        self.clock = clock
        self.name = f"Webhook/{settings.name}"
        self.calls = 0
        self._cache: dict[bytes, tuple[float, str, str]] = {}

    async def authorize(self, attrs: pb.RequestAttributes) -> tuple[str, str]:
        decision, reason, _ = await self.authorize_with_error(attrs)
        return decision, reason

    async def authorize_with_error(self, attrs: pb.RequestAttributes) -> tuple[str, str, str]:
        """(decision, reason, error); error is set when the webhook could not decide."""
        decision, reason, error, _ = await self.evaluate(attrs)
        return decision, reason, error

    async def evaluate(self, attrs: pb.RequestAttributes) -> tuple[str, str, str, float]:
        """(decision, reason, error, how long the answer may be reused: inf when it does not depend on the
        webhook's answer, the authorizedTTL / unauthorizedTTL when it does, 0 after a failure)."""
        s = self.settings
        spec = review_spec(attrs)
        if s.match_conditions:
            # kube's CELMatcher: any false skips the webhook (even if others failed to evaluate); otherwise an
            # evaluation error is a failure of the webhook
            act = cel.activation(request={"extra": {}, **spec})
            failed: list[str] = []
            for program in s.match_conditions:
                try:
                    matched = program.evaluate(act)
                    if not isinstance(matched, bool):
                        raise cel.CELEvalError("matchCondition must return a boolean")
                except cel.CELEvalError as e:
                    failed.append(f"matchCondition '{program.expression}' evaluation failed: {e}")
                    continue
                if not matched:
                    MATCH_EXCLUSIONS.labels("Webhook", s.name).inc()
                    return NO_OPINION, "", "", INF
            if failed:
                MATCH_ERRORS.labels("Webhook", s.name).inc()
                return self._on_error(failed[0] if len(failed) == 1 else "[" + ", ".join(failed) + "]")
        key = orjson.dumps(spec, option=orjson.OPT_SORT_KEYS)
        now = self.clock()
        hit = self._cache.get(key)
        if hit is not None and hit[0] > now:
            return hit[1], hit[2], "", hit[0] - now
        body = {"apiVersion": f"authorization.k8s.io/{s.version}", "kind": "SubjectAccessReview",
                "metadata": {"creationTimestamp": None}, "spec": spec, "status": {"allowed": False}}
        self.calls += 1
        start = time.perf_counter()
        try:
            answer = await self.client.post(body)
        except WebhookError as e:
            DURATION.labels(s.name, "error").observe(time.perf_counter() - start)
            EVALUATIONS.labels(s.name, "error").inc()
            log.error("Failed to make webhook authorizer request: %s", e)
            return self._on_error(str(e))
        status = answer.get("status") if isinstance(answer.get("status"), dict) else {}
        reason = str(status.get("reason") or "")
        if status.get("allowed"):
            decision, ttl = ALLOW, s.authorized_ttl
        elif status.get("denied"):
            decision, ttl = DENY, s.unauthorized_ttl
        else:
            decision, ttl = NO_OPINION, s.unauthorized_ttl
        if status.get("evaluationError") and not reason:
            reason = str(status["evaluationError"])
        result = {ALLOW: "allowed", DENY: "denied", NO_OPINION: "no_opinion"}[decision]
        DURATION.labels(s.name, result).observe(time.perf_counter() - start)
        EVALUATIONS.labels(s.name, "success").inc()
        if ttl > 0:
            if len(self._cache) >= MAX_ENTRIES:
                self._cache = {k: v for k, v in self._cache.items() if v[0] > now}
                if len(self._cache) >= MAX_ENTRIES:
                    self._cache.clear()
            self._cache[key] = (self.clock() + ttl, decision, reason)
        return decision, reason, "", ttl

    def _on_error(self, error: str) -> tuple[str, str, str, float]:
        if self.settings.failure_policy == DENY:
            return DENY, "", error, 0.0
        FAIL_OPEN.labels(self.settings.name, "error").inc()
        return NO_OPINION, "", error, 0.0

    async def close(self) -> None:
        await self.client.aclose()
