"""python -m services.admission: the admission chain over gRPC (apiary.Admission)."""
from __future__ import annotations

from services.common import loading

if __name__ == "__main__":  # run as the program (python -m), not imported by tests, tools or the compact host
    loading.start()  # before the other imports: the cyclic collector rests while they load

import argparse

from apiary_pb import admission_pb2_grpc as adgrpc
from apiary_pb import auth_pb2_grpc as authgrpc
from apiary_pb import registry_pb2_grpc as rgrpc
from services.apis.install import new_catalogue
from services.apiserver.catalogue import Catalogue
from services.apiserver.fielderrors import ConfigError
from services.common import config, mux, runtime

from . import authz
from .chain import Chain
from .crds import CustomResourceKinds
from .plugin import WantsCatalogue
from .plugins import enabled_plugins, factory_for
from .plugins.default_toleration_seconds import DEFAULT_SECONDS, NOT_READY_KEY, UNREACHABLE_KEY
from .server import AdmissionServicer


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m services.admission", description=__doc__)
    config.add_common_flags(p, "admission")
    p.add_argument("--enable-admission-plugins", default="",
                   help="admission plugins to enable besides the default ones (all the built-in ones: "
                        "services/admission/plugins ORDER); built-in ones run in the server's "
                        "fixed order, whatever the order here, then plugins from the apiary.admission_plugins "
                        "entry point group in the order named here")
    p.add_argument("--disable-admission-plugins", default="",
                   help="admission plugins to disable, default ones included")
    p.add_argument("--admission-control-config-file", default="",
                   help="AdmissionConfiguration (apiserver.config.k8s.io/v1) with per-plugin configuration")
    p.add_argument("--default-not-ready-toleration-seconds", type=int, default=DEFAULT_SECONDS,
                   help="the tolerationSeconds of the notReady:NoExecute toleration DefaultTolerationSeconds adds "
                        "to every pod that does not already have one")
    p.add_argument("--default-unreachable-toleration-seconds", type=int, default=DEFAULT_SECONDS,
                   help="the tolerationSeconds of the unreachable:NoExecute toleration DefaultTolerationSeconds "
                        "adds to every pod that does not already have one")
    return p.parse_args(argv)


def resolve_plugins(args: argparse.Namespace) -> tuple[list[str], dict]:
    """The enabled plugins and their configurations. Raises SystemExit on bad flags or files."""
    try:
        names = enabled_plugins(args.enable_admission_plugins, args.disable_admission_plugins)
        configs = {}
        if args.admission_control_config_file:
            from .configfile import load_admission_configuration  # its typed models only for a file given

            configs = load_admission_configuration(args.admission_control_config_file)
        if "DefaultTolerationSeconds" in names:  # kube's flags of this plugin, given to it as its configuration
            configs["DefaultTolerationSeconds"] = {
                NOT_READY_KEY: args.default_not_ready_toleration_seconds,
                UNREACHABLE_KEY: args.default_unreachable_toleration_seconds}
        for n in names:
            factory_for(n)  # an entry point that does not load fails here, before anything starts
    except (ValueError, ConfigError) as e:
        raise SystemExit(str(e)) from None
    return names, configs


def build_chain(names: list[str], configs: dict, registry: rgrpc.RegistryStub | None,
                catalogue: Catalogue) -> Chain:
    """The plugins, each given the server's catalogue when it asks for it (set_catalogue: kube's plug-in
    initializer handing its RESTMapper to the plug-ins that want one)."""
    plugins = [factory_for(n)(configs.get(n), registry) for n in names]
    for plugin in plugins:
        if isinstance(plugin, WantsCatalogue):
            plugin.set_catalogue(catalogue)
    return Chain(plugins)


async def assemble(service: runtime.Service) -> str:
    args = service.args
    names, configs = resolve_plugins(args)
    authz.configure(authgrpc.AuthStub(service.channel(args.auth_address)))
    catalogue = new_catalogue()
    registry = rgrpc.RegistryStub(service.channel(args.registry_address))
    custom = CustomResourceKinds(registry, catalogue)
    service.component(custom.start, custom.stop)
    chain = build_chain(names, configs, registry, catalogue)
    service.component(chain.start, chain.stop)
    mux.add_servicer(adgrpc.add_AdmissionServicer_to_server, AdmissionServicer(chain, catalogue),
                     service.grpc_server())

    async def plugins_ready() -> bool:
        return not chain.not_ready()

    service.check("admission-plugins-synced", plugins_ready)
    service.check("crd-informer-synced", custom.synced)
    return f"gRPC on {args.bind_address}:{args.grpc_port}; plugins {', '.join(names) or '(none)'}"


if __name__ == "__main__":
    _args = parse_args()
    resolve_plugins(_args)  # fail fast on bad flags, before anything starts
    runtime.main("admission", _args, assemble)
