"""An informer on the kit's own storage (client-go's shared informer, in process): a list, then a
watch from the list's resourceVersion, relisting on 410; it keeps every object in hub form, so an
admission plug-in reads a lister instead of making a call per request."""
from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from apiary_pb import envelope_pb2 as pb
from services.common.backoff import Backoff

from .api import Obj
from .storage import Storage

log = logging.getLogger(__name__)


class Informer:
    def __init__(self, storage: Storage, prefix: str, decode: Callable[[pb.Object], Obj]) -> None:
        self.storage, self.prefix, self.decode = storage, prefix, decode
        self.items: dict[str, Obj] = {}
        self.synced = asyncio.Event()
        self.handlers: list[Callable[[str, Obj], Any]] = []
        self._task: asyncio.Task[None] | None = None

    @staticmethod
    def key(namespace: str, name: str) -> str:
        return f"{namespace}/{name}" if namespace else name

    def get(self, name: str, namespace: str = "") -> Obj | None:
        return self.items.get(self.key(namespace, name))

    def list(self) -> list[Obj]:
        return list(self.items.values())

    def has_synced(self) -> bool:
        return self.synced.is_set()

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name=f"informer {self.prefix}")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    def _key_of(self, obj: pb.Object) -> str:
        return self.key(obj.metadata.namespace, obj.metadata.name)

    async def _run(self) -> None:
        backoff = Backoff(cap=2.0)
        while True:
            try:
                items, rv, _, _ = await self.storage.list(self.prefix)
                self.items = {self._key_of(o): self.decode(o) for o in items}
                self.synced.set()
                async for ev in self.storage.watch(self.prefix, resource_version=rv, allow_bookmarks=True):
                    if ev.type == "ERROR":
                        break  # 410: relist
                    if ev.type == "BOOKMARK":
                        continue
                    key = self._key_of(ev.object)
                    obj = self.decode(ev.object)
                    if ev.type == "DELETED":
                        self.items.pop(key, None)
                    else:
                        self.items[key] = obj
                    for h in self.handlers:
                        h(ev.type, obj)
                    backoff.reset()
            except asyncio.CancelledError:
                raise
            except Exception as e:  # noqa: BLE001 - etcd unreachable: retry with backoff
                log.warning("informer %s: %s", self.prefix, e)
                await asyncio.sleep(backoff.delay())
