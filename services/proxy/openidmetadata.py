"""Service account issuer discovery at the front door (kube's routes.ServiceAccountIssuerDiscovery):
/.well-known/openid-configuration and /openid/v1/jwks, rendered by the auth service, which holds the
keys, and kept here once fetched (the keys are fixed while the auth service runs)."""
from __future__ import annotations

from typing import TYPE_CHECKING

from apiary_pb import auth_pb2 as apb
from apiary_pb import auth_pb2_grpc as agrpc
from services.common import grpcutil
from services.common.errors import NotFound

if TYPE_CHECKING:
    from .context import Context

OPENID_CONFIG_PATH = "/.well-known/openid-configuration"
JWKS_PATH = "/openid/v1/jwks"
PATHS = (OPENID_CONFIG_PATH, JWKS_PATH)
_NOT_FOUND = (b"404 page not found\n", "text/plain; charset=utf-8")
TIMEOUT = 5.0


def external_address(advertise_address: str, port: int, external_hostname: str = "") -> str:
    """kube's ExternalAddress: --external-hostname, else the advertise address; with the secure port."""
    host = external_hostname or advertise_address
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


class IssuerDiscovery:
    def __init__(self, auth: agrpc.AuthStub, external: str) -> None:
        self.auth = auth
        self.external = external
        self._answer: apb.OpenIDMetadataResponse | None = None
        self._served = True

    async def serve(self, ctx: Context, path: str) -> None:
        if self._answer is None and self._served:
            req = apb.OpenIDMetadataRequest(default_external_address=self.external)
            try:
                self._answer = await grpcutil.call(
                    self.auth.OpenIDMetadata(req, timeout=TIMEOUT, metadata=grpcutil.request_metadata()), "auth")
            except NotFound:  # the issuer is no https URL, or no key verifies tokens: not installed
                self._served = False
        answer = self._answer
        if answer is None:
            await ctx.respond(404, *_NOT_FOUND, [(b"x-content-type-options", b"nosniff")])
            return
        cache = [(b"cache-control", f"public, max-age={answer.max_age_seconds}".encode())]
        if path == OPENID_CONFIG_PATH:
            await ctx.respond(200, answer.config, "application/json", cache)
        else:
            await ctx.respond(200, answer.keyset, "application/jwk-set+json", cache)
