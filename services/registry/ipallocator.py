"""ClusterIP allocation, as kube's registry/core/service/ipallocator with its etcd-backed bitmap.

The allocation state is one RangeAllocation object in storage (/registry/ranges/serviceips, as in
kube): the range and a bitmap of the addresses taken, changed only by a compare-and-swap on its
resourceVersion (kube's GuaranteedUpdate). Two registries that allocate at the same time both read
the same bitmap; only one write succeeds, the other re-reads and picks again, so an address is
never handed out twice. The network and broadcast addresses are never allocated (kube's rule).
"""
from __future__ import annotations

import base64
import ipaddress
import logging
import random
from collections.abc import Callable

import orjson

from apiary_pb import envelope_pb2 as pb
from services.apiserver.resource import ResourceInfo
from services.common import errors

from .storage_client import StorageClient as Store

log = logging.getLogger(__name__)

DEFAULT_SERVICE_CIDR = "10.96.0.0/12"
ATTEMPTS = 64
# Not served: only the allocator reads and writes it (kube's RangeAllocation is internal too).
RANGE_INFO = ResourceInfo(group="", version="v1", kind="RangeAllocation", plural="rangeallocations",
                          singular="rangeallocation", namespaced=False, key_prefix="/registry/ranges/")
RANGE_NAME = "serviceips"


class RangeFull(Exception):
    pass


class Bitmap:
    """Taken offsets of a range (offset 0 is the network address's successor)."""

    def __init__(self, size: int, data: bytes = b"") -> None:
        self.size = size
        self.bits = bytearray((size + 7) // 8)
        self.bits[:len(data)] = data[:len(self.bits)]

    def taken(self, i: int) -> bool:
        return bool(self.bits[i >> 3] & (1 << (i & 7)))

    def set(self, i: int, value: bool) -> None:
        if value:
            self.bits[i >> 3] |= 1 << (i & 7)
        else:
            self.bits[i >> 3] &= ~(1 << (i & 7)) & 0xFF

    def free(self, rng: random.Random) -> int:
        """A random free offset (kube's random-scan strategy), scanning on from a random start."""
        start = rng.randrange(self.size)
        for j in range(self.size):
            i = (start + j) % self.size
            if self.bits[i >> 3] == 0xFF:
                continue
            if not self.taken(i):
                return i
        raise RangeFull()


class ClusterIPAllocator:
    def __init__(self, store: Store, cidr: str = DEFAULT_SERVICE_CIDR) -> None:
        self.store = store
        self.network = ipaddress.ip_network(cidr)
        # network and broadcast excluded; kube caps the bitmap of a large IPv6 range the same way
        self.size = min(self.network.num_addresses - 2, 1 << 20) if self.network.version == 4 \
            else min(self.network.num_addresses - 1, 1 << 16)
        self.rng = random.Random()

    def contains(self, ip: str) -> bool:
        try:
            return ipaddress.ip_address(ip) in self.network
        except ValueError:
            return False

    def _offset(self, ip: str) -> int | None:
        i = int(ipaddress.ip_address(ip)) - int(self.network.network_address) - 1
        return i if 0 <= i < self.size else None

    async def _read(self) -> tuple[Bitmap, str, bool]:
        try:
            env = await self.store.get(RANGE_INFO, "", RANGE_NAME)
        except errors.NotFound:
            return Bitmap(self.size), "", False
        body = orjson.loads(env.body or b"{}")
        if body.get("range") != str(self.network):
            # kube refuses to start on a changed range; here a changed flag starts a fresh bitmap
            log.warning("service IP range changed from %s to %s", body.get("range"), self.network)
            return Bitmap(self.size), env.metadata.resource_version, True
        return Bitmap(self.size, base64.b64decode(body.get("data") or "")), env.metadata.resource_version, True

    async def _write(self, bitmap: Bitmap, rv: str, exists: bool) -> None:
        env = pb.Object(api_version="v1", kind="RangeAllocation", body=orjson.dumps(
            {"range": str(self.network), "data": base64.b64encode(bytes(bitmap.bits)).decode()}))
        env.metadata.name = RANGE_NAME
        if exists:
            await self.store.update(RANGE_INFO, env, rv)
        else:
            await self.store.create(RANGE_INFO, env)

    async def _change(self, pick: Callable[[Bitmap], str], dry_run: bool = False) -> str:
        """GuaranteedUpdate of the bitmap: read, change, compare-and-swap; again on a conflict."""
        for _ in range(ATTEMPTS):
            bitmap, rv, exists = await self._read()
            ip = pick(bitmap)
            if dry_run:
                return ip
            try:
                await self._write(bitmap, rv, exists)
                return ip
            except (errors.Conflict, errors.AlreadyExists):
                continue
        raise errors.ServiceUnavailable("the service IP allocation is contended; try again")

    async def allocate_next(self, dry_run: bool = False) -> str:
        def pick(bitmap: Bitmap) -> str:
            try:
                i = bitmap.free(self.rng)
            except RangeFull:
                raise errors.InternalError("failed to allocate a serviceIP: range is full") from None
            bitmap.set(i, True)
            return str(self.network.network_address + i + 1)
        return await self._change(pick, dry_run)

    async def allocate(self, ip: str, dry_run: bool = False) -> str:
        """Claim a specific address; raises ValueError with kube's reason when it cannot be had."""
        def pick(bitmap: Bitmap) -> str:
            i = self._offset(ip)
            if i is None:
                raise ValueError(f"failed to allocate IP {ip}: provided IP ({ip}) is not in the valid range. "
                                 f"The range of valid IPs is {self.network}")
            if bitmap.taken(i):
                raise ValueError(f"failed to allocate IP {ip}: provided IP is already allocated")
            bitmap.set(i, True)
            return ip
        return await self._change(pick, dry_run)

    async def release(self, ip: str) -> None:
        i = self._offset(ip) if self.contains(ip) else None
        if i is None:
            return

        def pick(bitmap: Bitmap) -> str:
            bitmap.set(i, False)
            return ip
        await self._change(pick)
