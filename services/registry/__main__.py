"""python -m services.registry: the API machinery service."""
from __future__ import annotations

from services.common import loading

if __name__ == "__main__":  # run as the program (python -m), not imported by tests, tools or the compact host
    loading.start()  # before the other imports: the cyclic collector rests while they load

import argparse
import asyncio
import ipaddress
import logging

from apiary_pb import admission_pb2_grpc as agrpc
from apiary_pb import auth_pb2_grpc as augrpc
from apiary_pb import registry_pb2_grpc as rgrpc
from apiary_pb import storage_pb2 as spb
from apiary_pb import storage_pb2_grpc as sgrpc
from services.apis.install import new_catalogue
from services.apiserver.endpoints.handlers import Handlers
from services.common import config, errors, grpcutil, mux, runtime
from services.common.backoff import Backoff

from .admission import AdmissionClient
from .auth import AuthClient
from .bootstrap import bootstrap
from .crd import CRDController
from .ipallocator import DEFAULT_SERVICE_CIDR
from .rest import new_handlers
from .server import RegistryServicer
from .storage_client import StorageClient

log = logging.getLogger("services.registry")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m services.registry", description=__doc__)
    config.add_common_flags(p, "registry")
    p.add_argument("--storage-timeout", type=float, default=30.0,
                   help="deadline in seconds of each storage call")
    p.add_argument("--admission-timeout", type=float, default=30.0,
                   help="deadline in seconds of each admission call")
    p.add_argument("--auth-timeout", type=float, default=30.0,
                   help="deadline in seconds of each auth call (RBAC escalation checks, reviews, TokenRequest)")
    p.add_argument("--service-cluster-ip-range", default=DEFAULT_SERVICE_CIDR,
                   help="CIDR from which Services get their ClusterIP (data only: nothing routes to it)")
    args = p.parse_args(argv)
    try:
        ipaddress.ip_network(args.service_cluster_ip_range)
    except ValueError as e:
        p.error(f"--service-cluster-ip-range: {e}")
    return args


async def _bootstrap_until_done(handlers: Handlers[StorageClient], done: asyncio.Event, service_cidr: str) -> None:
    """Retried on the peers' short backoff: readiness waits on it, so storage is tried again soon
    after it is back (not seconds later)."""
    backoff = Backoff()
    while True:
        try:
            await bootstrap(handlers, handlers.catalogue, service_cidr)
            done.set()
            return
        except errors.APIError as e:
            delay = backoff.delay()
            log.info("bootstrap: %s; retrying in %.2fs", e.message, delay)
            await asyncio.sleep(delay)


async def assemble(service: runtime.Service) -> str:
    args = service.args
    store = StorageClient(sgrpc.StorageStub(service.channel(args.storage_address)), args.storage_timeout,
                          grpcutil.target(args.storage_address).replicas)
    catalogue = new_catalogue()
    # --auth-address: RBAC escalation checks, the access and token reviews, TokenRequest.
    handlers = new_handlers(catalogue, store,
                            AdmissionClient(agrpc.AdmissionStub(service.channel(args.admission_address)),
                                            args.admission_timeout,
                                            grpcutil.target(args.admission_address).replicas),
                            AuthClient(augrpc.AuthStub(service.channel(args.auth_address)), args.auth_timeout),
                            args.service_cluster_ip_range)
    mux.add_servicer(rgrpc.add_RegistryServicer_to_server, RegistryServicer(handlers), service.grpc_server())

    bootstrapped = asyncio.Event()

    async def storage_ready() -> bool:
        namespaces = catalogue.lookup("", "v1", "namespaces")
        assert namespaces is not None
        await store.list(namespaces, spb.ListRequest(prefix=namespaces.key_prefix, limit=1))
        return True

    async def bootstrap_done() -> bool:
        return bootstrapped.is_set()

    service.check("storage", storage_ready)
    service.check("bootstrap-controller", bootstrap_done)
    service.task(lambda: _bootstrap_until_done(handlers, bootstrapped, args.service_cluster_ip_range), "bootstrap")
    # CustomResourceDefinitions: served by every replica once its informer has them (kube's crd-informer-synced)
    crds = CRDController(handlers)

    async def crd_informer_synced() -> bool:
        return crds.informer.synced.is_set()

    service.check("crd-informer-synced", crd_informer_synced)
    service.task(crds.run, "crd-controller")
    return f"gRPC on {args.bind_address}:{args.grpc_port}"


if __name__ == "__main__":
    runtime.main("registry", parse_args(), assemble)
