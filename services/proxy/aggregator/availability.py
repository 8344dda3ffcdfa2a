"""kube-aggregator's availability controller: status.conditions[Available] of every APIService.

A local APIService is always available. A remote one is checked when it, its Service or the
Service's Endpoints/EndpointSlices change, and every CHECK_PERIOD: its Service must exist and
listen on the APIService's port, have an endpoint, and answer GET /apis/<group>/<version> with a
2xx within CHECK_TIMEOUT (asked as system:kube-aggregator in system:masters, with the front-proxy
certificate, as kube does). The condition is written through the registry's status subresource,
only when it changed; lastTransitionTime moves only when its status does.
"""
from __future__ import annotations

import asyncio
import datetime
import logging
from typing import Any

import orjson
from prometheus_client import Gauge

from apiary_pb import registry_pb2 as rpb
from apiary_pb import registry_pb2_grpc as rgrpc
from services.apiserver.httpclient import CallError
from services.common import grpcutil
from services.common.background import cancel_and_wait
from services.common.errors import APIError
from services.common.identity import APISERVER, user_pb
from services.common.informer import Informer
from services.common.metrics import KubeCounter

from .proxy import Backends, probe_headers
from .resolver import ResolveError, ServiceResolver, Target, service_ref

log = logging.getLogger(__name__)

CHECK_PERIOD = 30.0
CHECK_TIMEOUT = 6.0
# kube tries a few endpoints at once and takes any success
ATTEMPTS = 5
AGGREGATOR = user_pb("system:kube-aggregator", ["system:masters"])

UNAVAILABLE = Gauge("aggregator_unavailable_apiservice",
                    "Gauge of APIServices which are marked as unavailable broken down by APIService name.",
                    ["name"])
# kube's counter beside the gauge of the same stem: a prometheus_client Counter would claim the stem and
# refuse the gauge (and OpenMetrics would see two families of one name), so it is a KubeCounter, exposed
# under this exact name (of type unknown in OpenMetrics).
UNAVAILABLE_TOTAL = KubeCounter("aggregator_unavailable_apiservice_total",
                                "Counter of APIServices which are marked as unavailable broken down by APIService "
                                "name and reason.", ("name", "reason"))

Obj = dict[str, Any]


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def available(obj: Obj) -> Obj | None:
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c.get("type") == "Available":
            return c
    return None


