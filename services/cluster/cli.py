"""`apiary`: a local Kubernetes-compatible cluster (etcd and every apiary service) on loopback.

    apiary up [--state DIR] [--port-offset N | --port 0] [--crds PATH ...] [--replicas N] [--proxy-workers N]
              [--etcd-members N] [--detach] [--profile full|compact]
              [--tracing [--tracing-rate N]]
    apiary down | status | kubeconfig [--state DIR]
    apiary traces [TRACE_ID | --audit-id ID] [--wait S] [--state DIR]   (the spans `up --tracing` kept)
    apiary init | exec NAME [--state DIR] [--port-offset N]     (how compose.yaml runs the services)

`up` stays in the foreground until Ctrl-C or SIGTERM, which stop the cluster (and so does the
command's death, even by SIGKILL); with --detach it returns once the cluster is ready and leaves
it running for `apiary down`. A state directory holds one cluster: its certificates, etcd data,
logs, pids and ports (stack.json), which `down`, `status`, `kubeconfig` and a later `up` read.
"""
from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from pathlib import Path
from types import FrameType

from .aggregated import AGGREGATED_SERVERS
from .otlpreceiver import show
from .stack import ORDER, PROFILES, TRACE_EVERY_REQUEST, ClusterError, Stack

DEFAULT_STATE = ".apiary"


class Stopped(Exception):
    """SIGTERM or SIGINT reached `apiary up`."""


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="apiary", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, help: str) -> argparse.ArgumentParser:
        c = sub.add_parser(name, help=help, description=help)
        c.add_argument("--state", type=Path, default=Path(os.environ.get("APIARY_STATE") or DEFAULT_STATE),
                       help="the cluster's state directory (default: $APIARY_STATE or ./.apiary)")
        return c

    up = command("up", "start the cluster (what is already running is left alone) and wait until it is ready")
    ports = up.add_mutually_exclusive_group()
    ports.add_argument("--port-offset", type=int, metavar="N",
                       help="kube's ports plus N (proxy 6443+N, etcd 2379+N, ...); default 0, or what "
                            "the state directory recorded")
    ports.add_argument("--port", type=int, choices=[0], metavar="0",
                       help="0: every port chosen free by the OS (recorded in the state directory)")
    up.add_argument("--crds", type=Path, nargs="+", action="extend", default=[], metavar="PATH",
                    help="CustomResourceDefinition files or directories (.yaml, .yml, .json) to install "
                         "and wait for until Established")
    up.add_argument("--replicas", type=int, metavar="N",
                    help="processes per service (etcd: one); default $APIARY_REPLICAS or 1")
    up.add_argument("--etcd-members", type=int, metavar="N",
                    help="members of the etcd cluster (their ports +100 each, as replicas'); default "
                         "$APIARY_ETCD_MEMBERS or what the state directory recorded, else 1")
    up.add_argument("--profile", choices=PROFILES,
                    help="full: one process per service; compact: every service in one host process "
                         "(a test cluster's; one replica). Default: what the state directory recorded, or full")
    up.add_argument("--proxy-workers", type=int, metavar="N",
                    help="processes of each proxy on its HTTPS port (the proxy's --workers); default "
                         "$APIARY_PROXY_WORKERS or 1")
    up.add_argument("--detach", action="store_true", help="return once ready and leave the cluster running")
    up.add_argument("--fresh", action="store_true", help="start from an empty etcd")
    up.add_argument("-v", "--v", type=int, metavar="N", dest="verbosity",
                    help="every service's log verbosity (4: each request's stages, with its audit ID); "
                         "default $APIARY_V or what the state directory recorded")
    up.add_argument("--aggregated", action="append", default=[],
                    choices=[a.name for a in AGGREGATED_SERVERS], metavar="NAME",
                    help="run an aggregated API server of the repository too (pizza-apiserver)")
    up.add_argument("--tracing", action=argparse.BooleanOptionalAction, default=None,
                    help="run a local OTLP receiver (port 4317 plus the offset) as a process of the cluster, "
                         "every service exporting its spans to it, kept in <state>/logs/traces.jsonl for "
                         "`apiary traces`; default: what the state directory recorded, else off")
    up.add_argument("--tracing-rate", type=int, metavar="N",
                    help=f"with --tracing: requests sampled per million at the front door (kube's "
                         f"samplingRatePerMillion); default {TRACE_EVERY_REQUEST}, every request")
    up.add_argument("--timeout", type=float, default=90.0, help="seconds to wait for each step (default 90)")
    command("down", "stop every process of the cluster")
    command("status", "each process of the cluster: running, ready (exit 1 if one is not)")
    command("kubeconfig", "print the path of the cluster's admin kubeconfig")
    traces = command("traces", "print the traces the cluster's receiver kept (`up --tracing`) as trees")
    traces.add_argument("trace_id", nargs="?", default="", metavar="TRACE_ID", help="only this trace")
    traces.add_argument("--audit-id", default="", metavar="ID",
                        help="only the trace of the request with this audit ID (its Audit-Id response header)")
    traces.add_argument("--wait", type=float, default=0.0, metavar="S",
                        help="wait up to S seconds for the trace to arrive (the services export twice a second)")
    init = command("init", "only make the state (certificates, tokens, configuration, a kubeconfig with the "
                           "certificates in it), as compose's init service does")
    init.add_argument("--port-offset", type=int, default=0, metavar="N")
    init.add_argument("--tracing-endpoint", default="", metavar="HOST:PORT",
                      help="the OTLP/gRPC collector every service exports to (a TracingConfiguration in the "
                           "state, which `exec` passes on); default: no tracing")
    init.add_argument("--tracing-rate", type=int, default=TRACE_EVERY_REQUEST, metavar="N",
                      help="with --tracing-endpoint: requests sampled per million")
    exec_ = command("exec", "become service NAME with the command line `up` gives it (how compose runs each "
                            "service; an aggregated server first waits for the proxy and registers itself)")
    exec_.add_argument("name", choices=ORDER[1:] + tuple(a.name for a in AGGREGATED_SERVERS), metavar="NAME")
    exec_.add_argument("--port-offset", type=int, default=0, metavar="N")
    return p


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = parser()
    args = p.parse_args(argv)
    if getattr(args, "replicas", None) is not None and args.replicas < 1:
        p.error("--replicas must be at least 1")
    if getattr(args, "etcd_members", None) is not None and args.etcd_members < 1:
        p.error("--etcd-members must be at least 1")
    if getattr(args, "proxy_workers", None) is not None and args.proxy_workers < 1:
        p.error("--proxy-workers must be at least 1")
    if getattr(args, "tracing_rate", None) is not None and not 0 <= args.tracing_rate <= TRACE_EVERY_REQUEST:
        p.error(f"--tracing-rate must be between 0 and {TRACE_EVERY_REQUEST}")
    if args.command == "up" and args.tracing_rate is not None and args.tracing is False:
        p.error("--tracing-rate needs --tracing")
    return args


