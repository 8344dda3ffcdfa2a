"""The admission service's shared informer factory (client-go's SharedInformerFactory): one informer per
resource however many plugins read it, started with the chain (or at once when asked for later)."""
from __future__ import annotations

import asyncio

from apiary_pb import registry_pb2_grpc as rgrpc
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
