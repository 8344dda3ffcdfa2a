"""RBAC escalation prevention (kube's pkg/registry/rbac/*/policybased and rbac/validation).

A Role or ClusterRole may only grant what the writer already holds, unless the writer may "escalate"
on it; a binding needs "bind" on the role it references, or every permission of that role.
system:masters may do anything.
"""
from __future__ import annotations

from typing import Any

import orjson

from apiary_pb import auth_pb2 as apb
from apiary_pb import envelope_pb2 as pb
from services.apiserver.fielderrors import quote, quote_list
from services.common.errors import BadRequest, forbidden, not_found
from services.common.identity import SYSTEM_MASTERS

from .authorizers import ALLOW
from .authorizers import Union as AuthorizerUnion
from .authorizers.rbac import RBACIndex, Rule, compact_rules, compact_string, covers

RBAC = "rbac.authorization.k8s.io"
RESOURCES = {"Role": "roles", "ClusterRole": "clusterroles", "RoleBinding": "rolebindings",
             "ClusterRoleBinding": "clusterrolebindings"}
FULL_AUTHORITY = [Rule(("*",), ("*",), ("*",)), Rule(("*",), non_resource_urls=("*",))]


def not_held_message(user: pb.UserInfo, missing: list[Rule]) -> str:
    """kube's ConfirmNoEscalation message: the missing rules compacted, one per line, sorted."""
    lines = sorted({compact_string(r) for r in compact_rules(missing)})
    return (f"user {quote(user.name)} (groups={quote_list(user.groups)}) is attempting "
            "to grant RBAC permissions not currently held:\n" + "\n".join(lines))


class EscalationChecker:
    def __init__(self, authorizer: AuthorizerUnion, index: RBACIndex) -> None:
        self.authorizer = authorizer
        self.index = index

    async def _allowed(self, user: pb.UserInfo, verb: str, resource: str, namespace: str, name: str) -> bool:
        attrs = pb.RequestAttributes(user=user, verb=verb, resource_request=True, namespace=namespace, api_group=RBAC,
                               api_version="v1", resource=resource, name=name)
        return (await self.authorizer.authorize(attrs)).decision == ALLOW

    def _confirm_no_escalation(self, user: pb.UserInfo, namespace: str, wanted: list[Rule]) -> list[Rule]:
        owned = self.index.rules_for(user.name, tuple(user.groups), namespace)
        return covers(owned, wanted)[1]

    async def check(self, req: apb.EscalationRequest) -> None:
        """Return when the write is allowed; raise Forbidden (or NotFound for a missing role) otherwise."""
        if req.kind not in RESOURCES:
            raise BadRequest(f"escalation check: unknown kind {req.kind!r}")
        try:
            obj: dict[str, Any] = orjson.loads(req.object) if req.object else {}
        except orjson.JSONDecodeError as e:
            raise BadRequest(f"the body of the request was in an unknown format: {e}") from None
        if not isinstance(obj, dict):
            raise BadRequest(f"the body of the request was in an unknown format: expected a {req.kind} object")
        user = req.user
        if SYSTEM_MASTERS in user.groups:
            return
        resource = RESOURCES[req.kind]
        name = str((obj.get("metadata") or {}).get("name") or "")
        namespace = req.namespace if req.kind in ("Role", "RoleBinding") else ""
        if req.kind in ("Role", "ClusterRole"):
            await self._check_role(user, req.kind, resource, namespace, name, obj)
        else:
            await self._check_binding(user, req.kind, resource, namespace, name, obj)

    async def _check_role(self, user: pb.UserInfo, kind: str, resource: str, namespace: str, name: str,
                          obj: dict[str, Any]) -> None:
        if await self._allowed(user, "escalate", resource, namespace, name):
            return
        rules = [Rule.from_dict(r) for r in obj.get("rules") or [] if isinstance(r, dict)]
        missing = self._confirm_no_escalation(user, namespace, rules)
        if missing:
            raise forbidden(resource, RBAC, name, not_held_message(user, missing))
        if kind == "ClusterRole" and obj.get("aggregationRule"):
            # an aggregation rule can gather anything, so it takes full authority
            if self._confirm_no_escalation(user, namespace, FULL_AUTHORITY):
                raise forbidden(resource, RBAC, name, "must have cluster-admin privileges to use the aggregationRule")

    async def _check_binding(self, user: pb.UserInfo, kind: str, resource: str, namespace: str, name: str,
                             obj: dict[str, Any]) -> None:
        ref = obj.get("roleRef") or {}
        ref_kind, ref_name = str(ref.get("kind") or ""), str(ref.get("name") or "")
        ref_resource = "clusterroles" if ref_kind == "ClusterRole" else "roles"
        if await self._allowed(user, "bind", ref_resource, namespace, ref_name):
            return
        if ref_kind == "ClusterRole":
            role_rules = self.index.cluster_roles.get(ref_name)
        elif ref_kind == "Role" and namespace:
            role_rules = self.index.roles.get((namespace, ref_name))
        else:
            role_rules = None
        if role_rules is None:
            raise not_found(ref_resource, RBAC, ref_name)
        missing = self._confirm_no_escalation(user, namespace, list(role_rules))
        if missing:
            raise forbidden(resource, RBAC, name, not_held_message(user, missing))
