"""The caller's identity as it travels between services."""
from __future__ import annotations

from typing import Any

from apiary_pb import envelope_pb2 as pb

SYSTEM_MASTERS = "system:masters"
AUTHENTICATED = "system:authenticated"
UNAUTHENTICATED = "system:unauthenticated"


def user_pb(name: str, groups: list[str] | tuple[str, ...] = (), uid: str = "",
            extra: dict[str, list[str]] | None = None) -> pb.UserInfo:
    u = pb.UserInfo(name=name, uid=uid, groups=list(groups))
    for k, vs in (extra or {}).items():
        u.extra[k].values.extend(vs)
    return u


def user_dict(u: pb.UserInfo) -> dict[str, Any]:
    """authentication.k8s.io/v1 UserInfo JSON (AdmissionReview, TokenReview, SelfSubjectReview)."""
    d: dict[str, Any] = {"username": u.name}
    if u.uid:
        d["uid"] = u.uid
    if u.groups:
        d["groups"] = list(u.groups)
    if u.extra:
        d["extra"] = {k: list(v.values) for k, v in u.extra.items()}
    return d


# Services acting on their own behalf (informers, the namespace finalizer).
APISERVER = user_pb("system:apiserver", [SYSTEM_MASTERS, AUTHENTICATED])
