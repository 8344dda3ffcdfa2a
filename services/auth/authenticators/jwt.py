"""JWT authenticators: kube's structured authentication configuration (AuthenticationConfiguration.jwt).

One JWTAuthenticator per configured issuer. A token whose (unverified) `iss` is not the issuer's
URL is not ours (None: the union asks the next authenticator); a token of ours that fails any check
is a 401 with kube's message ("oidc: verify token: ...").

Keys come from the issuer's discovery document (`<url>/.well-known/openid-configuration`, or
discoveryURL) and its jwks_uri, over TLS verified with certificateAuthority (else the system roots).
They are fetched at start (retried in the background until they arrive), again when a token names a
kid the set does not hold (at most once per KEY_REFRESH_MIN_INTERVAL), and every KEY_REFRESH_INTERVAL.

Times follow go-oidc as kube uses it: exp is checked without leeway, nbf with 5 minutes of leeway,
iat is not checked.
"""
from __future__ import annotations

import asyncio
import hashlib
import logging
import re
import socket
import ssl
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any
from urllib.parse import urlsplit

import httpx
import jwt
from cryptography import x509
from prometheus_client import Gauge, Histogram

from apiary_pb import auth_pb2 as apb
from apiary_pb import envelope_pb2 as pb
from services.apiserver.fielderrors import FieldErrors
from services.common.identity import user_pb

from services.common import cel
from . import AuthenticationFailed

log = logging.getLogger(__name__)

# kube's allowed signing algorithms for JWT authenticators (asymmetric only).
ALGORITHMS = ("RS256", "RS384", "RS512", "ES256", "ES384", "ES512", "PS256", "PS384", "PS512")
NBF_LEEWAY = 300.0
KEY_REFRESH_INTERVAL = 300.0
KEY_REFRESH_MIN_INTERVAL = 1.0
FETCH_TIMEOUT = 5.0
INIT_RETRY = 2.0

JWT_LATENCY = Histogram(
    "apiserver_authentication_jwt_authenticator_latency_seconds",
    "Latency of jwt authentication operations in seconds. This is the time spent authenticating a token "
    "for cache miss only (i.e. when the token is not found in the cache).",
    ["result", "jwt_issuer_hash"],
    buckets=(0.001, 0.002, 0.004, 0.008, 0.016, 0.032, 0.064, 0.128, 0.256, 0.512, 1.024, 2.048, 4.096, 8.192))


JWKS_FETCH_TIME = Gauge(
    "apiserver_authentication_jwt_authenticator_jwks_fetch_last_timestamp_seconds",
    "Timestamp of the last successful or failed JWKS fetch split by result, api server identity and jwt issuer "
    "for the JWT authenticator.", ["result", "jwt_issuer_hash", "apiserver_id_hash"])
JWKS_KEY_SET = Gauge(
    "apiserver_authentication_jwt_authenticator_jwks_fetch_last_key_set_info",
    "Information about the last JWKS fetched by the JWT authenticator with hash as label, split by api server "
    "identity and jwt issuer.", ["jwt_issuer_hash", "apiserver_id_hash", "hash"])
APISERVER_ID_HASH = "sha256:" + hashlib.sha256(f"apiserver-{socket.gethostname()}".encode()).hexdigest()


def issuer_hash(url: str) -> str:
    return "sha256:" + hashlib.sha256(url.encode()).hexdigest()


# ---------------------------------------------------------------------------------------------------
# Configuration (apiserver.config.k8s.io/v1 JWTAuthenticator)


@dataclass
class ClaimOrExpression:
    claim: str = ""
    prefix: str | None = None
    expression: str = ""
    program: cel.Program | None = None


@dataclass
class ClaimValidationRule:
    claim: str = ""
    required_value: str = ""
    expression: str = ""
    message: str = ""
    program: cel.Program | None = None


@dataclass
class ExtraMapping:
    key: str
    value_expression: str
    program: cel.Program | None = None


