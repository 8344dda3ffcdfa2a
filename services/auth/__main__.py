"""python -m services.auth: authentication and authorization over gRPC (apiary.Auth)."""
from __future__ import annotations

from services.common import loading

if __name__ == "__main__":  # run as the program (python -m), not imported by tests, tools or the compact host
    loading.start()  # before the other imports: the cyclic collector rests while they load

import argparse
import asyncio
import logging

from apiary_pb import auth_pb2_grpc as agrpc
from apiary_pb import registry_pb2_grpc as rgrpc
from services.apiserver import kubeconfig as kubeconfigs
from services.apiserver.fielderrors import ConfigError, FieldErrors
from services.common import config, duration, runtime

from .authenticators import Authenticator
from .authenticators import Union as AuthenticatorUnion
from . import authnconfig, authzconfig
from .authenticators.anonymous import AnonymousAuthenticator
from .authenticators.jwtconfig import ALGORITHMS, validate_jwt
from .authenticators.serviceaccount import ServiceAccountAuthenticator
from .authenticators.webhook import REQUEST_TIMEOUT as WEBHOOK_TIMEOUT
from .authenticators.webhook import WebhookTokenAuthenticator
from .authenticators.tokenfile import TokenFileAuthenticator, TokenFileError
from .authenticators.x509 import X509Authenticator
from .authorizers import Authorizer
from .authorizers import Union as AuthorizerUnion
from .authorizers.modes import RBACAuthorizer, parse_modes
from .authorizers.privileged import PrivilegedGroupAuthorizer
from .authorizers.rbac import RBACIndex
from .authnconfig import JWTAuthenticators
from .authorizers.webhook import WebhookAuthorizer, WebhookSettings
from .authzconfig import AuthorizationConfigWatcher, AuthorizerChain
from .escalation import EscalationChecker
from .openidmetadata import OpenIDMetadata
from .policy import AggregationController, PolicyInformers, reconcile_bootstrap
from .reviews import Reviewer
from .server import AuthServicer
from .webhookclient import WebhookClient
from .serviceaccount import DEFAULT_ISSUER, ServiceAccountLookup, TokenIssuer, load_private_key, load_public_keys

log = logging.getLogger("services.auth")

# The proxy caches successful token authentications this long (kube's
# TokenSuccessCacheTTL, 10 s); see services/proxy/filters/authn.py.
TOKEN_SUCCESS_CACHE_TTL = 10.0


