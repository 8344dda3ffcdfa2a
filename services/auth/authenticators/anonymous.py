"""Requests without credentials, when --anonymous-auth is on (kube's default)."""
from __future__ import annotations

from apiary_pb import auth_pb2 as apb
from apiary_pb import envelope_pb2 as pb
from services.common.identity import UNAUTHENTICATED, user_pb

ANONYMOUS = "system:anonymous"


class AnonymousAuthenticator:
    async def authenticate(self, req: apb.AuthenticateRequest) -> pb.UserInfo | None:
        return user_pb(ANONYMOUS, [UNAUTHENTICATED])
