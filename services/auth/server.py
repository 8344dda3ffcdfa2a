"""The apiary.Auth servicer: the authenticator and authorizer chains behind gRPC, with metrics."""
from __future__ import annotations

import logging
import time
from collections.abc import Callable

import grpc
import orjson
from prometheus_client import Counter, Histogram

from apiary_pb import auth_pb2 as apb
from apiary_pb import auth_pb2_grpc as agrpc
from services.common import grpcutil, tracing
from services.common.errors import NotFound, ServiceUnavailable

from .authenticators import Union as AuthenticatorUnion
from .authnconfig import JWTAuthenticators
from .authorizers import ALLOW, DENY
from .authorizers import Union as AuthorizerUnion
from .authorizers.rbac import RBACIndex
from .authzconfig import AuthorizationConfigWatcher
from .escalation import EscalationChecker
from .openidmetadata import MAX_AGE_SECONDS, OpenIDMetadata
from .reviews import Reviewer
from .serviceaccount import ServiceAccountLookup, TokenIssuer

log = logging.getLogger(__name__)

AUTHENTICATION_ATTEMPTS = Counter(
    "apiserver_authentication_attempts", "Counter of authenticated attempts.", ["result"])
AUTHENTICATION_LATENCY = Histogram(
    "apiserver_authentication_duration_seconds", "Authentication duration in seconds broken out by result.",
    ["result"], buckets=(0.0001, 0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1))
AUTHORIZATION_DECISIONS = Counter(
    "apiserver_authorization_decisions_total", "Total number of terminal decisions made by an authorizer "
    "split by authorizer type, name, and decision.", ["type", "name", "decision"])


class AuthServicer(agrpc.AuthServicer):
    def __init__(self, authenticator: AuthenticatorUnion, authorizer: AuthorizerUnion,
                 reviewer: Reviewer | None = None, issuer: TokenIssuer | None = None,
                 escalation: EscalationChecker | None = None, index: RBACIndex | None = None,
                 rbac_enabled: bool = False, sa_lookup: ServiceAccountLookup | None = None) -> None:
        self.authenticator = authenticator
        self.authorizer = authorizer
        self.reviewer = reviewer
        self.issuer = issuer
        self.escalation = escalation
        self.index = index if index is not None else RBACIndex()
        self.rbac_enabled = rbac_enabled      # the RBAC informers and bootstrap policy are needed
        self.sa_lookup = sa_lookup            # started by main with the registry channel
        # Whether the RBAC index holds every object yet (set by main to the informers' sync).
        self.rbac_synced: Callable[[], bool] = lambda: True
        self.jwt: JWTAuthenticators | None = None  # key fetching and file reloads, started by main
        self.authz_watcher: AuthorizationConfigWatcher | None = None  # --authorization-config reloads
        self.openid: OpenIDMetadata | None = None  # service account issuer discovery, when served

    @grpcutil.api_method
    async def Authenticate(self, request: apb.AuthenticateRequest,
                           context: grpc.aio.ServicerContext) -> apb.AuthenticateResponse:
        start = time.perf_counter()
        if tracing.ENABLED and tracing.recording():
            with tracing.span("apiary.Auth/Authenticate") as span:  # each authenticator tried: a child
                result = await self.authenticator.authenticate(request)
                span.set_attributes({"authenticated": result.authenticated,
                                     "user": result.user.name if result.user is not None else ""})
        else:
            result = await self.authenticator.authenticate(request)
        outcome = "success" if result.authenticated else "failure"
        AUTHENTICATION_LATENCY.labels(outcome).observe(time.perf_counter() - start)
        AUTHENTICATION_ATTEMPTS.labels(outcome).inc()
        if result.user is None:
            return apb.AuthenticateResponse(authenticated=False, reason="; ".join(result.errors))
        return apb.AuthenticateResponse(authenticated=True, user=result.user)

    @grpcutil.api_method
    async def Authorize(self, request: apb.AuthorizeRequest,
                        context: grpc.aio.ServicerContext) -> apb.AuthorizeResponse:
        if tracing.ENABLED and tracing.recording():
            with tracing.span("apiary.Auth/Authorize") as span:  # each authorizer asked: a child
                d = await self.authorizer.authorize(request.attributes)
                span.set_attributes({"decision": d.decision, "authorizer": d.authorizer})
        else:
            d = await self.authorizer.authorize(request.attributes)
        if d.decision != ALLOW and not self.rbac_synced():
            # A restarted auth service serves before its RBAC index has every binding: a "no" from
            # a partial index would be wrong (and cached by the proxy), so the caller tries again.
            raise ServiceUnavailable("the authorizer is not ready: its RBAC informers have not synced yet",
                                     headers={"Retry-After": "1"}, details={"retryAfterSeconds": 1})
        if d.decision in (ALLOW, DENY):
            AUTHORIZATION_DECISIONS.labels(d.authorizer, d.authorizer,
                                           "allowed" if d.decision == ALLOW else "denied").inc()
        return apb.AuthorizeResponse(decision=d.decision, reason=d.reason, error=d.error,
                                     cache_ttl=0.0 if d.ttl == float("inf") else d.ttl, no_cache=d.ttl <= 0)

    @grpcutil.api_method
    async def Review(self, request: apb.ReviewRequest, context: grpc.aio.ServicerContext) -> apb.ReviewResponse:
        if self.reviewer is None:
            raise ServiceUnavailable("reviews are not configured on this auth service")
        return apb.ReviewResponse(body=orjson.dumps(await self.reviewer.review(request)))

    @grpcutil.api_method
    async def RequestToken(self, request: apb.TokenRequestRequest,
                           context: grpc.aio.ServicerContext) -> apb.ReviewResponse:
        if self.issuer is None:
            raise ServiceUnavailable("no --service-account-signing-key-file: cannot issue service account tokens")
        uid = request.service_account.metadata.uid
        if not uid:
            raise NotFound(f'serviceaccounts "{request.name}" not found',
                           details={"name": request.name, "kind": "serviceaccounts"})
        answer = self.issuer.token_request(request.namespace, request.name, uid, request.body)
        return apb.ReviewResponse(body=orjson.dumps(answer))

    @grpcutil.api_method
    async def CheckEscalation(self, request: apb.EscalationRequest,
                              context: grpc.aio.ServicerContext) -> apb.EscalationResponse:
        if self.escalation is None:
            raise ServiceUnavailable("RBAC escalation checks are not configured on this auth service")
        await self.escalation.check(request)
        return apb.EscalationResponse(allowed=True)

    @grpcutil.api_method
    async def OpenIDMetadata(self, request: apb.OpenIDMetadataRequest,
                             context: grpc.aio.ServicerContext) -> apb.OpenIDMetadataResponse:
        if self.openid is None:
            raise NotFound("the server could not find the requested resource")
        return apb.OpenIDMetadataResponse(config=self.openid.config(request.default_external_address),
                                          keyset=self.openid.keyset, max_age_seconds=MAX_AGE_SECONDS)
