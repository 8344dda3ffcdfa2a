"""python -m services.proxy: the HTTPS front door."""
from __future__ import annotations

from services.common import loading

if __name__ == "__main__":  # run as the program (python -m), not imported by tests, tools or the compact host
    loading.start()  # before the other imports: the cyclic collector rests while they load

import argparse
import asyncio
import ipaddress
import socket
import sys
from collections.abc import Callable

from apiary_pb import apf_pb2_grpc as fgrpc
from apiary_pb import auth_pb2_grpc as agrpc
from apiary_pb import registry_pb2_grpc as rgrpc
from services.apiserver.audit import options as audit_options
from services.apiserver.filters.requestheader import (
    DEFAULT_EXTRA_PREFIXES,
    DEFAULT_GROUP_HEADERS,
    DEFAULT_UID_HEADERS,
    DEFAULT_USERNAME_HEADERS,
    RequestHeaderConfig,
)
from services.apiserver.filters.timeout import MIN_REQUEST_TIMEOUT, REQUEST_TIMEOUT
from services.apiserver.serving import HTTPLimits, Server, make_server, serve_until
from services.common import config, duration, grpcutil, runtime

from . import workers
from .aggregator.authentication_trust import AuthenticationTrust
from .app import ProxyApp
from .endpointlease import EndpointLease
from .filters.apf import MAX_MUTATING_REQUESTS_INFLIGHT, MAX_REQUESTS_INFLIGHT
from .openidmetadata import external_address


def _bool(value: str) -> bool:
    v = value.strip().lower()
    if v in ("true", "1", "t"):
        return True
    if v in ("false", "0", "f"):
        return False
    raise argparse.ArgumentTypeError(f"invalid boolean value {value!r}")


def _csv(value: str) -> list[str]:
    return [v.strip() for v in value.split(",") if v.strip()]


