"""python -m services.auth: authentication and authorization over gRPC (apiary.Auth)."""
from __future__ import annotations

import argparse
import asyncio
import logging

from apiary_pb import auth_pb2_grpc as agrpc
from apiary_pb import registry_pb2_grpc as rgrpc
from services.common import config, grpcutil, health, runtime

from .authenticators import Authenticator
from .authenticators import Union as AuthenticatorUnion
from .authenticators.anonymous import AnonymousAuthenticator
from .authenticators.serviceaccount import ServiceAccountAuthenticator
from .authenticators.tokenfile import TokenFileAuthenticator, TokenFileError
from .authenticators.x509 import X509Authenticator
from .authorizers import Authorizer
from .authorizers import Union as AuthorizerUnion
from .authorizers.modes import RBACAuthorizer, parse_modes
from .authorizers.privileged import PrivilegedGroupAuthorizer
from .authorizers.rbac import RBACIndex
from .escalation import EscalationChecker
from .policy import AggregationController, PolicyInformers, reconcile_bootstrap
from .reviews import Reviewer
from .server import AuthServicer
from .serviceaccount import DEFAULT_ISSUER, ServiceAccountLookup, TokenIssuer, load_private_key, load_public_keys

log = logging.getLogger("services.auth")


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
    p.add_argument("--anonymous-auth", type=_bool, nargs="?", const=True, default=True,
                   help="treat requests without credentials as system:anonymous (default true)")
    p.add_argument("--authorization-mode", default="RBAC",
                   help="comma list of authorizers after system:masters: RBAC, AlwaysAllow, AlwaysDeny "
                        "(Node is accepted and ignored)")
    p.add_argument("--service-account-signing-key-file", default="",
                   help="RSA private key (PEM) that signs ServiceAccount tokens (TokenRequest)")
    p.add_argument("--service-account-key-file", action="append", default=[],
                   help="PEM public (or private) keys that verify ServiceAccount tokens; repeatable "
                        "(default: the signing key's public half)")
    p.add_argument("--service-account-issuer", action="append", default=[],
                   help=f"issuer (iss) of ServiceAccount tokens; the first signs, all are accepted "
                        f"(default {DEFAULT_ISSUER})")
    p.add_argument("--api-audiences", default="",
                   help="comma list of audiences the API accepts (default: the first issuer)")
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
    fallback = AnonymousAuthenticator() if args.anonymous_auth else None
    index = RBACIndex()
    try:
        modes = parse_modes(args.authorization_mode, index)
    except ValueError as e:
        raise SystemExit(f"--authorization-mode: {e}") from None
    authorizers: list[Authorizer] = [PrivilegedGroupAuthorizer(), *modes]
    authorizer = AuthorizerUnion(authorizers)
    servicer = AuthServicer(AuthenticatorUnion(authenticators, fallback), authorizer,
                            Reviewer(authorizer, token_file, sa_auth, api_audiences), issuer,
                            EscalationChecker(authorizer, index), index=index,
                            rbac_enabled=any(isinstance(m, RBACAuthorizer) for m in modes), sa_lookup=sa_lookup)
    return servicer


async def _no_accounts(namespace: str, name: str) -> None:
    return None


async def main(args: argparse.Namespace, stop: asyncio.Event) -> None:
    tls = config.internal_tls(args)
    channel = grpcutil.make_channel(tls, args.registry_address)
    registry = rgrpc.RegistryStub(channel)
    servicer = build(args, registry)
    server = grpcutil.make_server(tls, f"{args.bind_address}:{args.grpc_port}")
    agrpc.add_AuthServicer_to_server(servicer, server)
    checks: dict[str, health.ReadyCheck] = {}
    tasks: list[asyncio.Task[None]] = []
    policy = aggregation = None
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
        checks["rbac-informers-synced"] = informers_synced
        checks["poststarthook/rbac/bootstrap-roles"] = bootstrap_done
        policy.start()
        aggregation.start()
        tasks.append(asyncio.create_task(bootstrap(), name="rbac-bootstrap"))
    if servicer.sa_lookup is not None:
        servicer.sa_lookup.start()
    hs = health.HealthServer(args.bind_address, args.health_port, checks)
    await server.start()
    await hs.start()
    log.info("auth serving gRPC on %s:%d, health on %d; authorization modes %s",
             args.bind_address, args.grpc_port, args.health_port, args.authorization_mode)
    try:
        await stop.wait()
    finally:
        for t in tasks:
            t.cancel()
        if aggregation is not None:
            await aggregation.stop()
        if policy is not None:
            await policy.stop()
        if servicer.sa_lookup is not None:
            await servicer.sa_lookup.stop()
        await hs.stop()
        await server.stop(grace=2)
        await channel.close()


if __name__ == "__main__":
    _args = parse_args()
    runtime.setup_logging("auth", _args.v)
    build(_args)  # fail fast on bad flags, before anything listens
    runtime.run(lambda stop: main(_args, stop))
