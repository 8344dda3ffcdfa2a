"""system:masters may do anything (kube's privileged group authorizer, always first)."""
from __future__ import annotations

from apiary_pb import envelope_pb2 as pb
from services.common.identity import SYSTEM_MASTERS

from . import ALLOW, NO_OPINION


class PrivilegedGroupAuthorizer:
    name = "Privileged"

    def __init__(self, groups: tuple[str, ...] = (SYSTEM_MASTERS,)) -> None:
        self.groups = frozenset(groups)

    async def authorize(self, attrs: pb.RequestAttributes) -> tuple[str, str]:
        if self.groups.intersection(attrs.user.groups):
            return ALLOW, ""
        return NO_OPINION, ""
