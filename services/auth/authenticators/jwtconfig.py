"""The jwt section of kube's AuthenticationConfiguration (apiserver.config.k8s.io/v1 JWTAuthenticator):
decoded into typed models (strictly, as kube decodes the file), read into JWTConfig and validated with kube's messages (validateJWTAuthenticator), its CEL claim mappings and validation
rules compiled as they are validated, so a token is never checked against an expression that did not
compile.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from cryptography import x509
from pydantic import PrivateAttr

from services.apiserver.configdecode import Field, Struct
from services.apiserver.fielderrors import FieldErrors
from services.common import cel

# kube's allowed signing algorithms for JWT authenticators (asymmetric only).
ALGORITHMS = ("RS256", "RS384", "RS512", "ES256", "ES384", "ES512", "PS256", "PS384", "PS512")


class Compiled(Struct):
    """An entry with a CEL expression: its program, compiled once validate_jwt has checked it (never
    read from the file)."""

    _program: cel.Program | None = PrivateAttr(None)

    @property
    def program(self) -> cel.Program | None:
        return self._program

    @program.setter
    def program(self, program: cel.Program | None) -> None:
        self._program = program


class PrefixedClaimOrExpression(Compiled):
    claim: str = ""
    prefix: str | None = None
    expression: str = ""


class ClaimOrExpression(Compiled):
    claim: str = ""
    expression: str = ""


class ExtraMapping(Compiled):
    key: str = ""
    value_expression: str = Field("", alias="valueExpression")


class ClaimMappings(Struct):
    username: PrefixedClaimOrExpression = Field(default_factory=PrefixedClaimOrExpression)
    groups: PrefixedClaimOrExpression = Field(default_factory=PrefixedClaimOrExpression)
    uid: ClaimOrExpression = Field(default_factory=ClaimOrExpression)
    extra: list[ExtraMapping] = []


class ClaimValidationRule(Compiled):
    claim: str = ""
    required_value: str = Field("", alias="requiredValue")
    expression: str = ""
    message: str = ""


class UserValidationRule(Compiled):
    expression: str = ""
    message: str = ""


class Issuer(Struct):
    url: str = ""
    discovery_url: str = Field("", alias="discoveryURL")
    certificate_authority: str = Field("", alias="certificateAuthority")
    audiences: list[str] = []
    audience_match_policy: str = Field("", alias="audienceMatchPolicy")


class JWTAuthenticatorSpec(Struct):
    """One entry of the file's jwt list (kube's JWTAuthenticator), as decoded."""

    issuer: Issuer = Field(default_factory=Issuer)
    claim_validation_rules: list[ClaimValidationRule] = Field([], alias="claimValidationRules")
    claim_mappings: ClaimMappings = Field(default_factory=ClaimMappings, alias="claimMappings")
    user_validation_rules: list[UserValidationRule] = Field([], alias="userValidationRules")


@dataclass
class JWTConfig:
    """The authenticator's configuration: the issuer's settings, and the claim mappings and rules as
    decoded (their programs set by validate_jwt)."""
    url: str
    discovery_url: str = ""
    audiences: list[str] = field(default_factory=list)
    audience_match_policy: str = ""
    certificate_authority: str = ""
    username: PrefixedClaimOrExpression = field(default_factory=PrefixedClaimOrExpression)
    groups: PrefixedClaimOrExpression = field(default_factory=PrefixedClaimOrExpression)
    uid: ClaimOrExpression = field(default_factory=ClaimOrExpression)
    extra: list[ExtraMapping] = field(default_factory=list)
    claim_validation_rules: list[ClaimValidationRule] = field(default_factory=list)
    user_validation_rules: list[UserValidationRule] = field(default_factory=list)
    algorithms: tuple[str, ...] = ALGORITHMS

    def connection_key(self) -> tuple[str, str, str]:
        """What the fetched keys depend on: a reload keeps the keys of an unchanged issuer."""
        return self.url, self.discovery_url, self.certificate_authority


def parse_jwt(spec: JWTAuthenticatorSpec) -> JWTConfig:
    """The authenticator's configuration, its expressions not compiled yet (validate_jwt compiles them)."""
    issuer, cm = spec.issuer, spec.claim_mappings
    return JWTConfig(
        url=issuer.url, discovery_url=issuer.discovery_url, audiences=list(issuer.audiences),
        audience_match_policy=issuer.audience_match_policy, certificate_authority=issuer.certificate_authority,
        username=cm.username, groups=cm.groups, uid=cm.uid, extra=list(cm.extra),
        claim_validation_rules=list(spec.claim_validation_rules),
        user_validation_rules=list(spec.user_validation_rules),
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
