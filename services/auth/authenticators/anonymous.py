"""Requests without credentials: --anonymous-auth (kube's default on), or the AuthenticationConfiguration's
anonymous section, which may limit anonymous requests to some paths (conditions[].path, exact match)."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from apiary_pb import auth_pb2 as apb
from apiary_pb import envelope_pb2 as pb
from services.common.identity import UNAUTHENTICATED, user_pb

ANONYMOUS = "system:anonymous"


@dataclass(frozen=True)
class AnonymousConfig:
    enabled: bool
    paths: frozenset[str] = frozenset()   # empty: every path


class AnonymousAuthenticator:
    name = "anonymous"  # its span's name (services/auth/authenticators/__init__.py)

    def __init__(self, config: Callable[[], AnonymousConfig | None] | None = None, default: bool = True) -> None:
        """config: the configuration file's current anonymous section (None: not set, `default` applies)."""
        self.config = config
        self.default = default

    async def authenticate(self, req: apb.AuthenticateRequest) -> pb.UserInfo | None:
        c = self.config() if self.config is not None else None
        if c is None:
            enabled, paths = self.default, frozenset()
        else:
            enabled, paths = c.enabled, c.paths
        if not enabled or (paths and req.path not in paths):
            return None
        return user_pb(ANONYMOUS, [UNAUTHENTICATED])
