"""rbac.authorization.k8s.io/v1: Role, ClusterRole, RoleBinding, ClusterRoleBinding."""
from __future__ import annotations

from typing import Any

from services.apiserver.printers import AGE, AGE_DESC, NAME, TableConvertor, age, column
from services.apiserver.resource import GroupVersion, ResourceInfo

from .strategies.rbac import (ClusterRoleBindingStrategy, ClusterRoleStrategy, RoleBindingStrategy,
                              RoleStrategy)

Obj = dict[str, Any]
GROUP = "rbac.authorization.k8s.io"
_PB = "k8s.io.api.rbac.v1."


def _subjects(obj: Obj) -> list[str]:
    """rbac.SubjectsStrings: users, groups and namespace/name service accounts, each joined by ", "."""
    users, groups, sas = [], [], []
    for s in obj.get("subjects") or []:
        kind, name = s.get("kind"), s.get("name") or ""
        if kind == "User":
            users.append(name)
        elif kind == "Group":
            groups.append(name)
        elif kind == "ServiceAccount":
            sas.append(f"{s.get('namespace') or ''}/{name}")
    return [", ".join(users), ", ".join(groups), ", ".join(sas)]


def _binding_row(o: Obj) -> list[Any]:
    ref = o.get("roleRef") or {}
    return [(o.get("metadata") or {}).get("name", ""), f"{ref.get('kind', '')}/{ref.get('name', '')}", age(o),
            *_subjects(o)]


ROLE_TABLE = TableConvertor((NAME, column("Created At", "date", AGE_DESC)), lambda o: [
    (o.get("metadata") or {}).get("name", ""), (o.get("metadata") or {}).get("creationTimestamp") or ""])
BINDING_TABLE = TableConvertor((
    NAME,
    column("Role", "string", "RoleRef can reference a Role in the current namespace or a ClusterRole in "
           "the global namespace. If the RoleRef cannot be resolved, the Authorizer must return an error. This "
           "field is immutable."),
    AGE,
    column("Users", "string", "Users in the roleBinding", priority=1),
    column("Groups", "string", "Groups in the roleBinding", priority=1),
    column("ServiceAccounts", "string", "ServiceAccounts in the roleBinding", priority=1),
), _binding_row)

V1 = GroupVersion(GROUP, "v1", 17000, 15, (
    ResourceInfo(
        group=GROUP, version="v1", kind="ClusterRoleBinding", plural="clusterrolebindings",
        singular="clusterrolebinding", namespaced=False, key_prefix="/registry/clusterrolebindings/",
        strategy=ClusterRoleBindingStrategy, table=BINDING_TABLE, protobuf=_PB + "ClusterRoleBinding",
    ),
    ResourceInfo(
        group=GROUP, version="v1", kind="ClusterRole", plural="clusterroles", singular="clusterrole",
        namespaced=False, key_prefix="/registry/clusterroles/", strategy=ClusterRoleStrategy,
        table=ROLE_TABLE, protobuf=_PB + "ClusterRole",
    ),
    ResourceInfo(
        group=GROUP, version="v1", kind="RoleBinding", plural="rolebindings", singular="rolebinding",
        namespaced=True, key_prefix="/registry/rolebindings/", strategy=RoleBindingStrategy,
        table=BINDING_TABLE, protobuf=_PB + "RoleBinding",
    ),
    ResourceInfo(
        group=GROUP, version="v1", kind="Role", plural="roles", singular="role", namespaced=True,
        key_prefix="/registry/roles/", strategy=RoleStrategy, table=ROLE_TABLE, protobuf=_PB + "Role",
    ),
))

GROUP_VERSIONS = (V1,)
