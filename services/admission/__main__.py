"""python -m services.admission: the admission chain over gRPC (apiary.Admission)."""
from __future__ import annotations

import argparse
import asyncio
import logging

from apiary_pb import admission_pb2_grpc as adgrpc
from apiary_pb import registry_pb2_grpc as rgrpc
from services.common import config, grpcutil, health, runtime

from .chain import Chain
from .configfile import ConfigError, load_admission_configuration
from .plugins import FACTORIES, enabled_plugins
from .server import AdmissionServicer

log = logging.getLogger("services.admission")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m services.admission", description=__doc__)
    config.add_common_flags(p, "admission")
    p.add_argument("--enable-admission-plugins", default="",
                   help="admission plugins to enable besides the default ones (NamespaceLifecycle); "
                        "they run in the server's fixed order, whatever the order here")
    p.add_argument("--disable-admission-plugins", default="",
                   help="admission plugins to disable, default ones included")
    p.add_argument("--admission-control-config-file", default="",
                   help="AdmissionConfiguration (apiserver.config.k8s.io/v1) with per-plugin configuration")
    return p.parse_args(argv)


def resolve_plugins(args: argparse.Namespace) -> tuple[list[str], dict]:
    """The enabled plugins and their configurations. Raises SystemExit on bad flags or files."""
    try:
        names = enabled_plugins(args.enable_admission_plugins, args.disable_admission_plugins)
        configs = (load_admission_configuration(args.admission_control_config_file)
                   if args.admission_control_config_file else {})
    except (ValueError, ConfigError) as e:
        raise SystemExit(str(e)) from None
    return names, configs


def build_chain(names: list[str], configs: dict, registry: rgrpc.RegistryStub | None) -> Chain:
    return Chain([FACTORIES[n](configs.get(n), registry) for n in names])


async def main(args: argparse.Namespace, stop: asyncio.Event) -> None:
    names, configs = resolve_plugins(args)
    tls = config.internal_tls(args)
    registry_channel = grpcutil.make_channel(tls, args.registry_address)
    chain = build_chain(names, configs, rgrpc.RegistryStub(registry_channel))
    await chain.start()
    server = grpcutil.make_server(tls, f"{args.bind_address}:{args.grpc_port}")
    adgrpc.add_AdmissionServicer_to_server(AdmissionServicer(chain), server)

    async def plugins_ready() -> bool:
        return not chain.not_ready()

    hs = health.HealthServer(args.bind_address, args.health_port, {"admission-plugins-synced": plugins_ready})
    await server.start()
    await hs.start()
    log.info("admission serving gRPC on %s:%d, health on %d; plugins %s",
             args.bind_address, args.grpc_port, args.health_port, ", ".join(names) or "(none)")
    try:
        await stop.wait()
    finally:
        await hs.stop()
        await server.stop(grace=2)
        await chain.stop()
        await registry_channel.close()


if __name__ == "__main__":
    _args = parse_args()
    runtime.setup_logging("admission", _args.v)
    resolve_plugins(_args)  # fail fast on bad flags, before anything starts
    runtime.run(lambda stop: main(_args, stop))
