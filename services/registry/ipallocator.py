"""ClusterIP allocation, as kube's MultiCIDRServiceAllocator (GA in 1.33): every allocated address is an
networking.k8s.io/v1 IPAddress object named by the address, whose parentRef is the Service holding it.

Creating that object is the allocation: storage refuses a second create of one key, so two registries that pick
the same address at the same time never both have it (the loser picks again), and deleting it is the release.
The range is --service-cluster-ip-range (also the default ServiceCIDR `kubernetes`, servicecidrs.py); its
network address, and an IPv4 range's broadcast address, are never allocated (kube's rule).
"""
from __future__ import annotations

import ipaddress
import logging
import random
import uuid

import orjson

from apiary_pb import envelope_pb2 as pb
from apiary_pb import storage_pb2 as spb
from services.apis.networking import IP_ADDRESS
from services.apiserver.registry.rest import now_rfc3339
from services.common import errors

from .storage_client import StorageClient as Store

log = logging.getLogger(__name__)

DEFAULT_SERVICE_CIDR = "10.96.0.0/12"
ATTEMPTS = 64
# kube's labels on the IPAddresses its allocator creates
FAMILY_LABEL = "ipaddress.kubernetes.io/ip-family"
MANAGED_BY_LABEL = "ipaddress.kubernetes.io/managed-by"
MANAGED_BY = "ipallocator.k8s.io"


class ClusterIPAllocator:
    def __init__(self, store: Store, cidr: str = DEFAULT_SERVICE_CIDR) -> None:
        self.store = store
        self.network = ipaddress.ip_network(cidr)
        self.family = "IPv4" if self.network.version == 4 else "IPv6"
        # the offsets after the network address; an IPv4 range's broadcast address excluded
        self.size = self.network.num_addresses - (2 if self.network.version == 4 else 1)
        self.rng = random.Random()

    def contains(self, ip: str) -> bool:
        try:
            return ipaddress.ip_address(ip) in self.network
        except ValueError:
            return False

    def _allocatable(self, ip: str) -> bool:
        i = int(ipaddress.ip_address(ip)) - int(self.network.network_address) - 1
        return 0 <= i < self.size

    async def _taken(self, ip: str) -> bool:
        try:
            await self.store.get(IP_ADDRESS, "", ip)
        except errors.NotFound:
            return False
        return True

    async def _create(self, ip: str, namespace: str, name: str) -> None:
        """The IPAddress object of ip, as kube's allocator writes it; AlreadyExists when it is taken."""
        body = {"spec": {"parentRef": {"group": "", "resource": "services", "namespace": namespace, "name": name}}}
        env = pb.Object(api_version=IP_ADDRESS.api_version, kind=IP_ADDRESS.kind, body=orjson.dumps(body))
        env.metadata.name = ip
        env.metadata.uid = str(uuid.uuid4())
        env.metadata.creation_timestamp = now_rfc3339()
        env.metadata.labels.update({FAMILY_LABEL: self.family, MANAGED_BY_LABEL: MANAGED_BY})
        env.fields["metadata.name"] = ip
        await self.store.create(IP_ADDRESS, env)

    async def allocate(self, ip: str, namespace: str, name: str, dry_run: bool = False) -> str:
        """Claim a specific address; raises ValueError with kube's reason when it cannot be had."""
        if not self.contains(ip) or not self._allocatable(ip):
            raise ValueError(f"failed to allocate IP {ip}: provided IP ({ip}) is not in the valid range. "
                             f"The range of valid IPs is {self.network}")
        taken = ValueError(f"failed to allocate IP {ip}: provided IP is already allocated")
        if dry_run:
            if await self._taken(ip):
                raise taken
            return ip
        try:
            await self._create(ip, namespace, name)
        except errors.AlreadyExists:
            raise taken from None
        return ip

    async def _in_use(self) -> set[int]:
        resp = await self.store.list(IP_ADDRESS, spb.ListRequest(prefix=IP_ADDRESS.key_prefix))
        base = int(self.network.network_address) + 1
        return {int(ipaddress.ip_address(e.metadata.name)) - base for e in resp.items if self.contains(e.metadata.name)}

    def _free(self, used: set[int]) -> str:
        """A free address of the range: a random offset, scanning on from it (kube's random-scan strategy)."""
        if len(used) >= self.size:
            raise errors.InternalError("failed to allocate a serviceIP: range is full")
        start = self.rng.randrange(self.size)
        for j in range(self.size):
            i = (start + j) % self.size
            if i not in used:
                return str(self.network.network_address + i + 1)
        raise errors.InternalError("failed to allocate a serviceIP: range is full")

    async def allocate_next(self, namespace: str, name: str, dry_run: bool = False) -> str:
        used = await self._in_use()
        for _ in range(ATTEMPTS):
            ip = self._free(used)
            if dry_run:
                return ip
            try:
                await self._create(ip, namespace, name)
                return ip
            except errors.AlreadyExists:  # taken by a concurrent create since the list
                used.add(int(ipaddress.ip_address(ip)) - int(self.network.network_address) - 1)
        raise errors.ServiceUnavailable("the service IP allocation is contended; try again")

    async def release(self, ip: str) -> None:
        if not self.contains(ip):
            return
        try:
            await self.store.delete(IP_ADDRESS, "", ip)
        except errors.NotFound:
            log.info("released IP %s had no IPAddress", ip)
