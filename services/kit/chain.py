"""The kit's handler chain: the library's filters (services.apiserver.filters) in front of the kit's
resource path and FastAPI application, assembled in one function as sample-apiserver's
DefaultBuildHandlerChain assembles k8s.io/apiserver's, with the delegated authenticator and
authorizer in the places of the core path's."""
from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any, Protocol

from apiary_pb import envelope_pb2 as pb
from services.apiserver.audit.policy import Auditor
from services.apiserver.filters import Handler, RequestContext
from services.apiserver.filters.audit import failed_authentication_audit, with_audit, with_audit_init
from services.apiserver.filters.authentication import with_authentication
from services.apiserver.filters.authorization import with_authorization
from services.apiserver.filters.requestinfo import with_request_info
from services.apiserver.filters.timeout import (
    Deadlines,
    with_request_deadline,
    with_timeout_for_non_long_running_requests,
)
from services.apiserver.filters.traces import with_tracing
from services.apiserver.filters.wrap import with_panic_recovery
from services.apiserver.requestinfo import RequestInfo
from services.common.errors import Unauthorized
from services.common.identity import SYSTEM_MASTERS, user_pb

from .authn import UNAUTHORIZED, Authenticator
from .authz import Authorizer
from .metrics import LATENCY, REQUESTS

ANONYMOUS = "system:anonymous"
UNAUTHENTICATED = "system:unauthenticated"


class APIServer(Protocol):
    """What the chain reads of the server (services.kit.server.APIServer); the authenticator and
    authorizer are read per request, as the delegation replaces them once the server starts."""

    authn: Authenticator
    authz: Authorizer
    auditor: Auditor | None
    deadlines: Deadlines


class DelegatedAuthentication:
    """The library's Authenticator over the server's delegated one (services.kit.authn): a request
    without credentials is system:anonymous on the --authorization-always-allow-paths and 401 elsewhere."""

    def __init__(self, server: APIServer) -> None:
        self.server = server

    async def authenticate(self, token: str, cert: dict[str, Any] | None,
                           headers: Sequence[tuple[bytes, bytes]] = (), path: str = "") -> pb.UserInfo:
        user = await self.server.authn.user(cert, headers)
        if user is not None:
            return user
        if self.server.authz.always_allowed(path):
            return user_pb(ANONYMOUS, [UNAUTHENTICATED])
        raise Unauthorized(UNAUTHORIZED)


class DelegatedAuthorization:
    """The library's Authorizer over the server's delegated one (services.kit.authz), after kube's
    always-allow-paths and privileged-group authorizers."""

    def __init__(self, server: APIServer) -> None:
        self.server = server

    async def decide(self, user: pb.UserInfo, info: RequestInfo) -> tuple[bool, str]:
        if self.server.authz.always_allowed(info.path) or SYSTEM_MASTERS in user.groups:
            return True, ""
        return await self.server.authz.decide(user, info)


def front_proxy(server: APIServer) -> Callable[[RequestContext], bool]:
    """Whether a request came from the verified authenticating front proxy, whose `traceparent` the
    kit continues whoever the user is (the proxy applied kube's trust rule and sends its own span's);
    a direct client's is continued only for kube's privileged groups, as at the front door."""
    def sent_by_front_proxy(ctx: RequestContext) -> bool:
        return server.authn.front_proxy(ctx.client_cert)
    return sent_by_front_proxy


def with_request_metrics(handler: Handler) -> Handler:
    """apiserver_request_total and apiserver_request_duration_seconds, once the answer is out."""
    async def metrics(ctx: RequestContext) -> None:
        start = time.perf_counter()
        try:
            await handler(ctx)
        finally:
            info = ctx.info
            labels = (info.verb.upper(), info.api_group, info.api_version, info.resource) if info else ("",) * 4
            REQUESTS.labels(*labels, str(ctx.code or 500)).inc()
            LATENCY.labels(*labels).observe(time.perf_counter() - start)
    return metrics


def build_handler_chain(api_handler: Handler, server: APIServer) -> Handler:
    """The filters in front of api_handler, outermost first (kube's DefaultBuildHandlerChain reads
    bottom to top)."""
    chain: list[Callable[[Handler], Handler]] = [
        with_request_metrics,
        partial(with_audit_init, auditor=server.auditor),  # the audit event ends after the answer
        partial(with_timeout_for_non_long_running_requests, deadlines=server.deadlines),  # 504
        with_panic_recovery,  # every error answered once, as kube's Status
        with_request_info,
        partial(with_request_deadline, deadlines=server.deadlines),  # none for a watch; ?timeout=
        partial(with_authentication, authenticator=DelegatedAuthentication(server),
                failed=failed_authentication_audit(server.auditor)),
        # the root span, once the user (or the front proxy's certificate) says whether its traceparent is trusted
        partial(with_tracing, trusted_peer=front_proxy(server)),
        partial(with_audit, auditor=server.auditor),  # the policy sees the authenticated user
        partial(with_authorization, authorizer=DelegatedAuthorization(server)),
    ]
    handler = api_handler
    for wrap in reversed(chain):
        handler = wrap(handler)
    return handler
