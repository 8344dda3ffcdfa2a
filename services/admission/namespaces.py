"""Namespaces as admission plug-ins read them: an informer's cache, and the registry for what the cache
does not have yet (NamespaceLifecycle, and the webhooks' namespaceSelector)."""
from __future__ import annotations

import asyncio
from typing import Any, Protocol

import orjson

from apiary_pb import registry_pb2 as rpb
from apiary_pb import registry_pb2_grpc as rgrpc
from services.common import grpcutil
from services.common.errors import APIError, NotFound
from services.common.identity import APISERVER
from services.common.informer import Informer


class NamespaceLister(Protocol):
    def get(self, name: str) -> dict[str, Any] | None:
        """The namespace from the local cache, None if it is not there."""
        ...

    async def live_get(self, name: str) -> dict[str, Any] | None:
        """The namespace from the registry; None if it does not exist."""
        ...

    async def wait_synced(self, timeout: float) -> bool: ...

    def synced(self) -> bool: ...


class InformerNamespaceLister:
    """Namespaces through the registry: an informer for the cache, Registry.Handle for live reads."""

    def __init__(self, registry: rgrpc.RegistryStub) -> None:
        self.registry = registry
        self.informer = Informer(registry, "", "v1", "namespaces")

    def get(self, name: str) -> dict[str, Any] | None:
        return self.informer.store.get(name)

    async def live_get(self, name: str) -> dict[str, Any] | None:
        req = rpb.APIRequest(verb="get", version="v1", resource="namespaces", name=name, user=APISERVER)
        try:
            resp = await grpcutil.call(self.registry.Handle(req, timeout=10), "registry")
        except NotFound:
            return None
        if resp.code >= 400:
            err = APIError.from_status_dict(orjson.loads(resp.body))
            if err.code == 404:
                return None
            raise err
        return orjson.loads(resp.body)

    async def wait_synced(self, timeout: float) -> bool:
        if self.informer.synced.is_set():  # every request once synced: no timer task to make
            return True
        try:
            await asyncio.wait_for(self.informer.synced.wait(), timeout)
        except asyncio.TimeoutError:
            return False
        return True

    def synced(self) -> bool:
        return self.informer.synced.is_set()

    async def start(self) -> None:
        self.informer.start()

    async def stop(self) -> None:
        await self.informer.stop()