def _bool(value: str) -> bool:
    v = value.strip().lower()
    if v in ("true", "1", "t", "yes"):
        return True
    if v in ("false", "0", "f", "no"):
        return False
    raise argparse.ArgumentTypeError(f"invalid boolean value {value!r}")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m services.auth", description=__doc__)
    config.add_common_flags(p, "auth")
    p.add_argument("--token-auth-file", default="",
                   help="static bearer tokens, CSV: token,user,uid[,\"group1,group2\"] (read at start)")
    p.add_argument("--anonymous-auth", type=_bool, nargs="?", const=True, default=None,
                   help="treat requests without credentials as system:anonymous (default true; exclusive with the "
                        "anonymous section of --authentication-config)")
    p.add_argument("--authorization-mode", default=None,
                   help="comma list of authorizers after system:masters: RBAC, Webhook, AlwaysAllow, AlwaysDeny "
                        "(Node is accepted and ignored); default RBAC")
    p.add_argument("--authorization-config", default="",
                   help="AuthorizationConfiguration file (apiserver.config.k8s.io/v1): the authorizer chain; "
                        "reloaded when it changes. Exclusive with --authorization-mode and --authorization-webhook-*")
    p.add_argument("--authorization-webhook-config-file", default="",
                   help="kubeconfig file of the authorization webhook (mode Webhook)")
    p.add_argument("--authorization-webhook-version", default=None, choices=("v1", "v1beta1"),
                   help="authorization.k8s.io version of the SubjectAccessReview sent to the webhook (default v1beta1)")
    p.add_argument("--authorization-webhook-cache-authorized-ttl", type=duration.flag, default=None,
                   help="how long allowed answers of the webhook are cached (default 5m0s)")
    p.add_argument("--authorization-webhook-cache-unauthorized-ttl", type=duration.flag, default=None,
                   help="how long denied answers of the webhook are cached (default 30s)")
    p.add_argument("--service-account-signing-key-file", default="",
                   help="RSA private key (PEM) that signs ServiceAccount tokens (TokenRequest)")
    p.add_argument("--service-account-key-file", action="append", default=[],
                   help="PEM public (or private) keys that verify ServiceAccount tokens; repeatable "
                        "(default: the signing key's public half)")
    p.add_argument("--service-account-issuer", action="append", default=[],
                   help=f"issuer (iss) of ServiceAccount tokens; the first signs, all are accepted "
                        f"(default {DEFAULT_ISSUER})")
    p.add_argument("--service-account-jwks-uri", default="",
                   help="jwks_uri of the issuer discovery document (default: the serving proxy's address "
                        "with /openid/v1/jwks)")
    p.add_argument("--api-audiences", default="",
                   help="comma list of audiences the API accepts (default: the first issuer)")
    p.add_argument("--authentication-config", default="",
                   help="AuthenticationConfiguration file (apiserver.config.k8s.io/v1 or v1beta1): JWT "
                        "authenticators; reloaded when it changes. Exclusive with the --oidc-* flags")
    p.add_argument("--authentication-token-webhook-config-file", default="",
                   help="kubeconfig file of the token authentication webhook (TokenReview)")
    p.add_argument("--authentication-token-webhook-version", default="v1beta1", choices=("v1", "v1beta1"),
                   help="authentication.k8s.io version of the TokenReview sent to the webhook (default v1beta1)")
    p.add_argument("--authentication-token-webhook-cache-ttl", type=duration.flag, default=120.0,
                   help="how long the webhook's answers are cached (default 2m0s)")
    p.add_argument("--oidc-issuer-url", default="", help="legacy: URL of the OpenID issuer (https)")
    p.add_argument("--oidc-client-id", default="", help="legacy: the client ID (audience) tokens must carry")
    p.add_argument("--oidc-username-claim", default="sub", help="legacy: the claim naming the user (default sub)")
    p.add_argument("--oidc-username-prefix", default=None,
                   help="legacy: prefix of usernames (default '<issuer>#' unless the claim is email; '-' for none)")
    p.add_argument("--oidc-groups-claim", default="", help="legacy: the claim holding the user's groups")
    p.add_argument("--oidc-groups-prefix", default="", help="legacy: prefix of group names")
    p.add_argument("--oidc-required-claim", action="append", default=[],
                   help="legacy: key=value a token's claims must hold; repeatable, or comma separated")
    p.add_argument("--oidc-ca-file", default="", help="legacy: CA bundle (PEM) of the issuer's serving certificate")
    p.add_argument("--oidc-signing-algs", default="RS256",
                   help="legacy: comma list of accepted signing algorithms (default RS256)")
    return p.parse_args(argv)


