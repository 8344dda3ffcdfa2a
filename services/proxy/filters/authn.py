"""Authentication: bearer token and/or verified client certificate -> UserInfo, through the auth service.

Successful answers are cached for a short while (kube caches TokenReview answers 10 s); failures never are.
"""
from __future__ import annotations

import hashlib
import time
from typing import Any

from apiary_pb import auth_pb2 as apb
from apiary_pb import auth_pb2_grpc as agrpc
from apiary_pb import envelope_pb2 as pb
from services.common import grpcutil
from services.common.errors import Unauthorized

SUCCESS_TTL = 10.0
MAX_ENTRIES = 10_000
AUTH_TIMEOUT = 10.0


def bearer_token(headers: dict[bytes, bytes]) -> str:
    value = headers.get(b"authorization")
    if not value:
        return ""
    scheme, _, token = value.decode("latin-1").strip().partition(" ")
    if scheme.lower() != "bearer":
        return ""
    return token.strip()


class Authenticator:
    def __init__(self, auth: agrpc.AuthStub, ttl: float = SUCCESS_TTL) -> None:
        self.auth = auth
        self.ttl = ttl
        self._cache: dict[Any, tuple[float, pb.UserInfo]] = {}

    async def authenticate(self, token: str, cert: dict[str, Any] | None) -> pb.UserInfo:
        """The caller's UserInfo; Unauthorized when the auth service does not accept the credentials."""
        cn = cert.get("cn", "") if cert else ""
        orgs = tuple(cert.get("o", ())) if cert else ()
        key = (hashlib.sha256(token.encode()).digest() if token else b"", bool(cert), cn, orgs)
        now = time.monotonic()
        hit = self._cache.get(key)
        if hit is not None and hit[0] > now:
            return hit[1]
        req = apb.AuthenticateRequest(token=token, has_cert=bool(cert), cert_common_name=cn,
                                      cert_organizations=list(orgs))
        resp = await grpcutil.call(self.auth.Authenticate(req, timeout=AUTH_TIMEOUT), "auth")
        if not resp.authenticated:
            raise Unauthorized("Unauthorized")
        if len(self._cache) >= MAX_ENTRIES:
            self._cache = {k: v for k, v in self._cache.items() if v[0] > now}
            if len(self._cache) >= MAX_ENTRIES:
                self._cache.clear()
        self._cache[key] = (now + self.ttl, resp.user)
        return resp.user