def up_stack(args: argparse.Namespace) -> Stack:
    """The Stack `up` starts: the options given, else what the state directory recorded (so that
    `up` again finds a running cluster where it is), else kube's ports."""
    recorded = Stack.from_state(args.state)
    chosen = args.port is not None or args.port_offset is not None
    replicas = args.replicas or int(os.environ.get("APIARY_REPLICAS") or 0) or recorded.replicas
    etcd_members = args.etcd_members or int(os.environ.get("APIARY_ETCD_MEMBERS") or 0) or recorded.etcd_members
    proxy_workers = args.proxy_workers or int(os.environ.get("APIARY_PROXY_WORKERS") or 0) or recorded.proxy_workers
    known = {a.name: a for a in AGGREGATED_SERVERS}
    if args.profile and args.profile != recorded.profile and any(recorded.pid(p) for p in recorded.processes()):
        raise ClusterError(f"the cluster in {recorded.state} runs the {recorded.profile} profile: "
                           f"`apiary down --state {args.state}` before starting it as {args.profile}")
    tracing = recorded.tracing_receiver if args.tracing is None else args.tracing
    if tracing != recorded.tracing_receiver and any(recorded.pid(p) for p in recorded.processes()):
        raise ClusterError(f"the cluster in {recorded.state} runs {'with' if recorded.tracing_receiver else 'without'} "
                           f"tracing: `apiary down --state {args.state}` before starting it "
                           f"{'with' if tracing else 'without'}")
    rate = args.tracing_rate if args.tracing_rate is not None else (
        recorded.tracing_rate if recorded.tracing_receiver else TRACE_EVERY_REQUEST)
    return Stack(args.state,
                 offset=(args.port_offset or 0) if chosen else recorded.offset,
                 free_ports=args.port == 0 if chosen else recorded.free_ports,
                 ports=recorded.ports if not chosen or args.port == 0 else {},
                 replicas=replicas, etcd_members=etcd_members, proxy_workers=proxy_workers, detach=args.detach,
                 verbosity=args.verbosity if args.verbosity is not None else int(
                     os.environ.get("APIARY_V") or recorded.verbosity),
                 profile=args.profile or recorded.profile,
                 tracing_receiver=tracing, tracing_rate=rate if tracing else 0,
                 aggregated=[known[n] for n in args.aggregated] or ([] if chosen else recorded.aggregated))