def build(args: argparse.Namespace, registry: rgrpc.RegistryStub | None = None) -> AuthServicer:
    """The authenticator and authorizer chains, in kube's order. Raises SystemExit on bad flags.

    Without a registry (unit tests) the RBAC index stays as the caller fills it and ServiceAccount
    tokens cannot be checked against their accounts.
    """
    issuers = args.service_account_issuer or [DEFAULT_ISSUER]
    api_audiences = [a.strip() for a in args.api_audiences.split(",") if a.strip()] or [issuers[0]]
    authenticators: list[Authenticator] = [X509Authenticator()]
    token_file = None
    if args.token_auth_file:
        try:
            token_file = TokenFileAuthenticator.from_file(args.token_auth_file)
        except (OSError, TokenFileError) as e:
            raise SystemExit(f"--token-auth-file: {e}") from None
        authenticators.append(token_file)
    issuer = None
    sa_auth = None
    sa_lookup = None
    try:
        if args.service_account_signing_key_file:
            issuer = TokenIssuer(load_private_key(args.service_account_signing_key_file), issuers[0],
                                 tuple(api_audiences))
        keys = [k for path in args.service_account_key_file for k in load_public_keys(path)]
    except (OSError, ValueError) as e:
        raise SystemExit(f"service account keys: {e}") from None
    if issuer is not None and not keys:
        keys = [issuer.private_key.public_key()]
    if keys:
        sa_lookup = ServiceAccountLookup(registry) if registry is not None else None
        sa_auth = ServiceAccountAuthenticator(keys, issuers, api_audiences,
                                              sa_lookup.get if sa_lookup is not None else _no_accounts)
        authenticators.append(sa_auth)
    openid = None
    if keys:
        try:
            openid = OpenIDMetadata(issuers[0], keys, args.service_account_jwks_uri)
        except ValueError as e:  # kube logs it and leaves the discovery endpoints out
            log.warning("service account issuer discovery is not served: %s", e)
    jwt_auth = _jwt_authenticators(args, frozenset(issuers))
    if jwt_auth is not None:
        authenticators.append(jwt_auth)
    webhook = None
    if args.authentication_token_webhook_config_file:
        try:
            conn = kubeconfigs.load(args.authentication_token_webhook_config_file)
        except ConfigError as e:
            raise SystemExit(f"--authentication-token-webhook-config-file: {e}") from None
        ttl = args.authentication_token_webhook_cache_ttl
        if 0 < ttl < TOKEN_SUCCESS_CACHE_TTL:
            log.warning("the webhook cache ttl of %gs is shorter than the overall cache ttl of %gs for successful "
                        "token authentication attempts.", ttl, TOKEN_SUCCESS_CACHE_TTL)
        webhook = WebhookTokenAuthenticator(WebhookClient(conn, WEBHOOK_TIMEOUT),
                                            args.authentication_token_webhook_version, api_audiences,
                                            args.authentication_token_webhook_cache_ttl)
        authenticators.append(webhook)
    anonymous_default = args.anonymous_auth is not False
    if jwt_auth is not None and jwt_auth.anonymous is not None:
        if args.anonymous_auth is not None:
            raise SystemExit("anonymous: Forbidden: --anonymous-auth flag cannot be set when anonymous field is "
                             "configured in authentication configuration file")
    fallback = AnonymousAuthenticator(jwt_auth.current_anonymous if jwt_auth is not None else None,
                                      anonymous_default)
    index = RBACIndex()
    authorizers, authz_data = _authorizers(args, index)
    authorizer = AuthorizerUnion(authorizers)
    servicer = AuthServicer(AuthenticatorUnion(authenticators, fallback), authorizer,
                            Reviewer(authorizer, [a for a in (token_file, jwt_auth) if a is not None], sa_auth,
                                     api_audiences, webhook), issuer,
                            EscalationChecker(authorizer, index), index=index,
                            rbac_enabled=bool(args.authorization_config)
                            or any(isinstance(m, RBACAuthorizer) for m in authorizers), sa_lookup=sa_lookup)
    servicer.jwt = jwt_auth
    servicer.openid = openid
    if args.authorization_config:
        servicer.authz_watcher = AuthorizationConfigWatcher(args.authorization_config, authz_data,
                                                            AuthorizerChain(index), authorizer)
    return servicer


def _authorizers(args: argparse.Namespace, index: RBACIndex) -> tuple[list[Authorizer], bytes]:
    legacy_webhook = [args.authorization_webhook_config_file, args.authorization_webhook_version,
                      args.authorization_webhook_cache_authorized_ttl,
                      args.authorization_webhook_cache_unauthorized_ttl]
    if args.authorization_config:
        if args.authorization_mode is not None or any(v is not None and v != "" for v in legacy_webhook):
            raise SystemExit("--authorization-config can not be specified when --authorization-mode or "
                             "--authorization-webhook-* flags are defined")
        try:
            return authzconfig.load(args.authorization_config, AuthorizerChain(index))
        except ConfigError as e:
            raise SystemExit(f"invalid authorization config: {e}") from None
    mode = args.authorization_mode if args.authorization_mode is not None else "RBAC"
    names = [m.strip() for m in mode.split(",") if m.strip()]
    try:
        modes = parse_modes(",".join(n for n in names if n != "Webhook") if names else "", index)
    except ValueError as e:
        raise SystemExit(f"--authorization-mode: {e}") from None
    if "Webhook" not in names:
        if args.authorization_webhook_config_file:
            raise SystemExit("cannot specify --authorization-webhook-config-file without mode Webhook")
        return [PrivilegedGroupAuthorizer(), *modes], b""
    if not args.authorization_webhook_config_file:
        raise SystemExit("authorization-mode Webhook's authorization config file not passed")
    try:
        conn = kubeconfigs.load(args.authorization_webhook_config_file)
    except ConfigError as e:
        raise SystemExit(f"--authorization-webhook-config-file: {e}") from None
    # kube's legacy webhook: failures are NoOpinion, answers cached 5m (allowed) / 30s (denied)
    settings = WebhookSettings("webhook", WEBHOOK_TIMEOUT, args.authorization_webhook_version or "v1beta1",
                               _or(args.authorization_webhook_cache_authorized_ttl, 300.0),
                               _or(args.authorization_webhook_cache_unauthorized_ttl, 30.0), "NoOpinion")
    hook = WebhookAuthorizer(settings, WebhookClient(conn, WEBHOOK_TIMEOUT))
    chain: list[Authorizer] = []
    rest = iter(modes)
    for n in names:
        if n == "Webhook":
            chain.append(hook)
        elif n != "Node":
            chain.append(next(rest))
    return [PrivilegedGroupAuthorizer(), *chain], b""


