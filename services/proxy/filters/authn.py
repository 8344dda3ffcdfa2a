"""The proxy's authenticator: request-header identity, verified client certificate, bearer token, anonymous.

The order is kube-apiserver's union: a request-header certificate with a username header wins and is
formed here without an auth-service call; otherwise the auth service decides from the client-CA
certificate and/or the bearer token (or answers anonymous). A certificate that no authenticator
accepts (issued by the request-header CA only, or with a CN outside --requestheader-allowed-names)
is an error unless a token authenticates, so such a request is 401, never anonymous.

Successful auth-service answers are cached for a short while (kube-apiserver caches token
successes 10 s); failures never are.
"""
from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Sequence
from typing import Any

from apiary_pb import auth_pb2 as apb
from apiary_pb import auth_pb2_grpc as agrpc
from apiary_pb import envelope_pb2 as pb
from services.apiserver.filters.requestheader import RequestHeaderConfig
from services.common import grpcutil
from services.common.errors import Unauthorized

from .. import metrics

SUCCESS_TTL = 10.0
MAX_ENTRIES = 10_000
AUTH_TIMEOUT = 10.0


class Authenticator:
    def __init__(self, auth: agrpc.AuthStub, ttl: float = SUCCESS_TTL,
                 request_header: RequestHeaderConfig | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.auth = auth
        self.ttl = ttl
        self.clock = clock  # the cache's monotonic seconds (a test's FakeClock)
        self.request_header = request_header
        self._cache: dict[Any, tuple[float, pb.UserInfo]] = {}

    async def authenticate(self, token: str, cert: dict[str, Any] | None,
                           headers: Sequence[tuple[bytes, bytes]] = (), path: str = "") -> pb.UserInfo:
        """The caller's UserInfo; Unauthorized when no credential is accepted.

        cert is the TLS layer's verified subject ({"cn", "o", "ca"}); headers the raw request headers,
        read only for a request-header certificate.
        """
        x509 = False
        if cert is not None:
            issuers = cert.get("ca", ())
            rh = self.request_header
            if rh is not None and "requestheader" in issuers and rh.allows(cert.get("cn", "")):
                user = rh.user(headers)
                if user is not None:
                    return user
            x509 = "client" in issuers
            if not x509 and not token:
                raise Unauthorized("Unauthorized")
        cn = cert.get("cn", "") if x509 else ""
        orgs = tuple(cert.get("o", ())) if x509 else ()
        # without credentials the answer (anonymous or not) may depend on the path: kube's anonymous conditions
        key = (hashlib.sha256(token.encode()).digest() if token else b"", x509, cn, orgs,
               "" if token or x509 else path)
        now = self.clock()
        hit = self._cache.get(key)
        if hit is not None and hit[0] > now:
            metrics.AUTHN_HIT.inc()
            return hit[1]
        metrics.AUTHN_MISS.inc()
        req = apb.AuthenticateRequest(token=token, has_cert=x509, cert_common_name=cn,
                                      cert_organizations=list(orgs), path=path)
        call = self.auth.Authenticate(req, timeout=AUTH_TIMEOUT, metadata=grpcutil.request_metadata())
        resp = await grpcutil.call(call, "auth")
        if not resp.authenticated:
            raise Unauthorized("Unauthorized")
        if len(self._cache) >= MAX_ENTRIES:
            self._cache = {k: v for k, v in self._cache.items() if v[0] > now}
            if len(self._cache) >= MAX_ENTRIES:
                self._cache.clear()
        self._cache[key] = (now + self.ttl, resp.user)
        return resp.user