@dataclass
class JWTConfig:
    url: str
    discovery_url: str = ""
    audiences: list[str] = field(default_factory=list)
    audience_match_policy: str = ""
    certificate_authority: str = ""
    username: ClaimOrExpression = field(default_factory=ClaimOrExpression)
    groups: ClaimOrExpression = field(default_factory=ClaimOrExpression)
    uid: ClaimOrExpression = field(default_factory=ClaimOrExpression)
    extra: list[ExtraMapping] = field(default_factory=list)
    claim_validation_rules: list[ClaimValidationRule] = field(default_factory=list)
    user_validation_rules: list[ClaimValidationRule] = field(default_factory=list)
    algorithms: tuple[str, ...] = ALGORITHMS

    def connection_key(self) -> tuple[str, str, str]:
        """What the fetched keys depend on: a reload keeps the keys of an unchanged issuer."""
        return self.url, self.discovery_url, self.certificate_authority


def _str(d: dict[str, Any], key: str) -> str:
    v = d.get(key)
    return v if isinstance(v, str) else ""


def parse_jwt(raw: Any) -> JWTConfig:
    raw = raw if isinstance(raw, dict) else {}
    issuer = raw.get("issuer") if isinstance(raw.get("issuer"), dict) else {}
    cm = raw.get("claimMappings") if isinstance(raw.get("claimMappings"), dict) else {}

    def coe(d: Any) -> ClaimOrExpression:
        d = d if isinstance(d, dict) else {}
        prefix = d.get("prefix")
        return ClaimOrExpression(_str(d, "claim"), prefix if isinstance(prefix, str) else None, _str(d, "expression"))

    auds = issuer.get("audiences") or []
    return JWTConfig(
        url=_str(issuer, "url"), discovery_url=_str(issuer, "discoveryURL"),
        audiences=[a if isinstance(a, str) else str(a) for a in auds] if isinstance(auds, list) else [],
        audience_match_policy=_str(issuer, "audienceMatchPolicy"),
        certificate_authority=_str(issuer, "certificateAuthority"),
        username=coe(cm.get("username")), groups=coe(cm.get("groups")), uid=coe(cm.get("uid")),
        extra=[ExtraMapping(_str(e, "key"), _str(e, "valueExpression"))
               for e in (cm.get("extra") or []) if isinstance(e, dict)],
        claim_validation_rules=[ClaimValidationRule(_str(r, "claim"), _str(r, "requiredValue"), _str(r, "expression"),
                                                    _str(r, "message"))
                                for r in (raw.get("claimValidationRules") or []) if isinstance(r, dict)],
        user_validation_rules=[ClaimValidationRule(expression=_str(r, "expression"), message=_str(r, "message"))
                               for r in (raw.get("userValidationRules") or []) if isinstance(r, dict)],
    )


_EMAIL = re.compile(r"claims\s*\.\s*email\b(?!_)|claims\s*\[\s*['\"]email['\"]\s*\]")
_EMAIL_VERIFIED = re.compile(r"claims\s*\.\s*email_verified\b|claims\s*\[\s*['\"]email_verified['\"]\s*\]")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def _compile(errs: FieldErrors, path: str, expression: str, variables: tuple[str, ...] = ("claims",)
             ) -> cel.Program | None:
    try:
        return cel.compile_expression(expression, variables)
    except cel.CELCompileError as e:
        errs.invalid(path, expression, f"compilation failed: {e}")
        return None


def _validate_url(errs: FieldErrors, path: str, url: str, disallowed: frozenset[str]) -> None:
    if url in disallowed:
        errs.invalid(path, url, f"URL must not overlap with disallowed issuers: [{' '.join(sorted(disallowed))}]")
    try:
        u = urlsplit(url)
    except ValueError as e:
        errs.invalid(path, url, str(e))
        return
    if u.scheme != "https":
        errs.invalid(path, url, "URL scheme must be https")
    if u.username is not None or u.password is not None:
        errs.invalid(path, url, "URL must not contain a username or password")
    if u.query:
        errs.invalid(path, url, "URL must not contain a query")
    if u.fragment:
        errs.invalid(path, url, "URL must not contain a fragment")


