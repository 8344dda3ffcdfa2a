"""Delegated authentication (k8s.io/apiserver's DelegatingAuthenticatorConfig), in kube's order:

1. request-header identities (X-Remote-User, X-Remote-Uid, X-Remote-Group, X-Remote-Extra-*) from a
   connection whose client certificate the request-header CA issued for an allowed name; a
   certificate of that CA with a name not allowed is refused (401), never trusted;
2. x509 client certificates issued by the client CA (CN is the user, O the groups);
3. bearer tokens, checked with a TokenReview against the core API server, answers cached 10 s.

The certificates are verified once per connection by the HTTPS layer (services.apiserver.serving's
ClientTrust), which names the bundles that issued the peer's certificate in scope["extensions"].
A connection of an allowed front proxy is also whose `traceparent` the kit continues for every user
(front_proxy(), read by the chain's tracing filter): the proxy sends its own span's, never a client's.
"""
from __future__ import annotations

import hashlib
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any

from apiary_pb import envelope_pb2 as pb
from services.apiserver.filters.requestheader import RequestHeaderConfig, with_authenticated_group
from services.apiserver.httpclient import CallError, Client
from services.common.errors import Unauthorized
from services.common.identity import user_pb

from .metrics import AUTHN

UNAUTHORIZED = "Unauthorized"
TOKEN_REVIEW = "/apis/authentication.k8s.io/v1/tokenreviews"


class TokenCache:
    """TokenReview answers by token digest for `ttl` seconds (kube's cached token authenticator)."""

    def __init__(self, ttl: float = 10.0, size: int = 4096, clock: Callable[[], float] = time.monotonic) -> None:
        self.ttl, self.size, self.clock = ttl, size, clock
        self._entries: OrderedDict[bytes, tuple[float, pb.UserInfo | None]] = OrderedDict()

    def get(self, key: bytes) -> tuple[bool, pb.UserInfo | None]:
        hit = self._entries.get(key)
        if hit is None or hit[0] < self.clock():
            return False, None
        return True, hit[1]

    def put(self, key: bytes, user: pb.UserInfo | None) -> None:
        self._entries[key] = (self.clock() + self.ttl, user)
        self._entries.move_to_end(key)
        while len(self._entries) > self.size:
            self._entries.popitem(last=False)


class Authenticator:
    def __init__(self, requestheader: RequestHeaderConfig | None, apiary: Client | None,
                 token_ttl: float = 10.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.requestheader = requestheader
        self.apiary = apiary
        self.tokens = TokenCache(token_ttl, clock=clock)

    async def authenticate(self, scope: dict[str, Any]) -> pb.UserInfo | None:
        """The user, None when the request carries no credentials; Unauthorized when it carries
        credentials that do not authenticate."""
        return await self.user((scope.get("extensions") or {}).get("tls"), scope["headers"])

    def front_proxy(self, tls: dict[str, Any] | None) -> bool:
        """Whether the peer is a verified authenticating front proxy: a client certificate the
        request-header CA issued for an allowed name."""
        return bool(tls and "requestheader" in tls["ca"] and self.requestheader is not None
                    and self.requestheader.allows(tls["cn"]))

    async def user(self, tls: dict[str, Any] | None, headers: Sequence[tuple[bytes, bytes]]) -> pb.UserInfo | None:
        """authenticate's answer from the verified client certificate (the HTTPS layer's scope
        extension "tls") and the request's headers."""
        if tls and "requestheader" in tls["ca"] and self.requestheader is not None:
            if not self.requestheader.allows(tls["cn"]):
                raise Unauthorized(UNAUTHORIZED)
            user = self.requestheader.user(headers)
            if user is not None:
                return user
        if tls and "client" in tls["ca"]:
            return user_pb(tls["cn"], with_authenticated_group(list(tls["o"]), tls["cn"]))
        token = _bearer(headers)
        if token:
            return await self._token(token)
        if tls and not tls["ca"]:
            raise Unauthorized(UNAUTHORIZED)  # a certificate no trusted CA issued
        return None

    async def _token(self, token: str) -> pb.UserInfo:
        key = hashlib.sha256(token.encode()).digest()
        found, user = self.tokens.get(key)
        if not found:
            try:
                user = await self._review(token)
            except CallError:
                raise Unauthorized(UNAUTHORIZED) from None  # not cached: the next request asks again
            self.tokens.put(key, user)
        if user is None:
            raise Unauthorized(UNAUTHORIZED)
        return user

    async def _review(self, token: str) -> pb.UserInfo | None:
        if self.apiary is None:
            return None
        review = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": token}}
        try:
            r = await self.apiary.post_json(TOKEN_REVIEW, review)
        except CallError:
            AUTHN.labels("error").inc()
            raise
        AUTHN.labels(str(r.status)).inc()
        if not r.ok:
            raise CallError("POST", TOKEN_REVIEW, f"the server responded with the status code {r.status}")
        status = r.json().get("status") or {}
        if not status.get("authenticated"):
            return None
        u = status.get("user") or {}
        return user_pb(u.get("username", ""), u.get("groups") or [], u.get("uid", ""), u.get("extra") or {})


def _bearer(headers: Sequence[tuple[bytes, bytes]]) -> str:
    for k, v in headers:
        if k == b"authorization":
            scheme, _, token = v.decode("latin-1").strip().partition(" ")
            if scheme.lower() == "bearer":
                return token.strip()
            return ""
    return ""
