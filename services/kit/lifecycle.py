"""NamespaceLifecycle, as every kube aggregated server runs it (RecommendedOptions' admission):
nothing is created in a namespace the core API server does not have, nor in one being terminated.

Namespaces come from an informer on the core API server (list, then watch over HTTPS from the
list's resourceVersion; relist on 410 or a broken stream); a namespace the informer has not seen is
looked up with one GET before the create is refused, because it may have been made just now.
"""
from __future__ import annotations

import asyncio
import logging
from typing import Any

import httpx
import orjson

from services.common.backoff import Backoff
from services.common.errors import Forbidden, NotFound

from .api import CREATE, AdmissionPlugin, Attributes

log = logging.getLogger(__name__)
NAMESPACES = "/api/v1/namespaces"


class RemoteInformer:
    """A list+watch of one collection of the core API server: name -> object."""

    def __init__(self, client: httpx.AsyncClient, path: str) -> None:
        self.client, self.path = client, path
        self.items: dict[str, dict[str, Any]] = {}
        self.synced = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name=f"informer {self.path}")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    async def _run(self) -> None:
        backoff = Backoff(cap=2.0)
        rv = ""
        while True:
            try:
                if not rv:
                    r = await self.client.get(self.path)
                    r.raise_for_status()
                    doc = r.json()
                    self.items = {o["metadata"]["name"]: o for o in doc.get("items") or []}
                    rv = doc["metadata"]["resourceVersion"]
                    self.synced.set()
                params = {"watch": "true", "resourceVersion": rv, "allowWatchBookmarks": "true",
                          "timeoutSeconds": "600"}
                async with self.client.stream("GET", self.path, params=params, timeout=None) as r:
                    r.raise_for_status()
                    async for line in r.aiter_lines():
                        if not line:
                            continue
                        ev = orjson.loads(line)
                        obj = ev.get("object") or {}
                        if ev.get("type") == "ERROR":
                            rv = ""  # 410: relist
                            break
                        rv = (obj.get("metadata") or {}).get("resourceVersion") or rv
                        if ev.get("type") == "DELETED":
                            self.items.pop(obj["metadata"]["name"], None)
                        elif ev.get("type") in ("ADDED", "MODIFIED"):
                            self.items[obj["metadata"]["name"]] = obj
                        backoff.reset()
            except asyncio.CancelledError:
                raise
            except Exception as e:  # noqa: BLE001 - the core API server is away: retry, relisting
                log.warning("informer %s: %s", self.path, e)
                rv = ""
                await asyncio.sleep(backoff.delay())


class NamespaceLifecycle(AdmissionPlugin):
    name = "NamespaceLifecycle"
    operations = (CREATE,)

    def __init__(self, client: httpx.AsyncClient) -> None:
        self.client = client
        self.namespaces = RemoteInformer(client, NAMESPACES)

    def handles(self, a: Attributes) -> bool:
        return a.operation == CREATE and a.kind.namespaced

    def ready(self) -> bool:
        return self.namespaces.synced.is_set()

    async def validate(self, a: Attributes) -> None:
        ns = self.namespaces.items.get(a.namespace)
        if ns is None:
            r = await self.client.get(f"{NAMESPACES}/{a.namespace}")
            if r.status_code == 404:
                raise NotFound(f'namespaces "{a.namespace}" not found',
                               details={"name": a.namespace, "kind": "namespaces"})
            r.raise_for_status()
            ns = r.json()
        if (ns.get("status") or {}).get("phase") == "Terminating":
            raise Forbidden(f"{a.kind.plural}.{a.group} \"{a.name}\" is forbidden: unable to create new content in "
                            f"namespace {a.namespace} because it is being terminated",
                            details={"name": a.name, "group": a.group, "kind": a.kind.plural,
                                     "causes": [{"reason": "NamespaceTerminating",
                                                 "message": f"namespace {a.namespace} is being terminated",
                                                 "field": "metadata.namespace"}]})
