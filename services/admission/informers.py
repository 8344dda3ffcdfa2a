"""The admission service's shared informer factory (client-go's SharedInformerFactory): one informer per
resource however many plugins read it, started with the chain (or at once when asked for later)."""
from __future__ import annotations

import asyncio

import orjson

from apiary_pb import registry_pb2 as rpb
from apiary_pb import registry_pb2_grpc as rgrpc
from services.common import grpcutil
from services.common.errors import APIError, NotFound
from services.common.identity import APISERVER
from services.common.informer import Informer


class InformerFactory:
    def __init__(self, registry: rgrpc.RegistryStub | None) -> None:
        self.registry = registry
        self._informers: dict[tuple[str, str, str], Informer] = {}
        self._started = False

    def informer(self, group: str, version: str, resource: str) -> Informer:
        key = (group, version, resource)
        inf = self._informers.get(key)
        if inf is None:
            if self.registry is None:
                raise ValueError("informers need the registry (--registry-address)")
            inf = self._informers[key] = Informer(self.registry, group, version, resource)
            if self._started:
                inf.start()
        return inf

    def start(self) -> None:
        if not self._started:
            self._started = True
            for inf in self._informers.values():
                inf.start()

    async def stop(self) -> None:
        if self._started:
            self._started = False
            await asyncio.gather(*(inf.stop() for inf in self._informers.values()))


_SHARED: dict[int, InformerFactory] = {}


def shared_informers(registry: rgrpc.RegistryStub | None) -> InformerFactory:
    """The one factory of the plugins built over this registry client (a plugin's start() starts it; stop()
    is idempotent)."""
    key = id(registry)
    if key not in _SHARED:
        _SHARED[key] = InformerFactory(registry)
    return _SHARED[key]


async def cached_or_live(registry: rgrpc.RegistryStub, informer: Informer, namespace: str,
                         name: str) -> dict | None:
    """The object from the informer's store, else read live from the registry (an object created a moment ago
    may not have reached the informer yet); None when it does not exist."""
    cached = informer.store.get(f"{namespace}/{name}" if namespace else name)
    if cached is not None:
        return cached
    group, version, resource = informer.gvr
    req = rpb.APIRequest(verb="get", group=group, version=version, resource=resource, namespace=namespace,
                         name=name, user=APISERVER)
    try:
        resp = await grpcutil.call(registry.Handle(req, timeout=10), "registry")
    except NotFound:
        return None
    if resp.code == 404:
        return None
    if resp.code >= 400:
        raise APIError.from_status_dict(orjson.loads(resp.body))
    return orjson.loads(resp.body)
