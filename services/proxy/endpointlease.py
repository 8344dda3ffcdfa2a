"""This API server replica's lease (kube-apiserver's lease endpoint reconciler, its UpdateLease half): a
coordination.k8s.io/v1 Lease in kube-system, labelled as kube labels its API servers' identity leases and
annotated with the address and port clients reach this replica on, renewed every RENEW_INTERVAL and valid for
LEASE_DURATION; deleted when the replica stops (kube's RemoveEndpoints on shutdown), so that it leaves the
`kubernetes` Service's endpoints at once rather than when the lease expires.

The controller-manager's kubernetes-service controller reads these leases and writes the Service, its Endpoints
and EndpointSlices (services/controllermanager/kubernetesservice.py)."""
from __future__ import annotations

import asyncio
import datetime as dt
import hashlib
import logging
import uuid
from typing import Any

import orjson

from apiary_pb import registry_pb2 as rpb
from apiary_pb import registry_pb2_grpc as rgrpc
from services.common import grpcutil
from services.common.background import cancel_and_wait
from services.common.backoff import Backoff
from services.common.errors import APIError, Conflict, NotFound
from services.common.identity import APISERVER

log = logging.getLogger(__name__)

NAMESPACE = "kube-system"
IDENTITY_LABEL = "apiserver.kubernetes.io/identity"
IDENTITY = "kube-apiserver"
ENDPOINT_ANNOTATION = "apiary.io/endpoint"  # "<ip>:<port>"; "[<ip>]:<port>" for IPv6
# kube's --endpoint-reconciler-type=lease: a master lease lives 15 s and is renewed every 10 s; a third of the
# lifetime here, so that one renewal may fail without the replica dropping out
LEASE_DURATION = 15
RENEW_INTERVAL = 5.0


def endpoint(ip: str, port: int) -> str:
    return f"[{ip}]:{port}" if ":" in ip else f"{ip}:{port}"


def lease_name(ip: str, port: int) -> str:
    """apiserver-<hash>: kube names its identity leases after a hash of the host; the port tells replicas that
    share one apart."""
    return "apiserver-" + hashlib.sha256(endpoint(ip, port).encode()).hexdigest()[:26]


def micro_time(t: dt.datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class EndpointLease:
    def __init__(self, registry: rgrpc.RegistryStub, ip: str, port: int) -> None:
        self.registry = registry
        self.name = lease_name(ip, port)
        self.endpoint = endpoint(ip, port)
        self.holder = f"apiserver-{uuid.uuid4()}"
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="endpoint-lease")

    async def stop(self) -> None:
        await cancel_and_wait(self._task)
        try:
            await self._call("delete", self.name, timeout=2.0)
            log.info("deleted lease %s/%s (%s)", NAMESPACE, self.name, self.endpoint)
        except (APIError, OSError) as e:
            log.info("lease %s/%s not deleted: %s", NAMESPACE, self.name, getattr(e, "message", e))

    async def _run(self) -> None:
        backoff = Backoff()
        while True:
            try:
                await self.renew()
                backoff.reset()
                await asyncio.sleep(RENEW_INTERVAL)
            except asyncio.CancelledError:
                raise
            except (APIError, OSError) as e:
                delay = min(backoff.delay(), RENEW_INTERVAL)
                log.info("lease %s/%s not renewed: %s; retrying in %.1fs", NAMESPACE, self.name,
                         getattr(e, "message", e), delay)
                await asyncio.sleep(delay)

    def desired(self, now: dt.datetime) -> dict[str, Any]:
        return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": self.name, "namespace": NAMESPACE, "labels": {IDENTITY_LABEL: IDENTITY},
                             "annotations": {ENDPOINT_ANNOTATION: self.endpoint}},
                "spec": {"holderIdentity": self.holder, "leaseDurationSeconds": LEASE_DURATION,
                         "acquireTime": micro_time(now), "renewTime": micro_time(now)}}

    async def renew(self) -> None:
        now = dt.datetime.now(dt.timezone.utc)
        want = self.desired(now)
        try:
            current = await self._call("get", self.name)
        except NotFound:
            await self._call("create", body=want)
            log.info("created lease %s/%s for %s", NAMESPACE, self.name, self.endpoint)
            return
        meta = current.setdefault("metadata", {})
        meta.setdefault("labels", {}).update(want["metadata"]["labels"])
        meta.setdefault("annotations", {}).update(want["metadata"]["annotations"])
        spec = current.setdefault("spec", {})
        if spec.get("holderIdentity") != self.holder:
            spec["acquireTime"] = want["spec"]["acquireTime"]
        spec.update(holderIdentity=self.holder, leaseDurationSeconds=LEASE_DURATION, renewTime=micro_time(now))
        try:
            await self._call("update", self.name, current)
        except Conflict:
            return  # changed meanwhile: the next renewal reads it again

    async def _call(self, verb: str, name: str = "", body: dict[str, Any] | None = None,
                    timeout: float = 5.0) -> dict[str, Any]:
        req = rpb.APIRequest(verb=verb, group="coordination.k8s.io", version="v1", resource="leases",
                             namespace=NAMESPACE, name=name, body=orjson.dumps(body) if body is not None else b"",
                             content_type="application/json", user=APISERVER)
        resp = await grpcutil.call(self.registry.Handle(req, timeout=timeout), "registry")
        return orjson.loads(resp.body) if resp.body else {}
