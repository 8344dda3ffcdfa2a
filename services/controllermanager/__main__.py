"""python -m services.controllermanager: kube-controller-manager's controllers for apiary."""
from __future__ import annotations

from services.common import loading

if __name__ == "__main__":  # run as the program (python -m), not imported by tests, tools or the compact host
    loading.start()  # before the other imports: the cyclic collector rests while they load

import argparse
import asyncio
import datetime as dt
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from services.common import config, runtime
from services.common.backoff import Backoff
from services.common.duration import flag as _duration

from .client import Client
from .csrapproving import CSRApprovingController
from .csrcleaner import CSRCleanerController
from .csrsigning import CertificateAuthority, CSRSigningController
from .flowcontrol import PriorityAndFairnessConfigController
from .garbagecollector import GarbageCollector
from .kubernetesservice import DEFAULT_SERVICE_CIDR, KubernetesServiceController, first_address
from .leaderelection import Config, LeaderElector, identity
from .namespace import NamespaceController
from .persistentvolume import PersistentVolumeBinder
from .resourcequota import ResourceQuotaController
from .serviceaccounts import RootCACertPublisher, ServiceAccountsController
from .volumeprotection import PVCProtectionController, PVProtectionController

log = logging.getLogger("services.controllermanager")

# kube's controller names (1.33) and the older aliases --controllers also takes.
CONTROLLERS = {
    "garbage-collector-controller": ("garbagecollector",),
    "namespace-controller": ("namespace",),
    "resourcequota-controller": ("resourcequota",),
    "serviceaccount-controller": ("serviceaccount",),
    "root-ca-certificate-publisher-controller": ("root-ca-cert-publisher",),
    "persistentvolume-binder-controller": ("persistentvolume-binder",),
    "persistentvolumeclaim-protection-controller": ("pvc-protection",),
    "persistentvolume-protection-controller": ("pv-protection",),
    "certificatesigningrequest-approving-controller": ("csrapproving",),
    "certificatesigningrequest-signing-controller": ("csrsigning",),
    "certificatesigningrequest-cleaner-controller": ("csrcleaner",),
    # apiary's: kube-apiserver's APF configuration producer and status writer, once per cluster
    "priority-and-fairness-config-controller": ("priority-and-fairness-config",),
    # apiary's: kube-apiserver's kubernetes service controller and lease endpoint reconciler, once per cluster
    "kubernetes-service-controller": ("kubernetesservice",),
}
SIGNING = "certificatesigningrequest-signing-controller"
CSR_CONTROLLERS: dict[str, Callable[[Client, argparse.Namespace], Any]] = {
    "certificatesigningrequest-approving-controller": lambda c, a: CSRApprovingController(c),
    SIGNING: lambda c, a: CSRSigningController(
        c, CertificateAuthority.load(a.cluster_signing_cert_file, a.cluster_signing_key_file),
        dt.timedelta(seconds=a.cluster_signing_duration)),
    "certificatesigningrequest-cleaner-controller": lambda c, a: CSRCleanerController(c),
}
ALIASES = {alias: name for name, aliases in CONTROLLERS.items() for alias in (name, *aliases)}


def enabled_controllers(spec: list[str]) -> list[str]:
    """kube's --controllers: `*` turns on every default controller, `name` one, `-name` turns one off."""
    on: set[str] = set()
    off: set[str] = set()
    for item in spec:
        item = item.strip()
        if item == "*":
            on.update(CONTROLLERS)
            continue
        neg = item.startswith("-")
        name = ALIASES.get(item.lstrip("-"))
        if name is None:
            raise ValueError(f'"{item.lstrip("-")}" is not in the list of known controllers')
        (off if neg else on).add(name)
    return [c for c in CONTROLLERS if c in on and c not in off]


def _bool(value: str) -> bool:
    if value.lower() not in ("true", "false", "1", "0"):
        raise argparse.ArgumentTypeError(f"invalid boolean {value!r}")
    return value.lower() in ("true", "1")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m services.controllermanager", description=__doc__)
    config.add_common_flags(p, "controllermanager")
    p.add_argument("--kubeconfig", required=True, help="how to reach the API: server, CA and credentials")
    p.add_argument("--controllers", default="*",
                   help="comma-separated controllers to run: '*' all, 'name' one, '-name' not that one; "
                        f"known: {', '.join(CONTROLLERS)}")
    p.add_argument("--root-ca-file", default="",
                   help="the cluster CA published as kube-root-ca.crt's ca.crt in every namespace")
    p.add_argument("--leader-elect", type=_bool, nargs="?", const=True, default=True,
                   help="run the controllers only while holding the leader election Lease")
    p.add_argument("--leader-elect-lease-duration", type=_duration, default=15.0)
    p.add_argument("--leader-elect-renew-deadline", type=_duration, default=10.0)
    p.add_argument("--leader-elect-retry-period", type=_duration, default=2.0)
    p.add_argument("--leader-elect-resource-name", default="kube-controller-manager")
    p.add_argument("--leader-elect-resource-namespace", default="kube-system")
    p.add_argument("--concurrent-gc-syncs", type=int, default=4)
    p.add_argument("--concurrent-namespace-syncs", type=int, default=2)
    p.add_argument("--concurrent-resource-quota-syncs", type=int, default=5,
                   help="the number of resource quotas that are allowed to sync concurrently")
    p.add_argument("--pvclaimbinder-sync-period", type=_duration, default=15.0,
                   help="the period for syncing persistent volumes and persistent volume claims")
    p.add_argument("--resource-quota-sync-period", type=_duration, default=300.0,
                   help="the period for syncing quota usage status in the system (a full recount of every quota)")
    p.add_argument("--cluster-signing-cert-file", default="",
                   help="PEM CA certificate the csrsigning controller issues kube's built-in signers' certificates "
                        "with")
    p.add_argument("--cluster-signing-key-file", default="", help="PEM private key of --cluster-signing-cert-file")
    p.add_argument("--cluster-signing-duration", type=_duration, default=365 * 24 * 3600.0,
                   help="the longest a signed certificate is valid for; a request's spec.expirationSeconds may ask "
                        "for less (default 8760h0m0s)")
    p.add_argument("--service-cluster-ip-range", default=DEFAULT_SERVICE_CIDR,
                   help="the Services' CIDR (the registry's flag of that name): the `kubernetes` Service takes its "
                        "first address")
    args = p.parse_args(argv)
    try:
        first_address(args.service_cluster_ip_range)
    except ValueError as e:
        p.error(f"--service-cluster-ip-range: {e}")
    try:
        args.enabled = enabled_controllers(args.controllers.split(","))
    except ValueError as e:
        p.error(f"--controllers: {e}")
    args.election = Config(args.leader_elect_resource_namespace, args.leader_elect_resource_name,
                           args.leader_elect_lease_duration, args.leader_elect_renew_deadline,
                           args.leader_elect_retry_period)
    if args.leader_elect:
        try:
            args.election.validate()
        except ValueError as e:
            p.error(str(e))
    if not (args.cluster_signing_cert_file and args.cluster_signing_key_file) and SIGNING in args.enabled:
        args.enabled.remove(SIGNING)  # kube: "skipping CSR signer controller because no csr cert/key was specified"
    if "root-ca-certificate-publisher-controller" in args.enabled and not args.root_ca_file:
        p.error("--root-ca-file is needed by the root-ca-certificate-publisher-controller")
    return args


