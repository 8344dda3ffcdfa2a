"""JWT authenticators: kube's structured authentication configuration (AuthenticationConfiguration.jwt),
its oidc token authenticator (k8s.io/apiserver/plugin/pkg/authenticator/token/oidc).

One JWTAuthenticator per configured issuer (jwtconfig.JWTConfig), its keys from a jwks.KeySet. A token
whose (unverified) `iss` is not the issuer's URL is not ours (None: the union asks the next
authenticator); a token of ours that fails any check is a 401 with kube's message ("oidc: verify
token: ...").

Times follow go-oidc as kube uses it: exp is checked without leeway, nbf with 5 minutes of leeway,
iat is not checked.
"""
from __future__ import annotations

import asyncio
import time
from datetime import datetime, timezone
from typing import Any

import jwt
from prometheus_client import Histogram

from apiary_pb import auth_pb2 as apb
from apiary_pb import envelope_pb2 as pb
from services.common import cel
from services.common.identity import user_pb

from . import AuthenticationFailed
from .jwks import FETCH_TIMEOUT, KEY_REFRESH_MIN_INTERVAL, KeySet, issuer_hash
from .jwtconfig import ClaimValidationRule, JWTConfig, UserValidationRule

NBF_LEEWAY = 300.0

JWT_LATENCY = Histogram(
    "apiserver_authentication_jwt_authenticator_latency_seconds",
    "Latency of jwt authentication operations in seconds. This is the time spent authenticating a token "
    "for cache miss only (i.e. when the token is not found in the cache).",
    ["result", "jwt_issuer_hash"],
    buckets=(0.001, 0.002, 0.004, 0.008, 0.016, 0.032, 0.064, 0.128, 0.256, 0.512, 1.024, 2.048, 4.096, 8.192))


def unverified_issuer(token: str) -> str | None:
    if token.count(".") != 2:
        return None
    try:
        claims = jwt.decode(token, options={"verify_signature": False})
    except jwt.PyJWTError:
        return None
    iss = claims.get("iss")
    return iss if isinstance(iss, str) else None


def _go_time(ts: float) -> str:
    return datetime.fromtimestamp(ts, timezone.utc).strftime("%Y-%m-%d %H:%M:%S +0000 UTC")


def _go_quote_list(values: list[str]) -> str:
    return "[" + " ".join(f'"{v}"' for v in values) + "]"


def _string_claim(claims: dict[str, Any], claim: str, absent: str, parse: str) -> str:
    """claims[claim], which must be a string: `absent` when it is not there, `parse`'s unmarshal error
    when it is no string (kube's messages for each caller)."""
    if claim not in claims:
        raise AuthenticationFailed(absent)
    value = claims[claim]
    if not isinstance(value, str):
        raise AuthenticationFailed(f"{parse}: json: cannot unmarshal {type(value).__name__} into Go value of type "
                                   "string")
    return value


def _string_expression(program: cel.Program, act: dict[str, Any] | None, claim: str) -> str:
    """A claim mapping's expression that must give a string (username, uid), as kube reports its failures."""
    try:
        value = program.evaluate(act or {})
    except cel.CELEvalError as e:
        raise AuthenticationFailed(f"oidc: error evaluating {claim} claim expression: {e}") from None
    if not isinstance(value, str):
        raise AuthenticationFailed(f"oidc: error evaluating {claim} claim expression: "
                                   f"{claim} claim expression must return a string")
    return value


def _string_list(value: Any) -> list[str]:
    """convertCELValueToStringList: a string or a list of strings; "" and [] mean absent."""
    if value is None:
        return []
    if isinstance(value, str):
        return [value] if value else []
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return [v for v in value if v]
    raise ValueError("expression must return a string or a list of strings")


