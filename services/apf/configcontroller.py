"""The apf service's view of the cluster's configuration (kube's apf_controller, its consumer side): one
informer per flowcontrol kind through the registry; after every change the objects are digested again
and handed to the FlowController, coalesced so that a burst of events makes one new configuration.

Until both informers have listed once, the FlowController keeps kube's bootstrap configuration
(config.BOOTSTRAP). Status writes (the Dangling condition) are the controller-manager's, once per cluster.
"""
from __future__ import annotations

import asyncio
import logging
from typing import Any

from apiary_pb import registry_pb2_grpc as rgrpc
from services.common.background import cancel_and_wait
from services.common.informer import Informer

from .config import digest
from .controller import FlowController

log = logging.getLogger(__name__)

GROUP, VERSION = "flowcontrol.apiserver.k8s.io", "v1"


class ConfigController:
    def __init__(self, registry: rgrpc.RegistryStub, controller: FlowController) -> None:
        self.controller = controller
        self.flow_schemas = Informer(registry, GROUP, VERSION, "flowschemas")
        self.priority_levels = Informer(registry, GROUP, VERSION, "prioritylevelconfigurations")
        for inf in (self.flow_schemas, self.priority_levels):
            inf.add_handler(self._changed)
        self._pending: asyncio.Handle | None = None
        self._first: asyncio.Task[None] | None = None
        self._names: tuple[set[str], set[str]] = (set(), set())  # what the last digest held, for the log

    def start(self) -> None:
        self.flow_schemas.start()
        self.priority_levels.start()
        self._first = asyncio.create_task(self._first_sync(), name="apf-config-first-sync")

    async def stop(self) -> None:
        await cancel_and_wait(self._first)
        if self._pending is not None:
            self._pending.cancel()
        await self.priority_levels.stop()
        await self.flow_schemas.stop()

    def synced(self) -> bool:
        return self.flow_schemas.synced.is_set() and self.priority_levels.synced.is_set()

    def _changed(self, _typ: str, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
        if old is not None and old.get("spec") == obj.get("spec") and \
                (old.get("metadata") or {}).get("uid") == (obj.get("metadata") or {}).get("uid"):
            return  # a status or metadata write: the configuration is the same
        if self._pending is None:
            self._pending = asyncio.get_running_loop().call_soon(self._digest)

    def _digest(self) -> None:
        self._pending = None
        if not self.synced():
            return  # one kind alone would make the other's objects look missing; _first_sync digests both
        cfg = digest(self.flow_schemas.store.values(), self.priority_levels.store.values())
        self.controller.reconfigure(cfg)
        names = ({fs.name for fs in cfg.flow_schemas}, {pl.name for pl in cfg.priority_levels})
        changes = [f"{what} {verb}: {', '.join(sorted(diff))}"
                   for what, new, old in zip(("flow schemas", "priority levels"), names, self._names)
                   for verb, diff in (("added", new - old), ("removed", old - new)) if diff]
        self._names = names
        log.info("configuration: %d flow schemas, %d priority levels%s", len(cfg.flow_schemas),
                 len(cfg.priority_levels), "".join(f"; {c}" for c in changes))

    async def _first_sync(self) -> None:
        await self.flow_schemas.synced.wait()
        await self.priority_levels.synced.wait()
        self._changed("", {}, None)
