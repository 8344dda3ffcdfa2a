"""python -m services.storage: the etcd-backed store behind apiary.Storage."""

from __future__ import annotations

from services.common import loading

if __name__ == "__main__":  # run as the program (python -m), not imported by tests, tools or the compact host
    loading.start()  # before the other imports: the cyclic collector rests while they load

import argparse
import sys

from services.apiserver.storage.backend import Backend
from services.apiserver.storage.cacher import Cachers
from services.apiserver.storage.codec import Codec
from services.apiserver.storage.compactor import Compactor
from services.apiserver.storage.encryption import Encryption
from services.apiserver.storage.etcd import Etcd
from services.common import config, duration, runtime

from .server import StorageServicer, add_to_server


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
        type=duration.flag,
        default=10.0,
        help="deadline of each etcd request (seconds or a duration such as 10s); past it the "
        "request fails with 504 Timeout",
    )
    p.add_argument(
        "--watch-bookmark-interval",
        type=duration.flag,
        default=60.0,
        help="how often a watch that allows bookmarks gets one",
    )
    p.add_argument(
        "--watch-cache-history",
        type=duration.flag,
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
        type=duration.flag,
        default=300.0,
        help="how often etcd is compacted (to the revision seen one interval earlier); 0 disables",
    )
    return p.parse_args(argv)


async def assemble(service: runtime.Service) -> str:
    args = service.args
    encryption = None
    if args.encryption_provider_config:
        try:
            encryption = Encryption.load(args.encryption_provider_config)
        except ValueError as e:
            raise SystemExit(f"--encryption-provider-config: {e}") from None
        service.client(encryption.close)  # KMS plugin connections
    etcd = Etcd(args.etcd_servers, args.etcd_request_timeout)
    service.client(etcd.close)
    await etcd.connect()
    codec = Codec(encryption)
    cachers = Cachers(etcd, codec, history_seconds=args.watch_cache_history)
    service.component(stop=cachers.stop)
    compactor = Compactor(etcd, args.etcd_compaction_interval)
    service.component(compactor.start, compactor.stop)
    backend = Backend(etcd, cachers, args.watch_bookmark_interval, codec)
    add_to_server(StorageServicer(backend), service.grpc_server())
    service.check("etcd", etcd.ping)
    return f"gRPC on {args.bind_address}:{args.grpc_port} (etcd {etcd.endpoint})"


if __name__ == "__main__":
    runtime.main("storage", parse_args(sys.argv[1:]), assemble)
