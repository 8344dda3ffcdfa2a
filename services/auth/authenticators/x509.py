"""Client certificates: the proxy verified the chain; the subject names the user (CN) and groups (O)."""
from __future__ import annotations

from apiary_pb import auth_pb2 as apb
from apiary_pb import envelope_pb2 as pb
from services.common.identity import user_pb

from . import AuthenticationFailed


class X509Authenticator:
    name = "x509"  # its span's name (services/auth/authenticators/__init__.py)

    async def authenticate(self, req: apb.AuthenticateRequest) -> pb.UserInfo | None:
        if not req.has_cert:
            return None
        if not req.cert_common_name:
            # kube's CommonNameUserConversion refuses a certificate without a CN.
            raise AuthenticationFailed("x509: client certificate has no common name")
        return user_pb(req.cert_common_name, list(req.cert_organizations))
