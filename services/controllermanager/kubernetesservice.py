"""kube-apiserver's kubernetes service controller and lease endpoint reconciler (pkg/controlplane/controller/
kubernetesservice, pkg/controlplane/reconcilers/lease.go), once per cluster: the Service `kubernetes` in `default`
(ClusterIP the first address of --service-cluster-ip-range, port 443 "https" to the API servers' secure port),
its Endpoints and its EndpointSlices, listing every API server replica whose lease is current.

Each proxy replica renews a Lease in kube-system naming its address and port (services/proxy/endpointlease.py);
this controller, leader-elected with the others, is their one writer: it syncs when a lease changes and every
SYNC_INTERVAL (kube's endpoint reconcile interval), drops a replica whose lease expired and deletes that lease
(kube's apiserver lease garbage collector). Replicas on one host differ by port, so the endpoints are grouped by
port: an Endpoints subset per port, and an EndpointSlice per port (`kubernetes` for the Service's target port,
`kubernetes-<port>` for another), an EndpointSlice holding one port list.
"""
from __future__ import annotations

import asyncio
import datetime as dt
import ipaddress
import logging
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

from services.apiserver.printers import parse_time
from services.common.background import cancel_and_wait
from services.common.errors import APIError, Conflict, NotFound

from .client import Client, Resource
from .leaderelection import LEASES

log = logging.getLogger(__name__)

Obj = dict[str, Any]
SERVICES = Resource("", "v1", "services", "Service", True, frozenset())
ENDPOINTS = Resource("", "v1", "endpoints", "Endpoints", True, frozenset())
ENDPOINT_SLICES = Resource("discovery.k8s.io", "v1", "endpointslices", "EndpointSlice", True, frozenset())
NAMESPACE, NAME = "default", "kubernetes"
LEASE_NAMESPACE = "kube-system"
IDENTITY_SELECTOR = "apiserver.kubernetes.io/identity=kube-apiserver"
ENDPOINT_ANNOTATION = "apiary.io/endpoint"
SERVICE_NAME_LABEL = "kubernetes.io/service-name"
SKIP_MIRROR = "endpointslice.kubernetes.io/skip-mirror"
SYNC_INTERVAL = 10.0
DEFAULT_SERVICE_CIDR = "10.96.0.0/12"

Endpoint = tuple[str, int]  # (ip, port)


def first_address(cidr: str) -> str:
    """The Service's ClusterIP: the range's first usable address (10.96.0.1 for 10.96.0.0/12)."""
    return str(ipaddress.ip_network(cidr, strict=False).network_address + 1)


def parse_endpoint(value: str) -> Endpoint | None:
    """"<ip>:<port>" or "[<ip>]:<port>", as the proxy writes it; None for anything else."""
    host, sep, port = value.rpartition(":")
    host = host.strip("[]")
    try:
        ipaddress.ip_address(host)
        number = int(port)
    except ValueError:
        return None
    return (host, number) if sep and 0 < number < 65536 else None


def lease_state(lease: Obj, now: dt.datetime) -> tuple[Endpoint | None, bool]:
    """(the replica the lease names, whether it is current: renewed within its duration)."""
    meta, spec = lease.get("metadata") or {}, lease.get("spec") or {}
    renewed = parse_time(spec.get("renewTime"))
    duration = spec.get("leaseDurationSeconds")
    current = renewed is not None and isinstance(duration, int) and renewed + dt.timedelta(seconds=duration) > now
    return parse_endpoint((meta.get("annotations") or {}).get(ENDPOINT_ANNOTATION) or ""), current


def desired_service(cluster_ip: str, target_port: int) -> Obj:
    return {"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": NAME, "namespace": NAMESPACE,
                         "labels": {"component": "apiserver", "provider": "kubernetes"}},
            "spec": {"type": "ClusterIP", "clusterIP": cluster_ip, "sessionAffinity": "None",
                     "ports": [{"name": "https", "port": 443, "protocol": "TCP", "targetPort": target_port}]}}


def _port(port: int) -> Obj:
    return {"name": "https", "port": port, "protocol": "TCP"}


def desired_endpoints(endpoints: list[Endpoint]) -> Obj:
    """The Endpoints: one subset per port, its addresses sorted (kube's RepackSubsets)."""
    ports = sorted({p for _, p in endpoints})
    subsets = [{"addresses": [{"ip": ip} for ip in sorted(ip for ip, p in endpoints if p == port)],
                "ports": [_port(port)]} for port in ports]
    obj: Obj = {"apiVersion": "v1", "kind": "Endpoints",
                "metadata": {"name": NAME, "namespace": NAMESPACE, "labels": {SKIP_MIRROR: "true"}}}
    if subsets:
        obj["subsets"] = subsets
    return obj


def slice_name(port: int, target_port: int) -> str:
    return NAME if port == target_port else f"{NAME}-{port}"


def desired_slices(endpoints: list[Endpoint], target_port: int) -> dict[str, Obj]:
    """The EndpointSlices by name: one per port and address family; `kubernetes` always (maybe empty)."""
    groups: dict[tuple[int, str], list[str]] = {(target_port, "IPv4"): []}
    for ip, port in endpoints:
        groups.setdefault((port, "IPv6" if ":" in ip else "IPv4"), []).append(ip)
    out: dict[str, Obj] = {}
    for (port, family), ips in sorted(groups.items()):
        name = slice_name(port, target_port) + ("-ipv6" if family == "IPv6" else "")
        out[name] = {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                     "metadata": {"name": name, "namespace": NAMESPACE, "labels": {SERVICE_NAME_LABEL: NAME}},
                     "addressType": family,
                     "endpoints": [{"addresses": [ip], "conditions": {"ready": True}} for ip in sorted(ips)],
                     "ports": [_port(port)]}
    return out


