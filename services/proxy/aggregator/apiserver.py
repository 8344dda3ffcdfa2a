"""The aggregator's assembly (kube-aggregator's apiserver.go): `Aggregator` puts routing, availability and
discovery of remote APIServices together for the proxy's chain."""
from __future__ import annotations

from typing import Any

from apiary_pb import envelope_pb2 as pb
from apiary_pb import registry_pb2_grpc as rgrpc
from services.apiserver.requestinfo import RequestInfo
from services.common.informer import Informer

from ..context import Context
from ..discovery import Discovery
from .availability import AvailabilityController
from .discovery import RemoteDiscovery
from .proxy import Backends, RemoteProxy
from .resolver import ServiceResolver, service_ref


class Aggregator:
    """Remote APIServices: which requests they take, forwarding them, their Available condition and
    their part of discovery, on informers of Services, Endpoints and EndpointSlices (kube-aggregator's
    listers) beside the proxy's APIService informer."""

    def __init__(self, registry: rgrpc.RegistryStub, apiservices: Informer, discovery: Discovery,
                 proxy_client_cert_file: str = "", proxy_client_key_file: str = "") -> None:
        self.apiservices = apiservices
        self.discovery = discovery
        self.services = Informer(registry, "", "v1", "services")
        self.endpoints = Informer(registry, "", "v1", "endpoints")
        self.endpoint_slices = Informer(registry, "discovery.k8s.io", "v1", "endpointslices")
        self.resolver = ServiceResolver(self.services, self.endpoints, self.endpoint_slices)
        self.backends = Backends(proxy_client_cert_file, proxy_client_key_file)
        self.availability = AvailabilityController(registry, apiservices, self.services, self.endpoints,
                                                   self.endpoint_slices, self.resolver, self.backends)
        self.remote_discovery = RemoteDiscovery(apiservices, self.resolver, self.backends, self._discovery_changed)
        self.proxy = RemoteProxy(self.resolver, self.backends, self._unreachable)
        discovery.apiservices = lambda: apiservices.store
        discovery.remote_entries = self.remote_discovery.entries
        discovery.remote_openapi = self.remote_discovery.openapi

    def synced(self) -> bool:
        return all(i.synced.is_set() for i in (self.services, self.endpoints, self.endpoint_slices))

    def start(self) -> None:
        for informer in (self.services, self.endpoints, self.endpoint_slices):
            informer.start()
        self.availability.start()
        self.remote_discovery.start()

    async def stop(self) -> None:
        await self.availability.stop()
        await self.remote_discovery.stop()
        for informer in (self.services, self.endpoints, self.endpoint_slices):
            await informer.stop()
        await self.backends.aclose()

    def remote_apiservice(self, info: RequestInfo) -> dict[str, Any] | None:
        """The APIService whose server answers this request, when that is not apiary itself: every
        resource path of its group-version and /apis/<group>/<version> (its discovery)."""
        if info.api_prefix != "apis":
            return None
        group, version = info.api_group, info.api_version
        if not info.is_resource_request:
            parts = info.path.strip("/").split("/")
            if len(parts) != 3:
                return None
            group, version = parts[1], parts[2]
        if not group:
            return None
        apiservice = self.apiservices.store.get(f"{version}.{group}")
        if apiservice is None or service_ref(apiservice) is None:
            return None
        return apiservice

    async def forward(self, ctx: Context, apiservice: dict[str, Any], user: pb.UserInfo, has_body: bool) -> None:
        await self.proxy.forward(ctx, apiservice, user, has_body)

    def close_watches(self) -> None:
        """At shutdown: the watches forwarded to APIService servers are cut (RemoteProxy.close_watches)."""
        self.proxy.close_watches()

    def _unreachable(self, name: str) -> None:
        """A forwarded request found the APIService's server gone: check it and its discovery now."""
        self.availability.enqueue(name)
        self.remote_discovery.enqueue(name)

    def _discovery_changed(self) -> None:
        if self.discovery.loaded.is_set():
            self.discovery.merge()