def request_header_config(args: argparse.Namespace) -> RequestHeaderConfig | None:
    if not args.requestheader_client_ca_file:
        return None
    return RequestHeaderConfig.from_flags(
        args.requestheader_username_headers, args.requestheader_uid_headers, args.requestheader_group_headers,
        args.requestheader_extra_headers_prefix, args.requestheader_allowed_names)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m services.proxy", description=__doc__)
    config.add_common_flags(p, "proxy")
    p.add_argument("--secure-port", type=int, default=6443, help="HTTPS port for clients")
    p.add_argument("--external-hostname", default="",
                   help="the hostname clients reach this server by (the service account issuer's default "
                        "jwks_uri); default the advertise address")
    p.add_argument("--tls-cert-file", default="", help="serving certificate (PEM, with its chain)")
    p.add_argument("--tls-private-key-file", default="", help="serving key (PEM)")
    p.add_argument("--client-ca-file", default="",
                   help="CA bundle that verifies client certificates; a verified certificate authenticates "
                        "as CN (user) and O (groups)")
    p.add_argument("--requestheader-client-ca-file", default="",
                   help="CA bundle that verifies the client certificates of authenticating proxies; only "
                        "they may assert an identity in the --requestheader-*-headers (a certificate it "
                        "issued is not an x509 user identity)")
    p.add_argument("--requestheader-allowed-names", type=_csv, default=[],
                   help="common names allowed for request-header client certificates (comma-separated; "
                        "empty: any certificate the request-header CA issued)")
    p.add_argument("--requestheader-username-headers", type=_csv, default=list(DEFAULT_USERNAME_HEADERS),
                   help="headers holding the user name, first non-empty wins (comma-separated)")
    p.add_argument("--requestheader-uid-headers", type=_csv, default=list(DEFAULT_UID_HEADERS),
                   help="headers holding the user's UID (comma-separated)")
    p.add_argument("--requestheader-group-headers", type=_csv, default=list(DEFAULT_GROUP_HEADERS),
                   help="headers holding the user's groups, every value counts (comma-separated)")
    p.add_argument("--request-timeout", type=duration.flag, default=REQUEST_TIMEOUT,
                   help="how long a request may take before it is answered 504, unless it asks for less "
                        "with ?timeout= (a Go duration such as 1m0s); watches are not bounded by it "
                        "(default 1m0s)")
    p.add_argument("--min-request-timeout", type=int, default=MIN_REQUEST_TIMEOUT,
                   help="seconds a watch without timeoutSeconds lasts at least; it ends at a random time "
                        "between this and twice this, so that clients do not all reconnect at once")
    # apiary's own: kube-apiserver has these limits as constants (secure_serving.go)
    p.add_argument("--read-header-timeout", type=duration.flag, default=HTTPLimits.read_header_timeout,
                   help="apiary-specific: a request's headers must arrive within this time of the "
                        "connection's start or the request's first byte, or the connection is closed "
                        "(kube's 32s)")
    p.add_argument("--idle-timeout", type=duration.flag, default=HTTPLimits.idle_timeout,
                   help="apiary-specific: a keep-alive connection with no request for this long is closed "
                        "(kube's 90s)")
    p.add_argument("--max-header-bytes", type=int, default=HTTPLimits.max_header_bytes,
                   help="apiary-specific: larger request headers are answered 431 (kube's 1 MiB)")
    p.add_argument("--requestheader-extra-headers-prefix", type=_csv, default=list(DEFAULT_EXTRA_PREFIXES),
                   help="header prefixes whose headers hold extra user attributes (comma-separated)")
    p.add_argument("--max-requests-inflight", type=int, default=MAX_REQUESTS_INFLIGHT,
                   help="read-only requests in flight at most while the apf service is unreachable or disabled "
                        "(0: no limit); with it, priority and fairness decides")
    p.add_argument("--max-mutating-requests-inflight", type=int, default=MAX_MUTATING_REQUESTS_INFLIGHT,
                   help="mutating requests in flight at most while the apf service is unreachable "
                        "(0: no limit)")
    p.add_argument("--enable-priority-and-fairness", type=_bool, nargs="?", const=True, default=True,
                   help="gate requests by the apf service's API Priority and Fairness (default true); false: "
                        "only the max-in-flight limits, no FlowSchema headers, no /debug/api_priority_and_fairness")
    p.add_argument("--proxy-client-cert-file", default="",
                   help="client certificate the proxy presents to aggregated API servers (the front-proxy "
                        "client; they trust X-Remote-* headers only from it)")
    p.add_argument("--proxy-client-key-file", default="", help="key of --proxy-client-cert-file")
    p.add_argument("--workers", type=int, default=1,
                   help="apiary-specific: processes serving the HTTPS port (SO_REUSEPORT), each a whole proxy "
                        "with its own streams to the services (services/proxy/workers.py)")
    p.add_argument("--worker-index", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--advertise-address", default="",
                   help="the IP this replica is reached on, listed in the `kubernetes` Service's endpoints "
                        "(default: --bind-address, or this host's address when that is 0.0.0.0 or ::)")
    p.add_argument("--endpoint-reconciler-type", choices=("lease", "none"), default="lease",
                   help="lease: hold a Lease in kube-system naming this replica's address and port, from which the "
                        "controller-manager keeps the `kubernetes` Service's endpoints; none: do not")
    audit_options.add_flags(p)
    args = p.parse_args(argv)
    if args.workers < 1 or not 0 <= args.worker_index < args.workers:
        p.error("--workers must be at least 1")
    if args.max_requests_inflight < 0 or args.max_mutating_requests_inflight < 0:
        p.error("--max-requests-inflight and --max-mutating-requests-inflight must not be negative")
    if args.request_timeout <= 0 or args.read_header_timeout <= 0 or args.idle_timeout <= 0:
        p.error("--request-timeout, --read-header-timeout and --idle-timeout must be positive")
    if args.min_request_timeout <= 0 or args.max_header_bytes <= 0:
        p.error("--min-request-timeout and --max-header-bytes must be positive")
    if not (args.tls_cert_file and args.tls_private_key_file):
        p.error("--tls-cert-file and --tls-private-key-file are required")
    for err in audit_options.validate(args):
        p.error(err)
    if args.advertise_address:
        try:
            ipaddress.ip_address(args.advertise_address)
        except ValueError:
            p.error(f"--advertise-address: {args.advertise_address!r} is not an IP address")
    return args


