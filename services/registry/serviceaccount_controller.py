"""The serviceaccount controller (kube-controller-manager's serviceaccounts-controller): a `default`
ServiceAccount in every active namespace, made again when deleted.

Driven, like the namespace finalizer, by a list+watch of namespaces straight from storage (and of
ServiceAccounts, to notice a deleted `default`). It lives in the registry until apiary has a
controller-manager (issue 14).
"""
from __future__ import annotations

import asyncio
import logging
import uuid

from apiary_pb import storage_pb2 as spb
from services.common import envelope, errors

from .catalogue import Catalogue, ResourceInfo
from .storage_client import StorageClient
from .strategies import now_rfc3339

log = logging.getLogger(__name__)

DEFAULT = "default"


class ServiceAccountController:
    def __init__(self, store: StorageClient, catalogue: Catalogue) -> None:
        self.store = store
        namespaces = catalogue.lookup("", "v1", "namespaces")
        accounts = catalogue.lookup("", "v1", "serviceaccounts")
        assert namespaces is not None and accounts is not None
        self.namespaces: ResourceInfo = namespaces
        self.accounts: ResourceInfo = accounts

    async def run(self) -> None:
        await asyncio.gather(self._loop(self.namespaces, self._namespace_event),
                             self._loop(self.accounts, self._account_event))

    async def _loop(self, info: ResourceInfo, on_event) -> None:  # type: ignore[no-untyped-def]
        delay = 0.5
        while True:
            try:
                resp = await self.store.list(info, spb.ListRequest(prefix=info.key_prefix))
                if info is self.namespaces:
                    for ns in resp.items:
                        await on_event("ADDED", ns)
                wreq = spb.WatchRequest(prefix=info.key_prefix, resource_version=resp.resource_version)
                async for ev in self.store.watch(wreq):
                    if ev.type == "ERROR":
                        break
                    await on_event(ev.type, ev.object)
                delay = 0.5
            except asyncio.CancelledError:
                raise
            except errors.APIError as e:
                log.info("serviceaccount controller: %s; retrying in %.1fs", e.message, delay)
            except Exception:
                log.exception("serviceaccount controller failed; retrying")
            await asyncio.sleep(delay)
            delay = min(delay * 2, 5.0)

    async def _namespace_event(self, typ: str, ns) -> None:  # type: ignore[no-untyped-def]
        if typ in ("ADDED", "MODIFIED") and not ns.metadata.deletion_timestamp:
            await self.ensure(ns.metadata.name)

    async def _account_event(self, typ: str, sa) -> None:  # type: ignore[no-untyped-def]
        if typ == "DELETED" and sa.metadata.name == DEFAULT:
            await self.ensure(sa.metadata.namespace)

    async def ensure(self, namespace: str) -> None:
        try:
            await self.store.get(self.accounts, namespace, DEFAULT)
            return
        except errors.NotFound:
            pass
        try:
            ns = await self.store.get(self.namespaces, "", namespace)
        except errors.NotFound:
            return
        if ns.metadata.deletion_timestamp:
            return
        obj = {"apiVersion": "v1", "kind": "ServiceAccount",
               "metadata": {"name": DEFAULT, "namespace": namespace, "uid": str(uuid.uuid4()),
                            "creationTimestamp": now_rfc3339()}}
        env = envelope.to_envelope(obj)
        env.fields.update({"metadata.name": DEFAULT, "metadata.namespace": namespace})
        try:
            await self.store.create(self.accounts, env)
        except errors.AlreadyExists:
            pass
        except errors.APIError as e:
            # a terminating namespace refuses new content; the namespace's next event tries again
            log.info("serviceaccount controller: creating %s/default: %s", namespace, e.message)