def _labels_differ(current: Obj, want: Obj) -> bool:
    labels = (current.get("metadata") or {}).get("labels") or {}
    return any(labels.get(k) != v for k, v in want["metadata"]["labels"].items())


def now_utc() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


class KubernetesServiceController:
    def __init__(self, client: Client, service_cidr: str = DEFAULT_SERVICE_CIDR, target_port: int | None = None,
                 interval: float = SYNC_INTERVAL, clock: Callable[[], dt.datetime] = now_utc) -> None:
        self.client, self.interval, self.clock = client, interval, clock
        self.cluster_ip = first_address(service_cidr)
        # the port clients reach the API on, as this controller's own kubeconfig names it
        self.target_port = target_port or urlsplit(client.rest.server).port or 443
        self.leases = client.informer(LEASES, LEASE_NAMESPACE, params={"labelSelector": IDENTITY_SELECTOR})
        self._wake = asyncio.Event()
        self.leases.add_handler(lambda *_: self._wake.set())
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self.leases.start()
        await self.leases.synced.wait()
        self._task = asyncio.create_task(self._run(), name="kubernetes-service")

    async def stop(self) -> None:
        await cancel_and_wait(self._task)
        await self.leases.stop()

    async def _run(self) -> None:
        while True:
            self._wake.clear()
            try:
                await self.sync()
            except asyncio.CancelledError:
                raise
            except (APIError, OSError) as e:
                log.info("kubernetes service: %s; retrying", getattr(e, "message", e))
            try:
                await asyncio.wait_for(self._wake.wait(), self.next_sync())
            except TimeoutError:
                pass

    def next_sync(self) -> float:
        """Seconds until the next sync: the interval, or sooner when a current lease expires sooner."""
        now, wait = self.clock(), self.interval
        for lease in list(self.leases.store.values()):
            spec = lease.get("spec") or {}
            renewed, duration = parse_time(spec.get("renewTime")), spec.get("leaseDurationSeconds")
            if renewed is not None and isinstance(duration, int):
                left = (renewed + dt.timedelta(seconds=duration) - now).total_seconds()
                if left > 0:
                    wait = min(wait, left + 0.1)
        return wait

    def live_endpoints(self) -> tuple[list[Endpoint], list[Obj]]:
        """The endpoints of the current leases, and the expired leases."""
        now = self.clock()
        live: set[Endpoint] = set()
        expired: list[Obj] = []
        for lease in list(self.leases.store.values()):
            endpoint, current = lease_state(lease, now)
            if not current:
                expired.append(lease)
            elif endpoint is not None:
                live.add(endpoint)
        return sorted(live), expired

    async def sync(self) -> None:
        endpoints, expired = self.live_endpoints()
        for lease in expired:
            meta = lease["metadata"]
            try:
                await self.client.delete(LEASES, LEASE_NAMESPACE, meta["name"], uid=meta.get("uid", ""))
                log.info("kubernetes service: deleted expired lease %s", meta["name"])
            except (NotFound, Conflict):
                pass
        await self._ensure_service()
        await self._ensure(ENDPOINTS, desired_endpoints(endpoints), ("subsets",))
        slices = desired_slices(endpoints, self.target_port)
        for obj in slices.values():
            await self._ensure(ENDPOINT_SLICES, obj, ("addressType", "endpoints", "ports"))
        listed = await self.client.request("GET", ENDPOINT_SLICES.path(NAMESPACE),
                                           params={"labelSelector": f"{SERVICE_NAME_LABEL}={NAME}"})
        for item in listed.get("items") or []:
            name = (item.get("metadata") or {}).get("name") or ""
            if name.startswith(NAME) and name not in slices:
                try:
                    await self.client.delete(ENDPOINT_SLICES, NAMESPACE, name)
                except NotFound:
                    pass

    async def _ensure_service(self) -> None:
        """The Service, created, or its ports and labels put back (the rest of its spec is defaulted and kept)."""
        want = desired_service(self.cluster_ip, self.target_port)
        try:
            current = await self.client.get(SERVICES, NAMESPACE, NAME)
        except NotFound:
            await self.client.create(SERVICES, NAMESPACE, want)
            log.info("kubernetes service: created services %s/%s", NAMESPACE, NAME)
            return
        ports = want["spec"]["ports"]
        if (current.get("spec") or {}).get("ports") == ports and not _labels_differ(current, want):
            return
        current["spec"] = {**(current.get("spec") or {}), "ports": ports}
        await self._update(SERVICES, current, want)

    async def _ensure(self, res: Resource, want: Obj, fields: tuple[str, ...]) -> None:
        """Create the object, or update it where `fields` or its labels differ from `want`."""
        name = want["metadata"]["name"]
        try:
            current = await self.client.get(res, NAMESPACE, name)
        except NotFound:
            await self.client.create(res, NAMESPACE, want)
            log.info("kubernetes service: created %s %s/%s", res.resource, NAMESPACE, name)
            return
        if all(current.get(f) == want.get(f) for f in fields) and not _labels_differ(current, want):
            return
        for f in fields:
            if f in want:
                current[f] = want[f]
            else:
                current.pop(f, None)
        await self._update(res, current, want)

    async def _update(self, res: Resource, current: Obj, want: Obj) -> None:
        meta = current["metadata"]
        meta["labels"] = {**(meta.get("labels") or {}), **want["metadata"]["labels"]}
        await self.client.update(res, current)
        log.info("kubernetes service: updated %s %s/%s", res.resource, NAMESPACE, meta["name"])
