"""Delegated authorization (k8s.io/apiserver's DelegatingAuthorizerConfig): a SubjectAccessReview
against the core API server per decision, answers cached in an LRU of 1,024 entries for the
authorized / unauthorized TTLs; system:masters is allowed in process (the privileged-group
authorizer), and the always-allow paths need no decision at all."""
from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from typing import Any

from apiary_pb import envelope_pb2 as pb
from services.apiserver.filters.authorization import forbidden_error
from services.apiserver.httpclient import CallError, Client
from services.apiserver.requestinfo import RequestInfo
from services.common import tracing
from services.common.errors import InternalError
from services.common.identity import SYSTEM_MASTERS, user_dict

from .metrics import AUTHZ, AUTHZ_CACHE

SUBJECT_ACCESS_REVIEW = "/apis/authorization.k8s.io/v1/subjectaccessreviews"
CACHE_SIZE = 1024


def _always_allowed(paths: Iterable[str]) -> tuple[frozenset[str], tuple[str, ...]]:
    """kube's --authorization-always-allow-paths: exact paths, or prefixes written with a trailing '*'."""
    exact, prefixes = set(), []
    for p in paths:
        if p.endswith("*"):
            prefixes.append(p[:-1])
        elif p:
            exact.add(p)
    return frozenset(exact), tuple(prefixes)


class Authorizer:
    def __init__(self, apiary: Client | None, authorized_ttl: float = 10.0,
                 unauthorized_ttl: float = 10.0, always_allow_paths: Iterable[str] = (),
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.apiary = apiary
        self.clock = clock  # the cache's monotonic seconds (a test's FakeClock)
        self.authorized_ttl, self.unauthorized_ttl = authorized_ttl, unauthorized_ttl
        self.exact, self.prefixes = _always_allowed(always_allow_paths)
        self._cache: OrderedDict[tuple[Any, ...], tuple[float, bool, str]] = OrderedDict()

    def always_allowed(self, path: str) -> bool:
        return path in self.exact or any(path.startswith(p) for p in self.prefixes)

    async def authorize(self, user: pb.UserInfo, info: RequestInfo) -> None:
        """Return when allowed; raise Forbidden (kube's message) otherwise."""
        if SYSTEM_MASTERS in user.groups:
            return
        allowed, reason = await self.decide(user, info)
        if not allowed:
            raise forbidden_error(user.name, info, reason)

    async def decide(self, user: pb.UserInfo, info: RequestInfo) -> tuple[bool, str]:
        key = (user.name, user.uid, tuple(user.groups),
               tuple(sorted((k, tuple(v.values)) for k, v in user.extra.items())),
               info.verb, info.is_resource_request, info.namespace, info.api_group, info.api_version,
               info.resource, info.subresource, info.name, "" if info.is_resource_request else info.path)
        hit = self._cache.get(key)
        now = self.clock()
        if hit is not None and hit[0] > now:
            self._cache.move_to_end(key)
            AUTHZ_CACHE.labels("hit").inc()
            return hit[1], hit[2]
        AUTHZ_CACHE.labels("miss").inc()
        allowed, reason = await self._review(user, info)
        self._cache[key] = (now + (self.authorized_ttl if allowed else self.unauthorized_ttl), allowed, reason)
        self._cache.move_to_end(key)
        while len(self._cache) > CACHE_SIZE:
            self._cache.popitem(last=False)
        return allowed, reason

    async def _review(self, user: pb.UserInfo, info: RequestInfo) -> tuple[bool, str]:
        if self.apiary is None:
            return False, "no authorizer is configured"
        u = user_dict(user)
        spec: dict[str, Any] = {"user": u["username"], "groups": u.get("groups", [])}
        if user.uid:
            spec["uid"] = user.uid
        if "extra" in u:
            spec["extra"] = u["extra"]
        if info.is_resource_request:
            spec["resourceAttributes"] = {
                "namespace": info.namespace, "verb": info.verb, "group": info.api_group,
                "version": info.api_version, "resource": info.resource, "subresource": info.subresource,
                "name": info.name,
            }
        else:
            spec["nonResourceAttributes"] = {"path": info.path, "verb": info.verb}
        review = {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": spec}
        if tracing.ENABLED and tracing.recording():
            # a span of the request's trace; the core API server is sent its traceparent (httpclient)
            with tracing.span("SubjectAccessReview", {"verb": info.verb, "resource": info.resource}) as span:
                allowed, reason = await self._ask(self.apiary, review)
                if span is not None:
                    span.set_attribute("allowed", allowed)
                return allowed, reason
        return await self._ask(self.apiary, review)

    @staticmethod
    async def _ask(apiary: Client, review: dict[str, Any]) -> tuple[bool, str]:
        try:
            r = await apiary.post_json(SUBJECT_ACCESS_REVIEW, review)
        except CallError as e:
            AUTHZ.labels("error").inc()
            raise InternalError(f"error contacting the authorizer: {e}") from None
        AUTHZ.labels(str(r.status)).inc()
        if r.status != 201 and r.status != 200:
            raise InternalError(f"the authorizer answered {r.status}: {r.text[:200]}")
        status = r.json().get("status") or {}
        return bool(status.get("allowed")) and not status.get("denied"), status.get("reason", "")
