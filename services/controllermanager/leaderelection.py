"""client-go's leaderelection on a coordination.k8s.io/v1 Lease: one replica holds the lease and runs the
controllers; the others retry every retry period and take the lease over once its holder has not renewed
it for a lease duration (measured on the local clock from when this candidate last saw it change, as
client-go does, so that clock skew between replicas does not matter). A leader that cannot renew within
the renew deadline stops its controllers and becomes a candidate again; one that stops releases the lease.
A leader whose lease is still valid renews with one update of the Lease it last wrote (client-go's fast
path), and reads it first only when that update fails."""
from __future__ import annotations

import asyncio
import datetime
import logging
import random
import socket
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from prometheus_client import Gauge

from services.common.errors import APIError, Conflict, NotFound

from .client import Client, Resource

log = logging.getLogger(__name__)

MASTER_STATUS = Gauge("leader_election_master_status",
                      "Gauge of if the reporting system is master of the relevant lease, 0 indicates backup, "
                      "1 indicates master. 'name' is the string used to identify the lease.", ["name"])
LEASES = Resource("coordination.k8s.io", "v1", "leases", "Lease", True,
                  frozenset({"get", "create", "update"}))
JITTER = 1.2  # client-go's JitterFactor


@dataclass(frozen=True)
class Config:
    namespace: str = "kube-system"
    name: str = "kube-controller-manager"
    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0

    def validate(self) -> None:
        """client-go's NewLeaderElector checks."""
        if self.lease_duration <= self.renew_deadline:
            raise ValueError("leaseDuration must be greater than renewDeadline")
        if self.renew_deadline <= JITTER * self.retry_period:
            raise ValueError("renewDeadline must be greater than retryPeriod*JitterFactor")


def identity() -> str:
    return f"{socket.gethostname()}_{uuid.uuid4()}"


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaderElector:
    def __init__(self, client: Client, config: Config, ident: str,
                 on_started: Callable[[], Awaitable[None]], on_stopped: Callable[[], Awaitable[None]]) -> None:
        self.client, self.config, self.identity = client, config, ident
        self.on_started, self.on_stopped = on_started, on_stopped
        self.leading = False
        self._observed: dict[str, Any] = {}  # the lease's spec when it last changed ...
        self._observed_at = 0.0  # ... and when (monotonic)
        self._lease: dict[str, Any] | None = None  # the Lease as this candidate last wrote it
        MASTER_STATUS.labels(config.name).set(0)

    async def run(self) -> None:
        try:
            while True:
                await self._acquire()
                await self._set_leading(True)
                await self._renew()
                await self._set_leading(False)
        finally:
            if self.leading:
                await self._set_leading(False)
                await self._release()

    async def _set_leading(self, leading: bool) -> None:
        self.leading = leading
        MASTER_STATUS.labels(self.config.name).set(1 if leading else 0)
        if leading:
            log.info("%s: became leader of %s/%s", self.identity, self.config.namespace, self.config.name)
            await self.on_started()
        else:
            log.info("%s: leader election lost", self.identity)
            await self.on_stopped()

    async def _acquire(self) -> None:
        while not await self._try_acquire_or_renew():
            await asyncio.sleep(self.config.retry_period * random.uniform(1.0, JITTER))

    async def _renew(self) -> None:
        """Renew every retry period; return when no renewal succeeded for the renew deadline."""
        last = time.monotonic()
        while time.monotonic() - last < self.config.renew_deadline:
            await asyncio.sleep(self.config.retry_period)
            try:
                renewed = await asyncio.wait_for(self._try_acquire_or_renew(),
                                                 self.config.renew_deadline - (time.monotonic() - last))
            except asyncio.TimeoutError:
                renewed = False
            if renewed:
                last = time.monotonic()
            elif self._observed.get("holderIdentity") not in (None, "", self.identity):
                return  # someone else holds it now
        log.info("%s: failed to renew lease %s/%s within %.0fs", self.identity, self.config.namespace,
                 self.config.name, self.config.renew_deadline)

    def _spec(self, transitions: int, acquire_time: str) -> dict[str, Any]:
        return {"holderIdentity": self.identity, "leaseDurationSeconds": int(self.config.lease_duration),
                "acquireTime": acquire_time, "renewTime": _now(), "leaseTransitions": transitions}

    def _lease_valid(self) -> bool:
        return time.monotonic() < self._observed_at + float(self._observed.get("leaseDurationSeconds") or 0)

    async def _try_acquire_or_renew(self) -> bool:
        if self.leading and self._lease is not None and self._lease_valid() and await self._renew_optimistically():
            return True
        ns, name = self.config.namespace, self.config.name
        try:
            lease = await self.client.get(LEASES, ns, name)
        except NotFound:
            spec = self._spec(0, _now())
            try:
                self._lease = await self.client.create(LEASES, ns, {
                    "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                    "metadata": {"name": name, "namespace": ns}, "spec": spec})
            except APIError as e:
                log.info("creating lease %s/%s: %s", ns, name, e.message)
                return False
            self._observe(spec)
            return True
        except APIError as e:
            log.info("reading lease %s/%s: %s", ns, name, e.message)
            return False
        except Exception as e:  # noqa: BLE001 - the API is unreachable: not acquired this time
            log.info("reading lease %s/%s: %s", ns, name, e)
            return False
        spec = lease.get("spec") or {}
        if spec != self._observed:
            self._observe(spec)
        holder = spec.get("holderIdentity") or ""
        expired = time.monotonic() > self._observed_at + float(spec.get("leaseDurationSeconds") or 0)
        if holder and holder != self.identity and not expired:
            return False
        transitions = int(spec.get("leaseTransitions") or 0)
        if holder == self.identity:
            new = self._spec(transitions, spec.get("acquireTime") or _now())
        else:
            new = self._spec(transitions + 1, _now())
        lease["spec"] = new
        try:
            self._lease = await self.client.update(LEASES, lease)
        except Conflict:
            return False
        except Exception as e:  # noqa: BLE001
            log.info("updating lease %s/%s: %s", ns, name, e)
            return False
        self._observe(new)
        return True

    async def _renew_optimistically(self) -> bool:
        """client-go's fast path: the renewal written over the Lease as last written (its resourceVersion
        guards it); any failure, a conflict included, leaves the slow path to read it and decide."""
        assert self._lease is not None
        spec = self._observed
        new = self._spec(int(spec.get("leaseTransitions") or 0), spec.get("acquireTime") or _now())
        try:
            self._lease = await self.client.update(LEASES, {**self._lease, "spec": new})
        except Exception as e:  # noqa: BLE001 - the slow path follows at once
            log.info("renewing lease %s/%s optimistically: %s; reading it", self.config.namespace,
                     self.config.name, getattr(e, "message", e))
            self._lease = None
            return False
        self._observe(new)
        return True

    def _observe(self, spec: dict[str, Any]) -> None:
        self._observed, self._observed_at = dict(spec), time.monotonic()

    async def _release(self) -> None:
        """ReleaseOnCancel: leave the lease to the next candidate at once."""
        try:
            lease = await self.client.get(LEASES, self.config.namespace, self.config.name)
            if (lease.get("spec") or {}).get("holderIdentity") != self.identity:
                return
            lease["spec"] = {**lease["spec"], "holderIdentity": "", "leaseDurationSeconds": 1,
                             "renewTime": _now(), "acquireTime": _now()}
            await self.client.update(LEASES, lease)
        except Exception as e:  # noqa: BLE001 - it expires by itself anyway
            log.info("releasing lease: %s", e)