def up(args: argparse.Namespace) -> None:
    stack = up_stack(args)
    was_running = any(stack.pid(n) is not None for n in stack.names())

    def stopped(signum: int, frame: FrameType | None) -> None:
        raise Stopped()

    signal.signal(signal.SIGTERM, stopped)
    signal.signal(signal.SIGINT, stopped)
    began = time.monotonic()
    try:
        if args.fresh or not (was_running and stack.ready()):
            stack.start(fresh=args.fresh, timeout=args.timeout)
        else:
            stack.hold()  # a running cluster is attached to: ready already, with nothing to start
        installed = stack.install_crds(args.crds, timeout=args.timeout) if args.crds else []
        took = time.monotonic() - began
        crds = f", {len(installed)} CRDs established" if installed else ""
        print(f"apiary is ready at {stack.server} in {took:.1f} s{crds} (state {stack.state})")
        print(f"kubeconfig: {stack.kubeconfig}")
        print(f"export KUBECONFIG={stack.kubeconfig}", flush=True)
        if args.detach:
            return
        print("Ctrl-C stops it", file=sys.stderr, flush=True)
        while True:
            signal.pause()
    except ClusterError:
        if was_running:
            stack.release()  # a cluster that was running before stays so
        else:
            stack.stop(quiet=True)  # a failed `up` leaves nothing behind
        raise
    except Stopped:
        began = time.monotonic()
        stack.stop(quiet=True)
        print(f"stopped in {time.monotonic() - began:.2f} s", file=sys.stderr)


def down(args: argparse.Namespace) -> None:
    stack = Stack.from_state(args.state, detach=True)
    began = time.monotonic()
    running = [n for n in stack.processes() if stack.pid(n) is not None]
    stack.stop(quiet=True)
    print(f"stopped {len(running)} processes in {time.monotonic() - began:.2f} s")


def configured_collector(config: Path) -> str:
    """The endpoint of the TracingConfiguration `init` wrote, "" if it wrote none."""
    if not config.exists():
        return ""
    import yaml

    return str((yaml.safe_load(config.read_text()) or {}).get("endpoint") or "")


def main(argv: list[str] | None = None) -> None:
    args = parse(argv)
    if args.command == "up":
        up(args)
    elif args.command == "down":
        down(args)
    elif args.command == "status":
        raise SystemExit(0 if Stack.from_state(args.state, detach=True).status() else 1)
    elif args.command == "traces":
        raise SystemExit(show(str(Stack.from_state(args.state, detach=True).traces), args.trace_id, args.audit_id,
                              args.wait))
    elif args.command == "kubeconfig":
        stack = Stack.from_state(args.state, detach=True)
        if not stack.kubeconfig.exists():
            raise ClusterError(f"no cluster in {stack.state}: `apiary up --state {args.state}` makes one")
        print(stack.kubeconfig)
    else:
        if args.command == "init":
            stack = Stack(args.state, args.port_offset, detach=True, tracing_endpoint=args.tracing_endpoint,
                          tracing_rate=args.tracing_rate)
            stack.init()
            stack.write_admin_kubeconfig(embed=True)
            print(f"state in {stack.state}; kubeconfig: {stack.kubeconfig}")
        else:
            # traced when the init made a tracing configuration (its --tracing-endpoint)
            stack = Stack(args.state, args.port_offset, detach=True,
                          tracing_endpoint=configured_collector(Stack(args.state).tracing_config))
            agg = stack.aggregated_server(args.name)
            if agg is not None:
                # registered first (its RBAC, Service, Endpoints, APIServices), as `up` does: in
                # compose its container does it, once apiary answers
                stack.wait_proxy(300)
                stack.register(agg)
            cmd = stack.command(args.name)
            os.execvp(cmd[0], cmd)


if __name__ == "__main__":
    main()
