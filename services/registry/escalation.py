"""registry/rbac's policybased storage: a Role or binding write may not grant more than the caller holds,
unless the caller may escalate or bind (the auth service decides). Dry-run writes are checked too."""
from __future__ import annotations

from apiary_pb import envelope_pb2 as pb
from services.apiserver.registry.scope import Obj, Scope
from services.common import envelope, errors, identity

from .auth import AuthClient

_GC_FIELDS = ("ownerReferences", "finalizers", "selfLink", "managedFields", "resourceVersion")


async def check_escalation(auth: AuthClient | None, r: Scope, obj: Obj, old: Obj | None, env: pb.Object) -> None:
    """obj as env holds it (the envelope the write stores): the auth service gets its JSON spliced, not
    serialized again."""
    if not r.strategy.escalation_checked:
        return
    user = r.req.user
    # rbacregistry.EscalationAllowed: system:masters (the server's own loopback identity) may do anything.
    if identity.SYSTEM_MASTERS in user.groups:
        return
    if old is not None and _only_gc_fields(obj, old):
        return
    if auth is None:
        raise errors.ServiceUnavailable("the RBAC escalation check is unavailable: no auth service")
    allowed = await auth.check_escalation(user, r.namespace, r.info.kind, envelope.to_json(env), r.timing)
    if not allowed:
        groups = "[" + " ".join(f'"{g}"' for g in user.groups) + "]"
        raise errors.forbidden(r.info.plural, r.info.group, (obj.get("metadata") or {}).get("name") or "",
                               f'user "{user.name}" (groups={groups}) is attempting to grant RBAC '
                               "permissions not currently held")


def _only_gc_fields(new: Obj, old: Obj) -> bool:
    """rbacregistry.IsOnlyMutatingGCFields: finalizers and owner references change without a new grant."""
    def strip(o: Obj) -> Obj:
        return dict(o, metadata={k: val for k, val in (o.get("metadata") or {}).items() if k not in _GC_FIELDS})
    return strip(new) == strip(old)
