"""The apiary.Auth servicer: the authenticator and authorizer chains behind gRPC, with metrics."""
from __future__ import annotations

import logging
import time

import grpc
from prometheus_client import Counter, Histogram

from apiary_pb import auth_pb2 as apb
from apiary_pb import auth_pb2_grpc as agrpc
from services.common import grpcutil

from .authenticators import Union as AuthenticatorUnion
from .authorizers import ALLOW, DENY
from .authorizers import Union as AuthorizerUnion

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
    def __init__(self, authenticator: AuthenticatorUnion, authorizer: AuthorizerUnion) -> None:
        self.authenticator = authenticator
        self.authorizer = authorizer

    @grpcutil.api_method
    async def Authenticate(self, request: apb.AuthenticateRequest,
                           context: grpc.aio.ServicerContext) -> apb.AuthenticateResponse:
        start = time.perf_counter()
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
        d = await self.authorizer.authorize(request.attributes)
        if d.decision in (ALLOW, DENY):
            AUTHORIZATION_DECISIONS.labels(d.authorizer, d.authorizer,
                                           "allowed" if d.decision == ALLOW else "denied").inc()
        return apb.AuthorizeResponse(decision=d.decision, reason=d.reason)