class ControllerManager:
    """Starts the enabled controllers when leading and stops them when not."""

    def __init__(self, client: Client, args: argparse.Namespace) -> None:
        self.client, self.args = client, args
        self.running: list[tuple[str, Callable[[], Awaitable[None]]]] = []
        self._starting: asyncio.Task[None] | None = None

    def _build(self, name: str) -> tuple[Callable[[], Awaitable[None]], Callable[[], Awaitable[None]]]:
        c = self.client
        if name == "garbage-collector-controller":
            gc = GarbageCollector(c, self.args.concurrent_gc_syncs)
            return gc.start, gc.stop
        if name == "namespace-controller":
            ns = NamespaceController(c, self.args.concurrent_namespace_syncs)
            return ns.start, ns.stop
        if name == "resourcequota-controller":
            rq = ResourceQuotaController(c, self.args.concurrent_resource_quota_syncs,
                                         self.args.resource_quota_sync_period)
            return rq.start, rq.stop
        if name == "priority-and-fairness-config-controller":
            apf = PriorityAndFairnessConfigController(c)
            return apf.start, apf.stop
        if name == "persistentvolume-binder-controller":
            binder = PersistentVolumeBinder(c, self.args.pvclaimbinder_sync_period)
            return binder.start, binder.stop
        if name in ("persistentvolumeclaim-protection-controller", "persistentvolume-protection-controller"):
            protection = (PVCProtectionController if name.startswith("persistentvolumeclaim") else
                          PVProtectionController)(c)
            return protection.start, protection.stop
        if name == "serviceaccount-controller":
            sa = ServiceAccountsController(c)
            return sa.start, sa.stop
        if name == "kubernetes-service-controller":
            ks = KubernetesServiceController(c, self.args.service_cluster_ip_range)
            return ks.start, ks.stop
        if name in CSR_CONTROLLERS:
            csr = CSR_CONTROLLERS[name](c, self.args)
            return csr.start, csr.stop
        ca = RootCACertPublisher(c, Path(self.args.root_ca_file).read_text())
        return ca.start, ca.stop

    async def start(self) -> None:
        """Started in the background: a controller waiting on its informers must not hold up the lease."""
        self._starting = asyncio.create_task(self._start_all(), name="start-controllers")

    async def _start_all(self) -> None:
        """Every controller at once, as kube starts each in its own goroutine: one waiting on its informers
        (the garbage collector syncs an informer per resource) does not hold up the others."""
        await asyncio.gather(*(self._start_one(name) for name in self.args.enabled))

    async def _start_one(self, name: str) -> None:
        start, stop = self._build(name)
        self.running.append((name, stop))
        backoff = Backoff()
        while True:
            try:
                await start()
                break
            except asyncio.CancelledError:
                raise
            except Exception as e:  # noqa: BLE001 - the API is not there yet: try again
                log.info("starting %s: %s; retrying", name, e)
                await stop()
                await asyncio.sleep(backoff.delay())
        log.info("started %s", name)

    async def stop(self) -> None:
        if self._starting is not None:
            self._starting.cancel()
            await asyncio.gather(self._starting, return_exceptions=True)
            self._starting = None
        while self.running:
            name, stop = self.running.pop()
            try:
                await stop()
            except Exception:
                log.exception("stopping %s", name)


async def assemble(service: runtime.Service) -> str:
    args = service.args
    client = Client.from_kubeconfig(args.kubeconfig)
    service.client(client.close)
    manager = ControllerManager(client, args)
    if args.leader_elect:
        elector = LeaderElector(client, args.election, identity(), manager.start, manager.stop)
        service.task(elector.run, "leader-election")
    else:
        service.component(manager.start, manager.stop)
    return f"controllers {','.join(args.enabled)}; leader election {'on' if args.leader_elect else 'off'}"


if __name__ == "__main__":
    runtime.main("controllermanager", parse_args(), assemble)
