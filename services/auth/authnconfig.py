"""--authentication-config (AuthenticationConfiguration) and the legacy --oidc-* flags.

The file is read at start (a bad file stops the service with kube's validation messages) and then
watched (configfile.ReloadedFile): every second its content is compared with the last one read, and a changed file
is validated and swapped in. A file that no longer validates keeps the last good configuration; the
failure is logged and counted in kube's apiserver_authentication_config_controller_* metrics.
Issuers whose connection (url, discoveryURL, certificateAuthority) is unchanged keep their keys.
"""
from __future__ import annotations

from typing import Any

from apiary_pb import auth_pb2 as apb
from apiary_pb import envelope_pb2 as pb
from services.apiserver.configdecode import Document, Struct, UnknownKind, read_yaml
from services.apiserver.configdecode import decode as decode_as
from services.apiserver.fielderrors import ConfigError, FieldErrors

from .authenticators.anonymous import AnonymousConfig
from .authenticators.jwt import JWTAuthenticator
from .authenticators.jwtconfig import JWTAuthenticatorSpec, JWTConfig, parse_jwt, validate_jwt
from .configfile import ReloadedFile

MAX_JWT = 64


class AnonymousAuthCondition(Struct):
    path: str = ""


class AnonymousAuthConfig(Struct):
    enabled: bool = False
    conditions: list[AnonymousAuthCondition] = []


class AuthenticationConfiguration(Document):
    jwt: list[JWTAuthenticatorSpec] = []
    anonymous: AnonymousAuthConfig | None = None


# kube decodes the file strictly (--authentication-config), in any of these versions.
KINDS = {(f"apiserver.config.k8s.io/{v}", "AuthenticationConfiguration"): AuthenticationConfiguration
         for v in ("v1", "v1beta1", "v1alpha1")}


def decode(data: bytes, path: str) -> AuthenticationConfiguration:
    if not data:
        raise ConfigError("empty config data")
    try:
        obj = read_yaml(data)
    except ConfigError as e:
        raise ConfigError(f"failed to decode authentication configuration file {path!r}: {e}") from None
    if isinstance(obj, dict) and not obj.get("kind") and not obj.get("apiVersion"):
        raise ConfigError("Object 'Kind' is missing in authentication configuration")
    try:
        return decode_as(obj, KINDS)
    except UnknownKind:
        raise
    except ConfigError as e:
        raise ConfigError(f"failed to decode authentication configuration file {path!r}: {e}") from None


def parse(config: AuthenticationConfiguration, disallowed_issuers: frozenset[str] = frozenset()) -> list[JWTConfig]:
    """The validated jwt authenticators, their CEL compiled; ConfigError with kube's messages."""
    return parse_all(config, disallowed_issuers)[0]


def parse_all(config: AuthenticationConfiguration, disallowed_issuers: frozenset[str] = frozenset()
              ) -> tuple[list[JWTConfig], AnonymousConfig | None]:
    """The jwt authenticators and the anonymous section (None when absent)."""
    errs = FieldErrors()
    if len(config.jwt) > MAX_JWT:
        errs.too_many("jwt", len(config.jwt), MAX_JWT)
        raise ConfigError(str(errs))
    configs = [parse_jwt(spec) for spec in config.jwt]
    seen, seen_discovery = set(), set()
    for i, c in enumerate(configs):
        validate_jwt(c, f"jwt[{i}]", errs, disallowed_issuers)
        if c.url in seen:
            errs.duplicate(f"jwt[{i}].issuer.url", c.url)
        seen.add(c.url)
        if c.discovery_url:
            if c.discovery_url in seen_discovery:
                errs.duplicate(f"jwt[{i}].issuer.discoveryURL", c.discovery_url)
            seen_discovery.add(c.discovery_url)
    anon: AnonymousConfig | None = None
    if (anonymous := config.anonymous) is not None:
        paths: list[str] = []
        for i, condition in enumerate(anonymous.conditions):
            if not condition.path:
                errs.required(f"anonymous.conditions[{i}].path")
            elif condition.path in paths:
                errs.duplicate(f"anonymous.conditions[{i}].path", condition.path)
            else:
                paths.append(condition.path)
        if not anonymous.enabled and anonymous.conditions:
            errs.invalid("anonymous.conditions", "", "enabled should be set to true when conditions are defined")
        anon = AnonymousConfig(anonymous.enabled, frozenset(paths))
    if errs:
        raise ConfigError(str(errs))
    return configs, anon


