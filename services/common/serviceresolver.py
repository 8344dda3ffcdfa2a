"""Where a Service's requests go: kube's ServiceResolver (an endpoint of the Service), as the aggregator
reaches an APIService's backend and the admission service a webhook's clientConfig.service.

An ExternalName Service resolves to its DNS name with the port asked for. Any other Service
resolves through its port (the one whose `port` is the one asked for) to a ready address of its
Endpoints and of its EndpointSlices (label kubernetes.io/service-name), with the endpoint port of
the same name, taken round-robin. A ClusterIP is never dialled: here it is only data.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

from services.common.informer import Informer

SERVICE_NAME_LABEL = "kubernetes.io/service-name"
Obj = dict[str, Any]


class ResolveError(Exception):
    """Why a Service has no endpoint; reason is kube-aggregator's availability condition reason."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


@dataclass(frozen=True, slots=True)
class Target:
    host: str
    port: int
    # the name the backend's serving certificate must carry
    server_name: str


class ServiceResolver:
    def __init__(self, services: Informer, endpoints: Informer, slices: Informer | None = None) -> None:
        self.services = services
        self.endpoints = endpoints
        self.slices = slices
        self._turns = itertools.count()
        # EndpointSlices by (namespace, service), rebuilt after a change: not a scan per request
        self._by_service: dict[tuple[str, str], list[Obj]] | None = None
        # what addresses() found (or why it found nothing), until a Service, Endpoints or slice changes
        self._found: dict[tuple[str, str, int], tuple[Target, ...] | ResolveError] = {}
        services.add_handler(self._changed)
        endpoints.add_handler(self._changed)
        if slices is not None:
            slices.add_handler(self._slices_changed)

    def _changed(self, *_: Any) -> None:
        self._found = {}

    def _slices_changed(self, *_: Any) -> None:
        self._by_service = None
        self._found = {}

    def _slices_of(self, namespace: str, name: str) -> list[Obj]:
        if self.slices is None:
            return []
        if self._by_service is None:
            index: dict[tuple[str, str], list[Obj]] = {}
            for sl in self.slices.store.values():
                meta = sl.get("metadata") or {}
                service = (meta.get("labels") or {}).get(SERVICE_NAME_LABEL)
                if service:
                    index.setdefault((meta.get("namespace") or "", service), []).append(sl)
            self._by_service = index
        return self._by_service.get((namespace, name), [])

    def addresses(self, namespace: str, name: str, port: int) -> tuple[Target, ...]:
        """Every address the Service port `port` of namespace/name reaches (raises ResolveError)."""
        key = (namespace, name, port)
        found = self._found.get(key)
        if found is None:
            try:
                found = self._addresses(namespace, name, port)
            except ResolveError as e:
                found = e
            if len(self._found) >= 1024:
                self._found = {}
            self._found[key] = found
        if isinstance(found, ResolveError):
            raise found
        return found

    def _addresses(self, namespace: str, name: str, port: int) -> tuple[Target, ...]:
        server_name = f"{name}.{namespace}.svc"
        svc = self.services.store.get(f"{namespace}/{name}")
        if svc is None:
            raise ResolveError("ServiceNotFound", f"service/{name} in \"{namespace}\" is not present")
        spec = svc.get("spec") or {}
        if spec.get("type") == "ExternalName":
            return (Target(spec.get("externalName") or "", port, server_name),)
        svc_port = next((p for p in spec.get("ports") or [] if p.get("port") == port), None)
        if svc_port is None:
            raise ResolveError("ServicePortError",
                               f"service/{name} in \"{namespace}\" is not listening on port {port}")
        port_name = svc_port.get("name") or ""
        found: list[Target] = []
        ep = self.endpoints.store.get(f"{namespace}/{name}")
        listed = ep is not None
        for subset in (ep or {}).get("subsets") or []:
            ep_port = next((p for p in subset.get("ports") or [] if (p.get("name") or "") == port_name), None)
            if ep_port is None:
                continue
            found += [Target(a.get("ip") or "", int(ep_port.get("port") or 0), server_name)
                      for a in subset.get("addresses") or [] if a.get("ip")]
        for sl in self._slices_of(namespace, name):
            listed = True
            sl_port = next((p for p in sl.get("ports") or [] if (p.get("name") or "") == port_name), None)
            if sl_port is None or not sl_port.get("port"):
                continue
            for e in sl.get("endpoints") or []:
                if (e.get("conditions") or {}).get("ready") is False:
                    continue
                for a in e.get("addresses") or []:
                    t = Target(a, int(sl_port["port"]), server_name)
                    if t not in found:
                        found.append(t)
        if not found:
            if not listed:
                raise ResolveError("EndpointsNotFound", f"cannot find endpoints for service/{name} in \"{namespace}\"")
            raise ResolveError("MissingEndpoints", f"endpoints for service/{name} in \"{namespace}\" have no "
                               "addresses with port name \"" + port_name + "\"")
        return tuple(found)

    def pick(self, namespace: str, name: str, port: int) -> Target:
        """One endpoint of the Service port, in turn."""
        found = self.addresses(namespace, name, port)
        return found[next(self._turns) % len(found)]