def validate_jwt(c: JWTConfig, path: str, errs: FieldErrors, disallowed: frozenset[str] = frozenset()) -> None:
    """kube's validateJWTAuthenticator; compiles the CEL expressions into c as it goes."""
    ip = f"{path}.issuer"
    if not c.url:
        errs.required(f"{ip}.url")
    else:
        _validate_url(errs, f"{ip}.url", c.url, disallowed)
    if c.discovery_url:
        if c.url and c.url.rstrip("/") == c.discovery_url.rstrip("/"):
            errs.invalid(f"{ip}.discoveryURL", c.discovery_url, "discoveryURL must be different from URL")
        _validate_url(errs, f"{ip}.discoveryURL", c.discovery_url, frozenset())
    if not c.audiences:
        errs.required(f"{ip}.audiences", f"at least one {ip}.audiences is required")
    else:
        seen: set[str] = set()
        for i, a in enumerate(c.audiences):
            if not a:
                errs.required(f"{ip}.audiences[{i}]")
            if a in seen:
                errs.duplicate(f"{ip}.audiences[{i}]", a)
            seen.add(a)
        if len(c.audiences) > 1 and c.audience_match_policy != "MatchAny":
            errs.invalid(f"{ip}.audienceMatchPolicy", c.audience_match_policy,
                         "audienceMatchPolicy must be MatchAny for multiple audiences")
        if len(c.audiences) == 1 and c.audience_match_policy not in ("", "MatchAny"):
            errs.invalid(f"{ip}.audienceMatchPolicy", c.audience_match_policy,
                         "audienceMatchPolicy must be empty or MatchAny for single audience")
    if c.certificate_authority:
        try:
            x509.load_pem_x509_certificates(c.certificate_authority.encode())
        except ValueError:
            errs.invalid(f"{ip}.certificateAuthority", "<omitted>",
                         "data does not contain any valid RSA or ECDSA certificates")

    uses_email_verified = False
    rp = f"{path}.claimValidationRules"
    seen_claims: set[str] = set()
    seen_exprs: set[str] = set()
    for i, r in enumerate(c.claim_validation_rules):
        p = f"{rp}[{i}]"
        if r.claim and r.expression:
            errs.invalid(p, r.claim, "claim and expression can't both be set")
        elif not r.claim and not r.expression:
            errs.required(p, "claim or expression is required")
        elif r.claim:
            if r.message:
                errs.invalid(f"{p}.message", r.message, "may not be specified when claim is set")
            if r.claim in seen_claims:
                errs.duplicate(f"{p}.claim", r.claim)
            seen_claims.add(r.claim)
        else:
            if r.required_value:
                errs.invalid(f"{p}.requiredValue", r.required_value, "may not be specified when expression is set")
            if r.expression in seen_exprs:
                errs.duplicate(f"{p}.expression", r.expression)
                continue
            seen_exprs.add(r.expression)
            r.program = _compile(errs, f"{p}.expression", r.expression)
            uses_email_verified |= bool(_EMAIL_VERIFIED.search(r.expression))

    mp = f"{path}.claimMappings"
    for name, m, required in (("username", c.username, True), ("groups", c.groups, False)):
        p = f"{mp}.{name}"
        if m.expression and m.claim:
            errs.invalid(p, "", "claim and expression can't both be set")
        elif not m.expression and not m.claim and required:
            errs.required(p, "claim or expression is required")
        elif m.expression:
            if m.prefix is not None:
                errs.invalid(f"{p}.prefix", m.prefix, "may not be specified when expression is set")
            m.program = _compile(errs, f"{p}.expression", m.expression)
        elif m.claim and m.prefix is None:
            errs.required(f"{p}.prefix", "prefix is required when claim is set. It can be set to an empty string "
                                         "to disable prefixing")
    if c.uid.claim and c.uid.expression:
        errs.invalid(f"{mp}.uid", "", "claim and expression can't both be set")
    elif c.uid.expression:
        c.uid.program = _compile(errs, f"{mp}.uid.expression", c.uid.expression)
    seen_keys: set[str] = set()
    for i, e in enumerate(c.extra):
        p = f"{mp}.extra[{i}]"
        domain, slash, rest = e.key.partition("/")
        if not e.key:
            errs.required(f"{p}.key")
        elif not slash or not rest or not all(_DNS_LABEL.match(x) for x in domain.lower().split(".")) \
                or "." not in domain:
            errs.invalid(f"{p}.key", e.key, "must be a domain-prefixed path (such as \"acme.io/foo\")")
        if e.key != e.key.lower():
            errs.invalid(f"{p}.key", e.key, "must be lowercase")
        if domain in ("kubernetes.io", "k8s.io") or domain.endswith((".kubernetes.io", ".k8s.io")):
            errs.invalid(f"{p}.key", e.key,
                         "k8s.io, kubernetes.io and their subdomains are reserved for Kubernetes use")
        if e.key in seen_keys:
            errs.duplicate(f"{p}.key", e.key)
            continue
        seen_keys.add(e.key)
        if not e.value_expression:
            errs.required(f"{p}.valueExpression")
            continue
        e.program = _compile(errs, f"{p}.valueExpression", e.value_expression)
        uses_email_verified |= bool(_EMAIL_VERIFIED.search(e.value_expression))
    ue = c.username.expression
    if ue and _EMAIL.search(ue) and not (uses_email_verified or _EMAIL_VERIFIED.search(ue)):
        errs.invalid(f"{mp}.username.expression", ue,
                     "claims.email_verified must be used in claimMappings.username.expression or "
                     "claimMappings.extra[*].valueExpression or claimValidationRules[*].expression when "
                     "claims.email is used in claimMappings.username.expression")

    up = f"{path}.userValidationRules"
    seen_exprs = set()
    for i, r in enumerate(c.user_validation_rules):
        p = f"{up}[{i}]"
        if not r.expression:
            errs.required(f"{p}.expression")
            continue
        if r.expression in seen_exprs:
            errs.duplicate(f"{p}.expression", r.expression)
            continue
        seen_exprs.add(r.expression)
        r.program = _compile(errs, f"{p}.expression", r.expression, ("user",))