def load(path: str, disallowed_issuers: frozenset[str] = frozenset()) \
        -> tuple[list[JWTConfig], AnonymousConfig | None, bytes]:
    """Read and validate the file; ConfigError with the text kube-apiserver stops with."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise ConfigError(f"failed to load authentication configuration from file \"{path}\": open {path}: "
                          f"{(e.strerror or str(e)).lower()}") from None
    try:
        obj = decode(data, path)
    except ConfigError as e:
        raise ConfigError(f"failed to load authentication configuration from file \"{path}\": {e}") from None
    try:
        configs, anonymous = parse_all(obj, disallowed_issuers)
    except ConfigError as e:
        raise ConfigError(f"invalid authentication configuration: {e}") from None
    return configs, anonymous, data


def legacy_oidc_config(issuer_url: str, client_id: str, username_claim: str, username_prefix: str | None,
                       groups_claim: str, groups_prefix: str, required_claims: dict[str, str], ca_file: str,
                       signing_algs: list[str]) -> JWTConfig:
    """The --oidc-* flags as the one JWT authenticator kube builds from them."""
    raw: dict[str, Any] = {"issuer": {"url": issuer_url, "audiences": [client_id]}}
    if ca_file:
        try:
            with open(ca_file, encoding="utf-8") as f:
                raw["issuer"]["certificateAuthority"] = f.read()
        except OSError as e:
            raise ConfigError(f"--oidc-ca-file: {e.strerror}: {ca_file}") from None
    if not username_prefix:
        # kube: an unset (or empty) prefix means "<issuer>#" unless the claim is email; "-" disables prefixing.
        username_prefix = "" if username_claim == "email" else f"{issuer_url}#"
    elif username_prefix == "-":
        username_prefix = ""
    raw["claimMappings"] = {"username": {"claim": username_claim, "prefix": username_prefix}}
    if groups_claim:
        raw["claimMappings"]["groups"] = {"claim": groups_claim, "prefix": groups_prefix}
    raw["claimValidationRules"] = [{"claim": k, "requiredValue": v} for k, v in sorted(required_claims.items())]
    c = parse_jwt(JWTAuthenticatorSpec.model_validate(raw))
    c.algorithms = tuple(signing_algs)
    return c


class JWTAuthenticators:
    """The current JWT authenticators, in file order; a token no issuer claims is not ours (None)."""
    name = "jwt"  # its span's name (services/auth/authenticators/__init__.py)

    def __init__(self, configs: list[JWTConfig], path: str = "", data: bytes = b"",
                 disallowed_issuers: frozenset[str] = frozenset(), anonymous: AnonymousConfig | None = None) -> None:
        self.path = path
        self.anonymous = anonymous
        self.disallowed = disallowed_issuers
        self.file = ReloadedFile("authentication", path, data, self.reload)
        self.authenticators: list[JWTAuthenticator] = [JWTAuthenticator(c) for c in configs]

    def current_anonymous(self) -> AnonymousConfig | None:
        return self.anonymous

    async def authenticate(self, req: apb.AuthenticateRequest) -> pb.UserInfo | None:
        if not req.token:
            return None
        return await self.authenticate_token(req.token)

    async def authenticate_token(self, token: str) -> pb.UserInfo | None:
        for a in self.authenticators:
            user = await a.authenticate_token(token)
            if user is not None:
                return user
        return None

    def start(self) -> None:
        for a in self.authenticators:
            a.keys.start()
        self.file.start()

    async def stop(self) -> None:
        await self.file.stop()
        for a in self.authenticators:
            await a.keys.stop()

    async def reload(self, data: bytes) -> bool:
        """Swap in a changed file; False (and the old configuration kept) when it does not validate."""
        try:
            configs, anonymous = parse_all(decode(data, self.path), self.disallowed)
            if anonymous != self.anonymous:
                raise ConfigError("anonymous: Forbidden: changed from initial configuration file")
        except ConfigError as e:
            return self.file.failed(data, e)
        old = {a.config.connection_key(): a.keys for a in self.authenticators}
        fresh: list[JWTAuthenticator] = []
        for c in configs:
            keys = old.pop(c.connection_key(), None)
            if keys is not None:
                keys.config = c
            a = JWTAuthenticator(c, keys)
            a.keys.start()
            fresh.append(a)
        self.authenticators = fresh
        self.anonymous = anonymous
        for keys in old.values():
            await keys.stop()
        return self.file.loaded(data, f"{len(fresh)} jwt authenticator(s)")
