"""python -m services.storage: the etcd-backed store behind apiary.Storage."""

from __future__ import annotations

import argparse
import asyncio
import logging
import re
import sys

from services.common import config, grpcutil, runtime
from services.common.health import HealthServer

from .cacher import Cachers
from .codec import Codec
from .compactor import Compactor
from .encryption import Encryption
from .etcd import Etcd
from .server import StorageServicer, add_to_server

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
    p.add_argument(
        "--encryption-provider-config",
        default="",
        help="file with kube's EncryptionConfiguration (apiserver.config.k8s.io/v1): how each resource "
        "is encrypted at rest",
    )
    p.add_argument(
        "--etcd-compaction-interval",
        type=duration,
        default=300.0,
        help="how often etcd is compacted (to the revision seen one interval earlier); 0 disables",
    )
    return p.parse_args(argv)


async def main(args: argparse.Namespace, stop: asyncio.Event) -> None:
    encryption = None
    if args.encryption_provider_config:
        try:
            encryption = Encryption.load(args.encryption_provider_config)
        except ValueError as e:
            raise SystemExit(f"--encryption-provider-config: {e}") from None
    etcd = Etcd(args.etcd_servers, args.etcd_request_timeout)
    await etcd.connect()
    codec = Codec(encryption)
    cachers = Cachers(etcd, codec, history_seconds=args.watch_cache_history)
    server = grpcutil.make_server(config.internal_tls(args), f"{args.bind_address}:{args.grpc_port}")
    add_to_server(StorageServicer(etcd, cachers, args.watch_bookmark_interval, codec), server)
    await server.start()
    compactor = Compactor(etcd, args.etcd_compaction_interval)
    compactor.start()
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
        await compactor.stop()
        await cachers.stop()
        if encryption is not None:
            await encryption.close()
        await health.stop()
        await etcd.close()


if __name__ == "__main__":
    ns = parse_args(sys.argv[1:])
    runtime.setup_logging("storage", ns.v)
    runtime.run(lambda stop: main(ns, stop))