class AvailabilityController:
    def __init__(self, registry: rgrpc.RegistryStub, apiservices: Informer, services: Informer,
                 endpoints: Informer, slices: Informer, resolver: ServiceResolver, backends: Backends) -> None:
        self.registry = registry
        self.apiservices = apiservices
        self.resolver = resolver
        self.backends = backends
        self._pending: set[str] = set()
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._ticker: asyncio.Task[None] | None = None
        apiservices.add_handler(self._apiservice_changed)
        for informer in (services, endpoints, slices):
            informer.add_handler(self._service_changed)

    # queueing -----------------------------------------------------------------

    def enqueue(self, name: str) -> None:
        self._pending.add(name)
        self._wake.set()

    def _apiservice_changed(self, kind: str, obj: Obj, old: Obj | None) -> None:
        if kind == "DELETED":
            try:
                UNAVAILABLE.remove(obj["metadata"]["name"])
            except KeyError:
                pass
            return
        # its own status writes come back here: only a change of spec asks for a new check
        if old is None or obj.get("spec") != old.get("spec") or available(obj) is None:
            self.enqueue(obj["metadata"]["name"])

    def _service_changed(self, kind: str, obj: Obj, old: Obj | None) -> None:
        meta = obj.get("metadata") or {}
        ns = meta.get("namespace")
        name = (meta.get("labels") or {}).get("kubernetes.io/service-name") if "addressType" in obj \
            else meta.get("name")
        for key, api in list(self.apiservices.store.items()):
            ref = service_ref(api)
            if ref and ref.get("namespace") == ns and ref.get("name") == name:
                self.enqueue(key)

    # running ------------------------------------------------------------------

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="apiservice-availability")
        self._ticker = asyncio.create_task(self._tick(), name="apiservice-availability-resync")

    async def stop(self) -> None:
        await cancel_and_wait(self._ticker)
        await cancel_and_wait(self._task)

    async def _tick(self) -> None:
        while True:
            await asyncio.sleep(CHECK_PERIOD)
            for name in list(self.apiservices.store):
                self.enqueue(name)

    async def _run(self) -> None:
        await self.apiservices.synced.wait()
        while True:
            await self._wake.wait()
            self._wake.clear()
            names, self._pending = self._pending, set()
            await asyncio.gather(*(self.sync(n) for n in names))

    async def sync(self, name: str) -> None:
        obj = self.apiservices.store.get(name)
        if obj is None:
            return
        try:
            if service_ref(obj) is None:
                status, reason, message = "True", "Local", "Local APIServices are always available"
            else:
                status, reason, message = await self.check(obj)
            self._record(name, status, reason)
            await self._write(obj, status, reason, message)
        except asyncio.CancelledError:
            raise
        except APIError as e:
            # a conflict or a registry hiccup: the next event or resync tries again
            log.info("availability of APIService %s not written: %s", name, e.message)
            self._pending.add(name)
        except Exception:  # noqa: BLE001 - one APIService's failure must not stop the others
            log.exception("availability check of APIService %s failed", name)

    async def check(self, obj: Obj) -> tuple[str, str, str]:
        spec = obj.get("spec") or {}
        ref = service_ref(obj) or {}
        try:
            targets = self.resolver.addresses(ref.get("namespace") or "", ref.get("name") or "",
                                              int(ref.get("port") or 443))
        except ResolveError as e:
            return "False", e.reason, e.message
        path = f"/apis/{spec.get('group', '')}/{spec.get('version', '')}"
        errors = await asyncio.gather(*(self._probe(obj, t, path) for t in targets[:ATTEMPTS]))
        if any(e is None for e in errors):
            return "True", "Passed", "all checks passed"
        return "False", "FailedDiscoveryCheck", "; ".join(e for e in errors if e)

    async def _probe(self, obj: Obj, target: Target, path: str) -> str | None:
        host = f"[{target.host}]" if ":" in target.host else target.host
        url = f"https://{host}:{target.port}{path}"
        client = self.backends.client(obj)
        try:
            resp = await client.get(url, probe_headers(AGGREGATOR, "application/json"), CHECK_TIMEOUT,
                                    target.server_name)
        except CallError as e:
            return f"failing or missing response from {url}: {e}"
        if not resp.ok:
            return f"failing or missing response from {url}: bad status from {url}: {resp.status}"
        return None

    @staticmethod
    def _record(name: str, status: str, reason: str) -> None:
        UNAVAILABLE.labels(name).set(0 if status == "True" else 1)

    async def _write(self, obj: Obj, status: str, reason: str, message: str) -> None:
        old = available(obj)
        if old is not None and (old.get("status"), old.get("reason"), old.get("message")) == (status, reason,
                                                                                           message):
            return
        condition = {"type": "Available", "status": status, "reason": reason, "message": message,
                     "lastTransitionTime": old.get("lastTransitionTime") if old and old.get("status") == status
                     else _now()}
        new = dict(obj)
        conditions = [c for c in (obj.get("status") or {}).get("conditions") or [] if c.get("type") != "Available"]
        new["status"] = {**(obj.get("status") or {}), "conditions": [*conditions, condition]}
        req = rpb.APIRequest(verb="update", group="apiregistration.k8s.io", version="v1", resource="apiservices",
                             subresource="status", name=obj["metadata"]["name"], body=orjson.dumps(new),
                             content_type="application/json", user=APISERVER)
        await grpcutil.call(self.registry.Handle(req, timeout=10), "registry")
        if status != "True" and (old is None or (old.get("status"), old.get("reason")) != (status, reason)):
            # counted as it turns unavailable (or unavailable for another reason), not per check
            UNAVAILABLE_TOTAL.labels(obj["metadata"]["name"], reason).inc()
            log.info("APIService %s is not available: %s: %s", obj["metadata"]["name"], reason, message)
