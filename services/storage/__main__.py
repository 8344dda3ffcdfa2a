"""python -m services.storage: the etcd-backed store behind apiary.Storage."""

from __future__ import annotations

import argparse
import asyncio
import logging
import re
import sys

from apiary_pb import storage_pb2_grpc as sgrpc
from services.common import config, grpcutil, runtime
from services.common.health import HealthServer

from .cacher import Cachers
from .etcd import Etcd
from .server import StorageServicer

log = logging.getLogger("services.storage")

_DURATION = re.compile(r"^(\d+(?:\.\d+)?)(ms|s|m|h)?$")


def duration(text: str) -> float:
    """Seconds from "10", "10s", "500ms", "2m" (kube's flags take Go durations)."""
    m = _DURATION.match(text.strip())
    if not m:
        raise argparse.ArgumentTypeError(f"invalid duration {text!r}")
    return float(m.group(1)) * {"ms": 0.001, "s": 1, "m": 60, "h": 3600, None: 1}[m.group(2)]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m services.storage", description=__doc__)
    config.add_common_flags(p, "storage")
    p.add_argument(
        "--etcd-servers",
        default="http://127.0.0.1:2379",
        help="comma-separated etcd client URLs (the first one is used)",
    )
    p.add_argument(
        "--etcd-request-timeout",
        type=duration,
        default=10.0,
        help="deadline of each etcd request (seconds or a duration such as 10s); past it the "
        "request fails with 504 Timeout",
    )
    p.add_argument(
        "--watch-bookmark-interval",
        type=duration,
        default=60.0,
        help="how often a watch that allows bookmarks gets one",
    )
    p.add_argument(
        "--watch-cache-history",
        type=duration,
        default=75.0,
        help="how long the watch cache keeps events (at least 100 are always kept)",
    )
    return p.parse_args(argv)


async def main(args: argparse.Namespace, stop: asyncio.Event) -> None:
    etcd = Etcd(args.etcd_servers, args.etcd_request_timeout)
    await etcd.connect()
    cachers = Cachers(etcd, history_seconds=args.watch_cache_history)
    server = grpcutil.make_server(config.internal_tls(args), f"{args.bind_address}:{args.grpc_port}")
    sgrpc.add_StorageServicer_to_server(StorageServicer(etcd, cachers, args.watch_bookmark_interval), server)
    await server.start()
    health = HealthServer(args.bind_address, args.health_port, {"etcd": etcd.ping})
    await health.start()
    log.info(
        "storage serving gRPC on %s:%d (etcd %s), health on %d",
        args.bind_address,
        args.grpc_port,
        etcd.endpoint,
        args.health_port,
    )
    try:
        await stop.wait()
    finally:
        await server.stop(grace=2)
        await cachers.stop()
        await health.stop()
        await etcd.close()


if __name__ == "__main__":
    ns = parse_args(sys.argv[1:])
    runtime.setup_logging("storage", ns.v)
    runtime.run(lambda stop: main(ns, stop))
