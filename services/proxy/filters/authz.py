"""The proxy's authorizer: the auth service's decisions (Forbidden as kube words it), with a decision cache
(system:masters is allowed in the proxy, as kube-apiserver's privileged-group authorizer does).

The cache is invalidated by events: the proxy watches RBAC objects
(authz_invalidation.AuthzCacheInvalidator) and calls invalidate() on every change. Two details keep
a cached answer from outliving the RBAC state it came from:

- the auth service updates its RBAC index from its own watch, a little after the proxy sees the
  same event; an answer computed in between would be stale. So for SETTLE seconds after an event
  nothing is stored, and an answer whose call started before the latest event is never stored.
- invalidation only covers what the proxy is watching: until the RBAC watches have synced (or
  when they are not configured) answers live FALLBACK_TTL, as before the watches existed.

Hence a deleted RoleBinding stops granting once the auth service has seen the deletion, at most
SETTLE after the proxy saw it (and at most FALLBACK_TTL without watches).
"""
from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from apiary_pb import auth_pb2 as apb
from apiary_pb import auth_pb2_grpc as agrpc
from apiary_pb import envelope_pb2 as pb
from services.apiserver.filters.authorization import forbidden_error
from services.apiserver.requestinfo import RequestInfo
from services.common import grpcutil
from services.common.errors import InternalError
from services.common.identity import SYSTEM_MASTERS

from .. import metrics

# How long an answer is reused while RBAC events invalidate the cache (kube's webhook authorizer
# caches 10 s without any invalidation).
DECISION_TTL = 10.0
# Without RBAC events, answers may only be reused very briefly.
FALLBACK_TTL = 1.0
# After an RBAC event, the time the auth service is given to apply the same event to its own index.
SETTLE = 1.0
MAX_ENTRIES = 10_000
AUTHZ_TIMEOUT = 10.0


def attributes(user: pb.UserInfo, info: RequestInfo) -> pb.RequestAttributes:
    return pb.RequestAttributes(
        user=user, verb=info.verb, resource_request=info.is_resource_request, namespace=info.namespace,
        api_group=info.api_group, api_version=info.api_version, resource=info.resource,
        subresource=info.subresource, name=info.name, path=info.path,
    )


class Authorizer:
    def __init__(self, auth: agrpc.AuthStub, ttl: float = DECISION_TTL, fallback_ttl: float = FALLBACK_TTL,
                 settle: float = SETTLE, clock: Callable[[], float] = time.monotonic) -> None:
        self.auth = auth
        self.clock = clock  # the cache's monotonic seconds (a test's FakeClock)
        self.ttl = ttl
        self.fallback_ttl = fallback_ttl
        self.settle = settle
        # Whether RBAC events currently reach invalidate(); the long TTL applies only then.
        self.informed: Callable[[], bool] = lambda: False
        self._cache: dict[tuple[Any, ...], tuple[float, bool, str]] = {}
        self._generation = 0
        self._quiet_until = 0.0

    def invalidate(self) -> None:
        """Forget every decision; called for each RBAC change."""
        self._cache.clear()
        self._generation += 1
        self._quiet_until = self.clock() + self.settle

    async def authorize(self, user: pb.UserInfo, info: RequestInfo) -> None:
        """Return when allowed; raise Forbidden on Deny or NoOpinion."""
        allowed, reason = await self.decide(user, info)
        if not allowed:
            raise forbidden_error(user.name, info, reason)

    def decides_here(self, user: pb.UserInfo, info: RequestInfo) -> bool:
        """Whether decide() answers without asking the auth service (its trace shows no call then)."""
        if SYSTEM_MASTERS in user.groups:
            return True
        hit = self._cache.get(self._key(user, info))
        return hit is not None and hit[0] > self.clock()

    @staticmethod
    def _key(user: pb.UserInfo, info: RequestInfo) -> tuple[Any, ...]:
        # uid and extra too: a webhook may decide by them
        extra = tuple(sorted((k, tuple(v.values)) for k, v in user.extra.items())) if user.extra else ()
        return (user.name, tuple(user.groups), user.uid, extra, info.verb, info.is_resource_request, info.namespace,
                info.api_group, info.api_version, info.resource, info.subresource, info.name,
                "" if info.is_resource_request else info.path)

    async def decide(self, user: pb.UserInfo, info: RequestInfo) -> tuple[bool, str]:
        """(allowed, the authorizer's reason), from the cache or the auth service."""
        if SYSTEM_MASTERS in user.groups:
            # kube-apiserver's privileged-group authorizer, first in every authorization chain: in
            # process, so system:masters keeps working while the auth service restarts.
            return True, ""
        key = self._key(user, info)
        now = self.clock()
        hit = self._cache.get(key)
        if hit is not None and hit[0] > now:
            metrics.AUTHZ_HIT.inc()
            allowed, reason = hit[1], hit[2]
        else:
            metrics.AUTHZ_MISS.inc()
            generation = self._generation
            req = apb.AuthorizeRequest(attributes=attributes(user, info))
            call = self.auth.Authorize(req, timeout=AUTHZ_TIMEOUT, metadata=grpcutil.request_metadata())
            resp = await grpcutil.call(call, "auth")
            allowed, reason = resp.decision == "Allow", resp.reason
            if not allowed and resp.error:
                # kube's WithAuthorization: an authorizer error without an allow is a 500, never cached
                raise InternalError(f"Internal error occurred: {resp.error}", details={"causes": [{"message": resp.error}]})
            now = self.clock()
            if generation == self._generation and now >= self._quiet_until and not resp.no_cache:
                self._store(key, now, allowed, reason, resp.cache_ttl)
        return allowed, reason

    def _store(self, key: tuple[Any, ...], now: float, allowed: bool, reason: str, limit: float = 0.0) -> None:
        """limit > 0: the auth service's bound on reuse (a webhook's authorizedTTL / unauthorizedTTL)."""
        if len(self._cache) >= MAX_ENTRIES:
            self._cache = {k: v for k, v in self._cache.items() if v[0] > now}
            if len(self._cache) >= MAX_ENTRIES:
                self._cache.clear()
        ttl = self.ttl if self.informed() else self.fallback_ttl
        if limit > 0:
            ttl = min(ttl, limit)
        self._cache[key] = (now + ttl, allowed, reason)