def advertise_address(args: argparse.Namespace) -> str:
    """--advertise-address, else the bind address where it names one, else this host's (kube's default)."""
    if args.advertise_address:
        return str(args.advertise_address)
    if args.bind_address not in ("0.0.0.0", "::", ""):
        return str(args.bind_address)
    return socket.gethostbyname(socket.gethostname())


class HTTPSListener:
    """The HTTPS server as the service's listener: shutdown ends the open watches (begin_shutdown),
    stops accepting and lets the requests in flight finish (serve_until)."""

    def __init__(self, server: Server, on_stop: Callable[[], None]) -> None:
        self.server, self.on_stop = server, on_stop
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self._task = asyncio.create_task(serve_until(self.server, self._stop, self.on_stop), name="https")

    async def shutdown(self) -> None:
        self._stop.set()
        if self._task is not None:
            await self._task

    async def done(self) -> None:
        if self._task is not None:
            await asyncio.shield(self._task)


async def assemble(service: runtime.Service) -> str:
    args = service.args
    if args.worker_index:
        workers.die_with_parent()
    elif args.workers > 1:
        others = workers.Workers(sys.argv[1:], args.workers, args.audit_log_path, args.bind_address)
        service.component(others.start, others.stop)
    audit_sink = audit_options.auditor(args)
    channels = {peer: service.channel(getattr(args, f"{peer}_address")) for peer in ("auth", "apf", "registry")}
    proxy = ProxyApp(
        agrpc.AuthStub(channels["auth"]), fgrpc.FlowControlStub(channels["apf"]),
        rgrpc.RegistryStub(channels["registry"]), channels=channels, verbosity=args.v,
        registry_replicas=grpcutil.target(args.registry_address).replicas,
        request_header=request_header_config(args),
        max_requests_inflight=workers.share(args.max_requests_inflight, args.workers),
        max_mutating_requests_inflight=workers.share(args.max_mutating_requests_inflight, args.workers),
        request_timeout=args.request_timeout, min_request_timeout=args.min_request_timeout,
        auditor=audit_sink, proxy_client_cert_file=args.proxy_client_cert_file,
        proxy_client_key_file=args.proxy_client_key_file,
        external_address=external_address(advertise_address(args), args.secure_port, args.external_hostname),
        enable_priority_and_fairness=args.enable_priority_and_fairness,
    )
    service.component(proxy.start, proxy.stop)
    service.checks = proxy.checks
    if args.workers > 1 and not args.worker_index:
        service.check("proxy-workers", others.ready)
    # the front-proxy trust that aggregated servers read (kube-system/extension-apiserver-authentication)
    trust = AuthenticationTrust(
        rgrpc.RegistryStub(channels["registry"]), client_ca_file=args.client_ca_file,
        requestheader_client_ca_file=args.requestheader_client_ca_file,
        allowed_names=args.requestheader_allowed_names, username_headers=args.requestheader_username_headers,
        uid_headers=args.requestheader_uid_headers, group_headers=args.requestheader_group_headers,
        extra_headers_prefix=args.requestheader_extra_headers_prefix)
    service.component(trust.start, trust.stop)
    if args.endpoint_reconciler_type == "lease":
        lease = EndpointLease(rgrpc.RegistryStub(channels["registry"]), advertise_address(args), args.secure_port)
        service.component(lease.start, lease.stop)
    if audit_sink is not None:
        # declared last, so stopped first once the listener has drained: every event is written before
        # the slower stops (the lease's delete, the informers) spend the grace the process has to exit in
        service.component(audit_sink.start, audit_sink.stop)
    server = make_server(proxy.app, args.bind_address, args.secure_port, args.tls_cert_file,
                         args.tls_private_key_file, args.client_ca_file,
                         log_level="info" if args.v >= 4 else "warning",
                         requestheader_ca_file=args.requestheader_client_ca_file,
                         limits=HTTPLimits(args.read_header_timeout, args.idle_timeout,
                                           args.max_header_bytes), reuse_port=args.workers > 1)
    service.listener(HTTPSListener(server, proxy.begin_shutdown))
    worker = f" (worker {args.worker_index} of {args.workers})" if args.workers > 1 else ""
    return f"HTTPS on {args.bind_address}:{args.secure_port}{worker}"


def run() -> None:
    runtime.main("proxy", parse_args(), assemble)


if __name__ == "__main__":
    run()