class JWTAuthenticator:
    def __init__(self, config: JWTConfig, keys: KeySet | None = None) -> None:
        self.config = config
        self.keys = keys or KeySet(config)
        self.hash = issuer_hash(config.url)
        self._uses_cel = bool(config.username.program or config.groups.program or config.uid.program
                              or config.extra or any(r.program for r in config.claim_validation_rules))

    async def authenticate(self, req: apb.AuthenticateRequest) -> pb.UserInfo | None:
        if not req.token:
            return None
        return await self.authenticate_token(req.token)

    async def authenticate_token(self, token: str) -> pb.UserInfo | None:
        if unverified_issuer(token) != self.config.url:
            return None
        start = time.perf_counter()
        try:
            user = await self._authenticate(token)
        except AuthenticationFailed:
            JWT_LATENCY.labels("failure", self.hash).observe(time.perf_counter() - start)
            raise
        JWT_LATENCY.labels("success", self.hash).observe(time.perf_counter() - start)
        return user

    async def _authenticate(self, token: str) -> pb.UserInfo:
        c = self.config
        if not self.keys.ready.is_set():
            try:
                await asyncio.wait_for(self.keys.refresh(KEY_REFRESH_MIN_INTERVAL), FETCH_TIMEOUT)
            except Exception:
                pass
            if not self.keys.ready.is_set():
                raise AuthenticationFailed("oidc: authenticator not initialized")
        claims = await self._verify(token)
        auds = claims.get("aud")
        if isinstance(auds, str):
            auds = [auds]
        auds = [a for a in auds if isinstance(a, str)] if isinstance(auds, list) else []
        if not set(c.audiences) & set(auds):
            raise AuthenticationFailed(f"oidc: verify token: oidc: expected audience in "
                                       f"{_go_quote_list(sorted(c.audiences))} got {_go_quote_list(auds)}")
        act = cel.activation(claims=claims) if self._uses_cel else None
        name = self._username(claims, act)
        groups = self._groups(claims, act)
        uid = self._uid(claims, act)
        extra: dict[str, list[str]] = {}
        for e in c.extra:
            assert e.program is not None
            try:
                values = _string_list(e.program.evaluate(act or {}))
            except (cel.CELEvalError, ValueError) as err:
                raise AuthenticationFailed(f"oidc: error evaluating extra claim expression: {e.value_expression}: "
                                           f"{err}") from None
            if values:
                extra[e.key] = values
        for r in c.claim_validation_rules:
            if r.claim:
                value = _string_claim(claims, r.claim, f"oidc: required claim {r.claim} not present in ID token",
                                      f"oidc: parse claim {r.claim}")
                if value != r.required_value:
                    raise AuthenticationFailed(f"oidc: required claim {r.claim} value does not match. "
                                               f"Got = {value}, want = {r.required_value}")
        self._check_rules(c.claim_validation_rules, act, "oidc: error evaluating claim validation expression")
        if c.user_validation_rules:
            user_act = cel.activation(user={"username": name, "uid": uid, "groups": groups, "extra": extra})
            self._check_rules(c.user_validation_rules, user_act, "oidc: error evaluating user info validation rule")
        return user_pb(name, groups, uid=uid, extra=extra)

    async def _verify(self, token: str) -> dict[str, Any]:
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError as e:
            raise AuthenticationFailed(f"oidc: verify token: oidc: malformed jwt: {e}") from None
        alg = header.get("alg")
        if alg not in self.config.algorithms:
            raise AuthenticationFailed(f"oidc: verify token: oidc: id token signed with unsupported algorithm, "
                                       f"expected {_go_quote_list(list(self.config.algorithms))} got \"{alg}\"")
        claims: dict[str, Any] | None = None
        for key in await self.keys.candidates(header.get("kid")):
            try:
                claims = jwt.decode(token, key, algorithms=[alg],
                                    options={"verify_aud": False, "verify_exp": False, "verify_nbf": False,
                                             "verify_iat": False, "verify_iss": False})
                break
            except jwt.InvalidSignatureError:
                continue
            except jwt.PyJWTError as e:
                raise AuthenticationFailed(f"oidc: verify token: oidc: malformed jwt: {e}") from None
        if claims is None:
            raise AuthenticationFailed("oidc: verify token: failed to verify signature: "
                                       "failed to verify id token signature")
        now = time.time()
        exp = claims.get("exp")
        if not isinstance(exp, (int, float)) or exp < now:
            raise AuthenticationFailed(f"oidc: verify token: oidc: token is expired (Token Expiry: "
                                       f"{_go_time(exp if isinstance(exp, (int, float)) else 0)})")
        nbf = claims.get("nbf")
        if isinstance(nbf, (int, float)) and now + NBF_LEEWAY < nbf:
            raise AuthenticationFailed(f"oidc: verify token: oidc: current time {_go_time(now)} before the nbf "
                                       f"(not before) time: {_go_time(nbf)}")
        return claims

    def _username(self, claims: dict[str, Any], act: dict[str, Any] | None) -> str:
        m = self.config.username
        if m.program is not None:
            value = _string_expression(m.program, act, "username")
            if not value:
                raise AuthenticationFailed("oidc: empty username via CEL expression is not allowed")
            return value
        parse = f"oidc: parse username claims \"{m.claim}\""
        value = _string_claim(claims, m.claim, f"{parse}: claim not present", parse)
        if m.claim == "email" and "email_verified" in claims:
            verified = claims["email_verified"]
            if not isinstance(verified, bool):
                raise AuthenticationFailed("oidc: parse 'email_verified' claim: json: cannot unmarshal into "
                                           "Go value of type bool")
            if not verified:
                raise AuthenticationFailed("oidc: email not verified")
        return (m.prefix or "") + value

    def _groups(self, claims: dict[str, Any], act: dict[str, Any] | None) -> list[str]:
        m = self.config.groups
        if m.claim:
            if m.claim not in claims:
                return []
            value = claims[m.claim]
            groups = [value] if isinstance(value, str) else value
            if not isinstance(groups, list) or not all(isinstance(g, str) for g in groups):
                raise AuthenticationFailed(f"oidc: parse groups claim \"{m.claim}\": json: cannot unmarshal "
                                           f"into Go value of type []string")
            return [(m.prefix or "") + g for g in groups]
        if m.program is None:
            return []
        try:
            return _string_list(m.program.evaluate(act or {}))
        except (cel.CELEvalError, ValueError) as e:
            raise AuthenticationFailed(f"oidc: error evaluating group claim expression: {e}") from None

    def _uid(self, claims: dict[str, Any], act: dict[str, Any] | None) -> str:
        m = self.config.uid
        if m.claim:
            value = claims.get(m.claim)
            if not isinstance(value, str):
                raise AuthenticationFailed(f"oidc: parse uid claim \"{m.claim}\": "
                                           + ("claim not present" if value is None else
                                              "json: cannot unmarshal into Go value of type string"))
            return value
        return "" if m.program is None else _string_expression(m.program, act, "uid")

    @staticmethod
    def _check_rules(rules: list[ClaimValidationRule] | list[UserValidationRule], act: dict[str, Any] | None,
                     what: str) -> None:
        for r in rules:
            if r.program is None:
                continue
            try:
                ok = r.program.evaluate(act or {})
            except cel.CELEvalError as e:
                raise AuthenticationFailed(f"{what}: {e}") from None
            if not isinstance(ok, bool):
                raise AuthenticationFailed(f"{what}: validation expression must return a boolean")
            if not ok:
                raise AuthenticationFailed(f"{what}: validation expression '{r.expression}' failed: {r.message}")