# ---------------------------------------------------------------------------------------------------
# Keys


class KeySet:
    """The issuer's signing keys, fetched from its discovery document and JWKS."""

    def __init__(self, config: JWTConfig) -> None:
        self.config = config
        self.keys: dict[str, Any] = {}       # kid -> PyJWK
        self.unnamed: list[Any] = []         # keys without a kid
        self.fetched_at = 0.0
        self.ready = asyncio.Event()
        self._lock = asyncio.Lock()
        self._client: httpx.AsyncClient | None = None
        self._task: asyncio.Task[None] | None = None
        self._jwks = b""

    def _http(self) -> httpx.AsyncClient:
        if self._client is None:
            if self.config.certificate_authority:
                ctx = ssl.create_default_context(cadata=self.config.certificate_authority)
            else:
                ctx = ssl.create_default_context()
            self._client = httpx.AsyncClient(verify=ctx, timeout=FETCH_TIMEOUT, trust_env=False)
        return self._client

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name=f"jwks {self.config.url}")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except (asyncio.CancelledError, Exception):
                pass
            self._task = None
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    async def _run(self) -> None:
        while True:
            try:
                await self.refresh()
                delay = KEY_REFRESH_INTERVAL
            except Exception as e:  # keep trying: an issuer down at start may come up later
                log.warning("jwt authenticator for issuer %s: fetching keys failed: %s", self.config.url, e)
                delay = INIT_RETRY if not self.ready.is_set() else KEY_REFRESH_INTERVAL
            await asyncio.sleep(delay)

    async def refresh(self, min_interval: float = 0.0) -> None:
        async with self._lock:
            if min_interval and time.monotonic() - self.fetched_at < min_interval:
                return
            issuer = issuer_hash(self.config.url)
            try:
                body = await self._fetch()
            except Exception:
                JWKS_FETCH_TIME.labels("failure", issuer, APISERVER_ID_HASH).set(time.time())
                raise
            JWKS_FETCH_TIME.labels("success", issuer, APISERVER_ID_HASH).set(time.time())
            if body != self._jwks:
                if self._jwks:
                    JWKS_KEY_SET.remove(issuer, APISERVER_ID_HASH, "sha256:" + hashlib.sha256(self._jwks).hexdigest())
                JWKS_KEY_SET.labels(issuer, APISERVER_ID_HASH, "sha256:" + hashlib.sha256(body).hexdigest()).set(1)
                self._jwks = body

    async def _fetch(self) -> bytes:
        """Fetch the discovery document and the JWKS, install the keys; the JWKS body."""
        client = self._http()
        c = self.config
        discovery = c.discovery_url or c.url.rstrip("/") + "/.well-known/openid-configuration"
        r = await client.get(discovery)
        if r.status_code != 200:
            raise ValueError(f"{r.status_code} {r.reason_phrase}: {r.text[:200]}")
        doc = r.json()
        if not c.discovery_url and doc.get("issuer") != c.url:
            raise ValueError(f"oidc: issuer did not match the issuer returned by provider, expected "
                             f"\"{c.url}\" got \"{doc.get('issuer')}\"")
        jwks_uri = doc.get("jwks_uri")
        if not isinstance(jwks_uri, str) or not jwks_uri:
            raise ValueError("oidc: discovery document has no jwks_uri")
        r = await client.get(jwks_uri)
        if r.status_code != 200:
            raise ValueError(f"oidc: get keys failed: {r.status_code} {r.reason_phrase}")
        keys: dict[str, Any] = {}
        unnamed: list[Any] = []
        for k in (r.json().get("keys") or []):
            if not isinstance(k, dict) or k.get("use", "sig") != "sig":
                continue
            try:
                jwk = jwt.PyJWK(k)
            except jwt.PyJWTError:
                continue
            if k.get("kid"):
                keys[str(k["kid"])] = jwk
            else:
                unnamed.append(jwk)
        self.keys, self.unnamed = keys, unnamed
        self.fetched_at = time.monotonic()
        self.ready.set()
        return r.content

    async def candidates(self, kid: str | None) -> list[Any]:
        if kid and kid not in self.keys:
            try:
                await self.refresh(KEY_REFRESH_MIN_INTERVAL)
            except Exception as e:
                log.warning("jwt authenticator for issuer %s: refreshing keys failed: %s", self.config.url, e)
        if kid:
            k = self.keys.get(kid)
            return [k] if k is not None else []
        return [*self.keys.values(), *self.unnamed]


