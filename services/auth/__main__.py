"""python -m services.auth: authentication and authorization over gRPC (apiary.Auth)."""
from __future__ import annotations

import argparse
import asyncio
import logging

from apiary_pb import auth_pb2_grpc as agrpc
from services.common import config, grpcutil, health, runtime

from .authenticators import Authenticator
from .authenticators import Union as AuthenticatorUnion
from .authenticators.anonymous import AnonymousAuthenticator
from .authenticators.tokenfile import TokenFileAuthenticator, TokenFileError
from .authenticators.x509 import X509Authenticator
from .authorizers import Authorizer
from .authorizers import Union as AuthorizerUnion
from .authorizers.bootstrap import BootstrapPolicyAuthorizer
from .authorizers.modes import parse_modes
from .authorizers.privileged import PrivilegedGroupAuthorizer
from .server import AuthServicer

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
    p.add_argument("--authorization-mode", default="AlwaysDeny",
                   help="comma list of authorizers after the built-in ones: AlwaysAllow, AlwaysDeny")
    return p.parse_args(argv)


def build(args: argparse.Namespace) -> AuthServicer:
    """The authenticator and authorizer chains, in kube's order. Raises SystemExit on bad flags."""
    authenticators: list[Authenticator] = [X509Authenticator()]
    if args.token_auth_file:
        try:
            authenticators.append(TokenFileAuthenticator.from_file(args.token_auth_file))
        except (OSError, TokenFileError) as e:
            raise SystemExit(f"--token-auth-file: {e}") from None
    fallback = AnonymousAuthenticator() if args.anonymous_auth else None
    try:
        modes = parse_modes(args.authorization_mode)
    except ValueError as e:
        raise SystemExit(f"--authorization-mode: {e}") from None
    authorizers: list[Authorizer] = [PrivilegedGroupAuthorizer(), BootstrapPolicyAuthorizer(), *modes]
    return AuthServicer(AuthenticatorUnion(authenticators, fallback), AuthorizerUnion(authorizers))


async def main(args: argparse.Namespace, servicer: AuthServicer, stop: asyncio.Event) -> None:
    server = grpcutil.make_server(config.internal_tls(args), f"{args.bind_address}:{args.grpc_port}")
    agrpc.add_AuthServicer_to_server(servicer, server)
    hs = health.HealthServer(args.bind_address, args.health_port)
    await server.start()
    await hs.start()
    log.info("auth serving gRPC on %s:%d, health on %d; authorization modes %s",
             args.bind_address, args.grpc_port, args.health_port, args.authorization_mode)
    try:
        await stop.wait()
    finally:
        await hs.stop()
        await server.stop(grace=2)


if __name__ == "__main__":
    _args = parse_args()
    runtime.setup_logging("auth", _args.v)
    _servicer = build(_args)
    runtime.run(lambda stop: main(_args, _servicer, stop))
