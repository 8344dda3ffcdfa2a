"""Webhook token authentication (--authentication-token-webhook-config-file), as kube's
plugin/pkg/authenticator/token/webhook with its token cache.

Each bearer token (not claimed by an earlier authenticator) is sent in a TokenReview to the webhook,
with the audiences the request is for (the API's audiences for ordinary requests, spec.audiences for
a TokenReview). Answers are cached for --authentication-token-webhook-cache-ttl by hash of the token
and audiences, positive and negative alike; a failed call (webhook down, timeout, bad answer) or an
answer carrying status.error is never cached, and makes the request a 401.
"""
from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from prometheus_client import Counter, Histogram

from apiary_pb import auth_pb2 as apb
from apiary_pb import envelope_pb2 as pb
from services.common.identity import user_pb

from ..webhookclient import WebhookClient, WebhookError
from . import AuthenticationFailed

log = logging.getLogger(__name__)

DEFAULT_CACHE_TTL = 120.0
REQUEST_TIMEOUT = 10.0
MAX_ENTRIES = 10_000

WEBHOOK_REQUESTS = Counter(
    "apiserver_authentication_webhook_requests", "Calls to the token authentication webhook by result.",
    ["result"])
WEBHOOK_LATENCY = Histogram(
    "apiserver_authentication_webhook_duration_seconds", "Duration of token authentication webhook calls.",
    ["result"], buckets=(0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10))


def _go_list(values: Iterable[str]) -> str:
    return "[" + " ".join(f'"{v}"' for v in values) + "]"


class WebhookTokenAuthenticator:
    """Tokens reviewed by a webhook; its answers cached for cache_ttl on `clock` (monotonic seconds)."""
    name = "webhook"  # its span's name (services/auth/authenticators/__init__.py)

    def __init__(self, client: WebhookClient, version: str, api_audiences: Sequence[str],
                 cache_ttl: float = DEFAULT_CACHE_TTL, clock: Callable[[], float] = time.monotonic) -> None:
        self.client = client
        self.clock = clock
        self.api_version = f"authentication.k8s.io/{version}"
        self.api_audiences = tuple(api_audiences)
        self.cache_ttl = cache_ttl
        self.calls = 0
        self._cache: dict[bytes, tuple[float, tuple[pb.UserInfo, list[str]] | None]] = {}

    async def authenticate(self, req: apb.AuthenticateRequest) -> pb.UserInfo | None:
        if not req.token:
            return None
        found = await self.authenticate_token(req.token, self.api_audiences)
        if found is None:
            raise AuthenticationFailed("invalid bearer token")
        return found[0]

    async def authenticate_token(self, token: str,
                                 audiences: Sequence[str]) -> tuple[pb.UserInfo, list[str]] | None:
        """(user, audiences) or None when the webhook says not authenticated; AuthenticationFailed on errors."""
        key = hashlib.sha256("\x00".join([token, *audiences]).encode()).digest()
        now = self.clock()
        hit = self._cache.get(key)
        if hit is not None and hit[0] > now:
            return _copy(hit[1])
        result = await self._review(token, list(audiences))
        if self.cache_ttl > 0:
            if len(self._cache) >= MAX_ENTRIES:
                self._cache = {k: v for k, v in self._cache.items() if v[0] > now}
                if len(self._cache) >= MAX_ENTRIES:
                    self._cache.clear()
            self._cache[key] = (self.clock() + self.cache_ttl, result)
        return _copy(result)

    async def _review(self, token: str, audiences: list[str]) -> tuple[pb.UserInfo, list[str]] | None:
        spec: dict[str, Any] = {"token": token}
        if audiences:
            spec["audiences"] = audiences
        body = {"apiVersion": self.api_version, "kind": "TokenReview", "metadata": {"creationTimestamp": None},
                "spec": spec, "status": {"user": {}}}
        self.calls += 1
        start = time.perf_counter()
        try:
            answer = await self.client.post(body)
        except WebhookError as e:
            WEBHOOK_REQUESTS.labels("error").inc()
            WEBHOOK_LATENCY.labels("error").observe(time.perf_counter() - start)
            log.error("Failed to make webhook authenticator request: %s", e)
            raise AuthenticationFailed(str(e)) from None
        WEBHOOK_LATENCY.labels("success").observe(time.perf_counter() - start)
        status = answer.get("status") if isinstance(answer.get("status"), dict) else {}
        if not status.get("authenticated"):
            WEBHOOK_REQUESTS.labels("denied").inc()
            if status.get("error"):
                raise AuthenticationFailed(str(status["error"]))
            return None
        WEBHOOK_REQUESTS.labels("allowed").inc()
        got = [a for a in status.get("audiences") or [] if isinstance(a, str)]
        if audiences:
            if got:
                matched = [a for a in audiences if a in got]
                if not matched:
                    raise AuthenticationFailed(f"token audiences {_go_list(got)} is invalid for the target "
                                               f"audiences {_go_list(audiences)}")
            else:
                matched = [a for a in audiences if a in self.api_audiences]
                if not matched:
                    raise AuthenticationFailed(f"token audiences {_go_list(self.api_audiences)} is invalid for "
                                               f"the target audiences {_go_list(audiences)}")
        else:
            matched = got
        u = status.get("user") if isinstance(status.get("user"), dict) else {}
        extra = {str(k): [str(x) for x in (v if isinstance(v, list) else [v])]
                 for k, v in (u.get("extra") or {}).items()} if isinstance(u.get("extra"), dict) else {}
        user = user_pb(str(u.get("username") or ""), [str(g) for g in u.get("groups") or []],
                       uid=str(u.get("uid") or ""), extra=extra)
        return user, matched

    async def close(self) -> None:
        await self.client.aclose()


def _copy(found: tuple[pb.UserInfo, list[str]] | None) -> tuple[pb.UserInfo, list[str]] | None:
    if found is None:
        return None
    out = pb.UserInfo()
    out.CopyFrom(found[0])  # the union appends system:authenticated; the cached answer stays as it was
    return out, list(found[1])