# ---------------------------------------------------------------------------------------------------
# The authenticator


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
                if r.claim not in claims:
                    raise AuthenticationFailed(f"oidc: required claim {r.claim} not present in ID token")
                value = claims[r.claim]
                if not isinstance(value, str):
                    raise AuthenticationFailed(f"oidc: parse claim {r.claim}: json: cannot unmarshal "
                                               f"{type(value).__name__} into Go value of type string")
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
            try:
                value = m.program.evaluate(act or {})
            except cel.CELEvalError as e:
                raise AuthenticationFailed(f"oidc: error evaluating username claim expression: {e}") from None
            if not isinstance(value, str):
                raise AuthenticationFailed("oidc: error evaluating username claim expression: "
                                           "username claim expression must return a string")
            if not value:
                raise AuthenticationFailed("oidc: empty username via CEL expression is not allowed")
            return value
        if m.claim not in claims:
            raise AuthenticationFailed(f"oidc: parse username claims \"{m.claim}\": claim not present")
        value = claims[m.claim]
        if not isinstance(value, str):
            raise AuthenticationFailed(f"oidc: parse username claims \"{m.claim}\": json: cannot unmarshal "
                                       f"{type(value).__name__} into Go value of type string")
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
        if m.program is None:
            return ""
        try:
            value = m.program.evaluate(act or {})
        except cel.CELEvalError as e:
            raise AuthenticationFailed(f"oidc: error evaluating uid claim expression: {e}") from None
        if not isinstance(value, str):
            raise AuthenticationFailed("oidc: error evaluating uid claim expression: "
                                       "uid claim expression must return a string")
        return value

    @staticmethod
    def _check_rules(rules: list[ClaimValidationRule], act: dict[str, Any] | None, what: str) -> None:
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