def _or(value: float | None, default: float) -> float:
    return default if value is None else value


def _jwt_authenticators(args: argparse.Namespace, disallowed: frozenset[str]) -> JWTAuthenticators | None:
    oidc_flags = [f for f in ("oidc_issuer_url", "oidc_client_id", "oidc_groups_claim", "oidc_groups_prefix",
                              "oidc_ca_file") if getattr(args, f)]
    if args.oidc_username_prefix is not None or args.oidc_required_claim or args.oidc_username_claim != "sub" \
            or args.oidc_signing_algs != "RS256":
        oidc_flags.append("oidc")
    if args.authentication_config:
        if oidc_flags:
            raise SystemExit("authentication-config file and oidc-* flags are mutually exclusive")
        try:
            configs, anonymous, data = authnconfig.load(args.authentication_config, disallowed)
        except ConfigError as e:
            raise SystemExit(str(e)) from None
        return JWTAuthenticators(configs, args.authentication_config, data, disallowed, anonymous)
    if not args.oidc_issuer_url:
        if oidc_flags:
            raise SystemExit("oidc-issuer-url and oidc-client-id must be specified together when any oidc-* "
                             "flags are set")
        return None
    if not args.oidc_client_id:
        raise SystemExit("oidc-issuer-url and oidc-client-id must be specified together when any oidc-* flags are set")
    required: dict[str, str] = {}
    for item in args.oidc_required_claim:
        for pair in item.split(","):
            if pair.strip():
                k, sep, v = pair.partition("=")
                if not sep:
                    raise SystemExit(f"invalid argument {item!r} for --oidc-required-claim: "
                                     f"{pair} must be formatted as key=value")
                required[k.strip()] = v.strip()
    algs = [a.strip() for a in args.oidc_signing_algs.split(",") if a.strip()]
    for a in algs:
        if a not in ALGORITHMS:
            raise SystemExit(f"oidc-signing-algs: unsupported signing alg: {a}")
    try:
        config = authnconfig.legacy_oidc_config(args.oidc_issuer_url, args.oidc_client_id, args.oidc_username_claim,
                                                args.oidc_username_prefix, args.oidc_groups_claim,
                                                args.oidc_groups_prefix, required, args.oidc_ca_file, algs)
    except ConfigError as e:
        raise SystemExit(str(e)) from None
    errs = FieldErrors()
    validate_jwt(config, "jwt[0]", errs, disallowed)
    if errs:
        raise SystemExit(f"invalid authentication configuration: {errs}")
    return JWTAuthenticators([config])


async def _no_accounts(namespace: str, name: str) -> None:
    return None


async def assemble(service: runtime.Service) -> str:
    args = service.args
    registry = rgrpc.RegistryStub(service.channel(args.registry_address))
    servicer = build(args, registry)
    agrpc.add_AuthServicer_to_server(servicer, service.grpc_server())
    if servicer.rbac_enabled:
        policy = PolicyInformers(registry, servicer.index)
        aggregation = AggregationController(registry, policy.informers["clusterroles"])
        bootstrapped = asyncio.Event()

        async def bootstrap() -> None:
            await reconcile_bootstrap(registry)
            bootstrapped.set()

        async def informers_synced() -> bool:
            return policy.synced()

        async def bootstrap_done() -> bool:
            return bootstrapped.is_set()

        servicer.rbac_synced = policy.synced
        service.check("rbac-informers-synced", informers_synced)
        service.check("poststarthook/rbac/bootstrap-roles", bootstrap_done)
        service.component(policy.start, policy.stop)
        service.component(aggregation.start, aggregation.stop)
        service.task(bootstrap, "rbac-bootstrap")
    for part in (servicer.sa_lookup, servicer.jwt, servicer.authz_watcher):
        if part is not None:
            service.component(part.start, part.stop)
    modes = ", ".join(a.name for a in servicer.authorizer.authorizers)
    return f"gRPC on {args.bind_address}:{args.grpc_port}; authorization modes {modes}"


if __name__ == "__main__":
    _args = parse_args()
    build(_args)  # fail fast on bad flags, before anything listens
    runtime.main("auth", _args, assemble)
