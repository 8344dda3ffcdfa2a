"""ServiceAccount bearer tokens (kube's jwtTokenAuthenticator with the bound-token validator).

A token that is not a JWT, or names another issuer, is not ours (None: ask the next authenticator).
One of ours that fails a check is a 401 with kube's reason.
"""
from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from typing import Any

import jwt

from apiary_pb import auth_pb2 as apb
from apiary_pb import envelope_pb2 as pb
from services.common.identity import user_pb

from ..serviceaccount import CREDENTIAL_ID, SA_PREFIX
from . import AuthenticationFailed

# (namespace, name) -> the ServiceAccount object, or None when it does not exist
Lookup = Callable[[str, str], Awaitable[dict[str, Any] | None]]


class ServiceAccountAuthenticator:
    name = "service-account"  # its span's name (services/auth/authenticators/__init__.py)

    def __init__(self, public_keys: list[Any], issuers: Iterable[str], api_audiences: Iterable[str],
                 lookup: Lookup) -> None:
        self.public_keys = public_keys
        self.issuers = frozenset(issuers)
        self.api_audiences = tuple(api_audiences)
        self.lookup = lookup

    async def authenticate(self, req: apb.AuthenticateRequest) -> pb.UserInfo | None:
        if not req.token:
            return None
        found = await self.authenticate_token(req.token, self.api_audiences)
        return found[0] if found else None

    async def authenticate_token(self, token: str, audiences: Iterable[str]) -> tuple[pb.UserInfo, list[str]] | None:
        """(user, the audiences the token is valid for) or None when the token is not ours."""
        if token.count(".") != 2:
            return None
        try:
            unverified = jwt.decode(token, options={"verify_signature": False})
        except jwt.PyJWTError:
            return None
        if unverified.get("iss") not in self.issuers:
            return None
        claims = self._verify(token)
        token_auds = claims.get("aud") or []
        if isinstance(token_auds, str):
            token_auds = [token_auds]
        wanted = list(audiences)
        matched = [a for a in wanted if a in token_auds]
        if not matched:
            raise AuthenticationFailed(f"token audiences {_go_list(token_auds)} is invalid for the target "
                                       f"audiences {_go_list(wanted)}")
        k8s = claims.get("kubernetes.io") or {}
        namespace = k8s.get("namespace") or ""
        sa = k8s.get("serviceaccount") or {}
        name, uid = sa.get("name") or "", sa.get("uid") or ""
        if not namespace or not name or claims.get("sub") != f"{SA_PREFIX}{namespace}:{name}":
            raise AuthenticationFailed("service account token claims are invalid")
        obj = await self.lookup(namespace, name)
        if obj is None:
            raise AuthenticationFailed(f'serviceaccounts "{name}" not found')
        meta = obj.get("metadata") or {}
        if meta.get("uid") != uid:
            raise AuthenticationFailed(f"service account UID ({meta.get('uid')}) does not match claim ({uid})")
        if meta.get("deletionTimestamp"):
            raise AuthenticationFailed(f"service account {namespace}/{name} has been deleted")
        extra: dict[str, list[str]] = {}
        if claims.get("jti"):
            extra[CREDENTIAL_ID] = [f"JTI={claims['jti']}"]
        user = user_pb(f"{SA_PREFIX}{namespace}:{name}",
                       ["system:serviceaccounts", f"system:serviceaccounts:{namespace}"], uid=uid, extra=extra)
        return user, matched

    def _verify(self, token: str) -> dict[str, Any]:
        last: Exception | None = None
        for key in self.public_keys:
            try:
                return jwt.decode(token, key, algorithms=["RS256", "RS384", "RS512", "ES256", "ES384", "ES512"],
                                  options={"verify_aud": False, "require": ["exp", "iss", "sub"]}, leeway=0)
            except jwt.ExpiredSignatureError:
                raise AuthenticationFailed("service account token has expired") from None
            except jwt.ImmatureSignatureError:
                raise AuthenticationFailed("service account token is not valid yet") from None
            except jwt.InvalidSignatureError as e:
                last = e
            except jwt.PyJWTError as e:
                raise AuthenticationFailed(f"service account token is invalid: {e}") from None
        raise AuthenticationFailed("token could not be verified" if last else "no keys to verify the token")


def _go_list(values: Iterable[str]) -> str:
    return "[" + " ".join(f'"{v}"' for v in values) + "]"
