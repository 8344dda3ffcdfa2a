"""Flags every service shares: where it listens, its certificates, where its peers are.

Default ports (loopback): proxy 6443; gRPC auth 20051, apf 20052, admission 20053,
registry 20054, storage 20055; health and metrics 9100 + the same order
(proxy 9100, auth 9101, apf 9102, admission 9103, registry 9104, storage 9105, controllermanager 9106,
which has no gRPC port: it is a client of the API over HTTPS).
"""
from __future__ import annotations

import argparse
from dataclasses import dataclass

SERVICES = ("proxy", "auth", "apf", "admission", "registry", "storage", "controllermanager")
# Below Linux's ephemeral port range (32768-60999), also with the test stacks' port offsets: a
# listening port there can be taken by some client connection's local port and fail to bind.
GRPC_PORTS = {"auth": 20051, "apf": 20052, "admission": 20053, "registry": 20054, "storage": 20055}
HEALTH_PORTS = {name: 9100 + i for i, name in enumerate(SERVICES)}
PEERS = ("auth", "apf", "admission", "registry", "storage")
# Services that call no peer over gRPC: clients of the proxy's HTTPS API only.
API_CLIENTS = ("controllermanager",)


@dataclass
class TLSFiles:
    cert: str
    key: str
    ca: str


def add_common_flags(p: argparse.ArgumentParser, service: str) -> None:
    p.add_argument("--bind-address", default="127.0.0.1", help="address for the gRPC and health ports")
    if service in GRPC_PORTS:
        p.add_argument("--grpc-port", type=int, default=GRPC_PORTS[service])
    p.add_argument("--health-port", type=int, default=HEALTH_PORTS[service],
                   help="HTTP port for /metrics, /healthz, /livez, /readyz")
    p.add_argument("--internal-cert-file", default="", help="this service's certificate for internal mTLS")
    p.add_argument("--internal-key-file", default="")
    p.add_argument("--internal-ca-file", default="", help="CA that signs every internal service certificate")
    p.add_argument("--insecure-internal", action="store_true",
                   help="plaintext internal gRPC (testing only; identity metadata is then trusted blindly)")
    for peer in () if service in API_CLIENTS else PEERS:
        if peer != service:
            p.add_argument(f"--{peer}-address", default=f"127.0.0.1:{GRPC_PORTS[peer]}",
                           help="host:port of the peer; its replicas as host:port,host:port,... or one DNS "
                                "name resolving to all of them (calls and watches spread over them)")
    p.add_argument("-v", "--v", type=int, default=0, help="log verbosity")
    add_tracing_flag(p)


def add_tracing_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--tracing-config-file", default="",
                   help="an apiserver.config.k8s.io TracingConfiguration: where to export spans (OTLP/gRPC) and "
                        "what share of requests to sample (services/common/tracing.py); none: no tracing")


def internal_tls(args: argparse.Namespace) -> TLSFiles | None:
    if args.insecure_internal:
        return None
    if not (args.internal_cert_file and args.internal_key_file and args.internal_ca_file):
        raise SystemExit("internal mTLS needs --internal-cert-file, --internal-key-file and --internal-ca-file "
                         "(or --insecure-internal)")
    return TLSFiles(args.internal_cert_file, args.internal_key_file, args.internal_ca_file)
