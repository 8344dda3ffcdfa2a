"""python -m services.apf: API Priority and Fairness over a gRPC stream (apiary.FlowControl)."""
from __future__ import annotations

from services.common import loading

if __name__ == "__main__":  # run as the program (python -m), not imported by tests, tools or the compact host
    loading.start()  # before the other imports: the cyclic collector rests while they load

import argparse

from apiary_pb import apf_pb2_grpc as fgrpc
from apiary_pb import registry_pb2_grpc as rgrpc
from apiary_pb import storage_pb2_grpc as sgrpc
from services.common import config, runtime

from .config import BOOTSTRAP
from .configcontroller import ConfigController
from .controller import FlowController
from .server import FlowControlServicer
from .storagestats import StorageStats
from .workestimator import WorkEstimator


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m services.apf", description=__doc__)
    config.add_common_flags(p, "apf")
    p.add_argument("--max-requests-inflight", type=int, default=400,
                   help="plus --max-mutating-requests-inflight: the server's seats, shared by levels")
    p.add_argument("--max-mutating-requests-inflight", type=int, default=200)
    p.add_argument("--apf-queue-wait-seconds", type=float, default=15.0,
                   help="how long a request may wait in a queue before it is rejected (time-out); "
                        "kube derives it from --request-timeout (60 s / 4)")
    args = p.parse_args(argv)
    if args.max_requests_inflight < 0 or args.max_mutating_requests_inflight < 0:
        p.error("--max-requests-inflight and --max-mutating-requests-inflight must not be negative")
    if args.max_requests_inflight + args.max_mutating_requests_inflight < 1:
        p.error("the server needs at least one seat")
    if args.apf_queue_wait_seconds <= 0:
        p.error("--apf-queue-wait-seconds must be positive")
    return args


def build(args: argparse.Namespace, stats: StorageStats | None = None) -> FlowController:
    seats = args.max_requests_inflight + args.max_mutating_requests_inflight
    estimator = WorkEstimator(stats.object_count, stats.watch_count) if stats is not None else None
    return FlowController(BOOTSTRAP, seats, args.apf_queue_wait_seconds, estimator=estimator)


async def assemble(service: runtime.Service) -> str:
    args = service.args
    stats = StorageStats(sgrpc.StorageStub(service.channel(args.storage_address)))
    controller = build(args, stats)
    config = ConfigController(rgrpc.RegistryStub(service.channel(args.registry_address)), controller)

    async def config_synced() -> bool:
        return config.synced()

    service.component(stats.start, stats.stop)
    service.component(controller.start_borrowing, controller.stop_borrowing)
    service.component(config.start, config.stop)
    service.check("apf-config-informers-synced", config_synced)
    fgrpc.add_FlowControlServicer_to_server(FlowControlServicer(controller), service.grpc_server())
    return f"gRPC on {args.bind_address}:{args.grpc_port}; nominal seats {controller.nominal}"


if __name__ == "__main__":
    runtime.main("apf", parse_args(), assemble)
