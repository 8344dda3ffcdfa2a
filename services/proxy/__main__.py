"""python -m services.proxy: the HTTPS front door."""
from __future__ import annotations

import argparse
import asyncio
import logging

from apiary_pb import apf_pb2_grpc as fgrpc
from apiary_pb import auth_pb2_grpc as agrpc
from apiary_pb import registry_pb2_grpc as rgrpc
from services.common import config, grpcutil, runtime
from services.common.health import HealthServer

from .app import ProxyApp
from .server import make_server, serve_until

log = logging.getLogger("services.proxy")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m services.proxy", description=__doc__)
    config.add_common_flags(p, "proxy")
    p.add_argument("--secure-port", type=int, default=6443, help="HTTPS port for clients")
    p.add_argument("--tls-cert-file", default="", help="serving certificate (PEM, with its chain)")
    p.add_argument("--tls-private-key-file", default="", help="serving key (PEM)")
    p.add_argument("--client-ca-file", default="",
                   help="CA bundle that verifies client certificates; a verified certificate authenticates "
                        "as CN (user) and O (groups)")
    args = p.parse_args(argv)
    if not (args.tls_cert_file and args.tls_private_key_file):
        p.error("--tls-cert-file and --tls-private-key-file are required")
    return args


async def main(args: argparse.Namespace, stop: asyncio.Event) -> None:
    tls = config.internal_tls(args)
    channels = {
        "auth": grpcutil.make_channel(tls, args.auth_address),
        "apf": grpcutil.make_channel(tls, args.apf_address),
        "registry": grpcutil.make_channel(tls, args.registry_address),
    }
    proxy = ProxyApp(
        agrpc.AuthStub(channels["auth"]), fgrpc.FlowControlStub(channels["apf"]),
        rgrpc.RegistryStub(channels["registry"]), channels=channels, verbosity=args.v,
    )
    proxy.start()
    health = HealthServer(args.bind_address, args.health_port, proxy.checks)
    await health.start()
    server = make_server(proxy.app, args.bind_address, args.secure_port, args.tls_cert_file,
                         args.tls_private_key_file, args.client_ca_file,
                         log_level="info" if args.v >= 4 else "warning")
    log.info("serving HTTPS on %s:%d (health on %d)", args.bind_address, args.secure_port, args.health_port)
    try:
        await serve_until(server, stop, proxy.begin_shutdown)
    finally:
        await health.stop()
        await proxy.stop()
        for ch in channels.values():
            await ch.close()


def run() -> None:
    args = parse_args()
    runtime.setup_logging("proxy", args.v)
    runtime.run(lambda stop: main(args, stop))


if __name__ == "__main__":
    run()
