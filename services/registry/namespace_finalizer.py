"""The namespace controller's deletion half: empty a Terminating namespace, then let it go.

Driven by a list+watch of namespaces straight from storage; it deletes every
namespaced object of the catalogue in that namespace (objects with finalizers are
marked for deletion and waited for), removes the "kubernetes" finalizer, and
deletes the namespace once no finalizer of either kind remains.
"""
from __future__ import annotations

import asyncio
import logging

from apiary_pb import envelope_pb2 as pb
from apiary_pb import storage_pb2 as spb
from services.common import envelope, errors

from .catalogue import Catalogue, ResourceInfo
from .storage_client import StorageClient
from .strategies import now_rfc3339, strategy_for

log = logging.getLogger(__name__)

FINALIZER = "kubernetes"
RECHECK_SECONDS = 2.0


class NamespaceFinalizer:
    def __init__(self, store: StorageClient, catalogue: Catalogue) -> None:
        self.store = store
        self.catalogue = catalogue
        # what a deletion releases (a Service's ClusterIP) goes back as on a client's delete
        self.strategies = {info: strategy_for(info) for info in catalogue.namespaced()}
        info = catalogue.lookup("", "v1", "namespaces")
        assert info is not None
        self.namespaces: ResourceInfo = info
        self._active: dict[str, asyncio.Task[None]] = {}

    async def run(self) -> None:
        delay = 0.5
        while True:
            try:
                resp = await self.store.list(self.namespaces, spb.ListRequest(prefix=self.namespaces.key_prefix))
                for ns in resp.items:
                    self._consider(ns)
                wreq = spb.WatchRequest(prefix=self.namespaces.key_prefix, resource_version=resp.resource_version)
                async for ev in self.store.watch(wreq):
                    if ev.type == "ERROR":
                        break
                    if ev.type in ("ADDED", "MODIFIED"):
                        self._consider(ev.object)
                delay = 0.5
            except asyncio.CancelledError:
                raise
            except errors.APIError as e:
                log.info("namespace finalizer: %s; retrying in %.1fs", e.message, delay)
            except Exception:  # noqa: BLE001 - the controller must keep running
                log.exception("namespace finalizer failed; retrying")
            await asyncio.sleep(delay)
            delay = min(delay * 2, 5.0)

    async def stop(self) -> None:
        for t in list(self._active.values()):
            t.cancel()

    def _consider(self, ns: pb.Object) -> None:
        name = ns.metadata.name
        if not ns.metadata.deletion_timestamp or name in self._active:
            return
        task = asyncio.create_task(self.finalize(name), name=f"finalize-{name}")
        self._active[name] = task
        task.add_done_callback(lambda _t: self._active.pop(name, None))

    async def finalize(self, name: str) -> None:
        while True:
            try:
                env = await self.store.get(self.namespaces, "", name)
                obj = envelope.from_envelope(env)
                spec_fins = list((obj.get("spec") or {}).get("finalizers") or [])
                ours = FINALIZER in spec_fins
                if ours:
                    if await self.delete_content(name):
                        await asyncio.sleep(RECHECK_SECONDS)
                        continue
                    spec_fins.remove(FINALIZER)
                    obj.setdefault("spec", {})["finalizers"] = spec_fins
                rv, uid = env.metadata.resource_version, env.metadata.uid
                if not spec_fins and not env.metadata.finalizers:
                    await self.store.delete(self.namespaces, "", name, uid, rv)
                    log.info("namespace %s finalized and deleted", name)
                    return
                if ours:
                    new = envelope.to_envelope(obj)
                    new.fields.update(env.fields)
                    new.metadata.resource_version = ""
                    await self.store.update(self.namespaces, new, rv)
                    log.info("namespace %s: content removed; waiting on finalizers %s", name,
                             spec_fins + list(env.metadata.finalizers))
                return
            except errors.NotFound:
                return
            except errors.Conflict:
                continue
            except asyncio.CancelledError:
                raise
            except errors.APIError as e:
                log.info("finalizing namespace %s: %s", name, e.message)
                await asyncio.sleep(RECHECK_SECONDS)

    async def delete_content(self, namespace: str) -> int:
        """Delete what can go now; the number of objects still waiting on their finalizers."""
        remaining = 0
        for info in self.catalogue.namespaced():
            for item in await self.store.list_all(info, info.collection_prefix(namespace)):
                m = item.metadata
                try:
                    if m.finalizers:
                        remaining += 1
                        if not m.deletion_timestamp:
                            marked = pb.Object()
                            marked.CopyFrom(item)
                            marked.metadata.deletion_timestamp = now_rfc3339()
                            marked.metadata.deletion_grace_period_seconds = 0
                            marked.metadata.resource_version = ""
                            await self.store.update(info, marked, m.resource_version)
                    else:
                        await self.store.delete(info, namespace, m.name, m.uid, m.resource_version)
                        await self.strategies[info].after_delete(self.store, envelope.from_envelope(item))
                except errors.NotFound:
                    continue
                except errors.Conflict:
                    remaining += 1
        return remaining
