"""Authorization through the auth service, with kube's Forbidden messages and a short decision cache."""
from __future__ import annotations

import time
from typing import Any

from apiary_pb import auth_pb2 as apb
from apiary_pb import auth_pb2_grpc as agrpc
from apiary_pb import envelope_pb2 as pb
from services.common import grpcutil
from services.common.errors import Forbidden

from ..requestinfo import RequestInfo

# RBAC changes are not yet pushed to the proxy, so decisions may only be reused very briefly.
DECISION_TTL = 1.0
MAX_ENTRIES = 10_000
AUTHZ_TIMEOUT = 10.0


def attributes(user: pb.UserInfo, info: RequestInfo) -> apb.Attributes:
    return apb.Attributes(
        user=user, verb=info.verb, resource_request=info.is_resource_request, namespace=info.namespace,
        api_group=info.api_group, api_version=info.api_version, resource=info.resource,
        subresource=info.subresource, name=info.name, path=info.path,
    )


def forbidden_error(user: str, info: RequestInfo, reason: str = "") -> Forbidden:
    """responsewriters.ForbiddenStatusError: the same message, reason and details as kube-apiserver."""
    msg = f'User "{user}" cannot {info.verb}'
    if info.is_resource_request:
        res = f"{info.resource}/{info.subresource}" if info.subresource else info.resource
        msg += f' resource "{res}" in API group "{info.api_group}"'
        msg += f' in the namespace "{info.namespace}"' if info.namespace else " at the cluster scope"
    else:
        msg += f' path "{info.path}"'
    if reason:
        msg += f": {reason}"
    # apierrors.NewForbidden with the GroupResource of the request
    group, resource, name = info.api_group, info.resource, info.name
    if not group and not resource:
        message = f"forbidden: {msg}"
    else:
        qualified = f"{resource}.{group}" if group else resource
        message = f'{qualified} "{name}" is forbidden: {msg}' if name else f"{qualified} is forbidden: {msg}"
    details: dict[str, Any] = {}
    if name:
        details["name"] = name
    if group:
        details["group"] = group
    if resource:
        details["kind"] = resource
    return Forbidden(message, details=details)


class Authorizer:
    def __init__(self, auth: agrpc.AuthStub, ttl: float = DECISION_TTL) -> None:
        self.auth = auth
        self.ttl = ttl
        self._cache: dict[tuple[Any, ...], tuple[float, bool, str]] = {}

    async def authorize(self, user: pb.UserInfo, info: RequestInfo) -> None:
        """Return when allowed; raise Forbidden on Deny or NoOpinion."""
        key = (user.name, tuple(user.groups), info.verb, info.is_resource_request, info.namespace,
               info.api_group, info.api_version, info.resource, info.subresource, info.name,
               "" if info.is_resource_request else info.path)
        now = time.monotonic()
        hit = self._cache.get(key)
        if hit is not None and hit[0] > now:
            allowed, reason = hit[1], hit[2]
        else:
            req = apb.AuthorizeRequest(attributes=attributes(user, info))
            resp = await grpcutil.call(self.auth.Authorize(req, timeout=AUTHZ_TIMEOUT), "auth")
            allowed, reason = resp.decision == "Allow", resp.reason
            if len(self._cache) >= MAX_ENTRIES:
                self._cache = {k: v for k, v in self._cache.items() if v[0] > now}
                if len(self._cache) >= MAX_ENTRIES:
                    self._cache.clear()
            self._cache[key] = (now + self.ttl, allowed, reason)
        if not allowed:
            raise forbidden_error(user.name, info, reason)
