"""List+watch through the registry, level-triggered: relist on 410, resume otherwise."""
from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

import orjson
from prometheus_client import Gauge

from apiary_pb import registry_pb2 as rpb
from apiary_pb import registry_pb2_grpc as rgrpc

from . import grpcutil
from .background import cancel_and_wait
from .backoff import Backoff
from .errors import APIError, Gone
from .identity import APISERVER

log = logging.getLogger(__name__)

WATCHES_OPEN = Gauge("apiary_informer_watches_open",
                     "Informer watch streams this process holds open to the registry, by resource.", ["resource"])

Handler = Callable[[str, dict[str, Any], dict[str, Any] | None], None]


def object_key(obj: dict[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    ns = meta.get("namespace")
    return f"{ns}/{meta.get('name')}" if ns else str(meta.get("name"))


class Informer:
    """Keeps `store` (key -> object) in step with one resource; calls handlers on changes.

    Handlers get (event_type, object, old_object) with event_type ADDED, MODIFIED or DELETED.
    """

    def __init__(self, registry: rgrpc.RegistryStub, group: str, version: str, resource: str,
                 namespace: str = "") -> None:
        self.registry = registry
        self.gvr = (group, version, resource)
        self.namespace = namespace
        self.store: dict[str, dict[str, Any]] = {}
        self.handlers: list[Handler] = []
        self.synced = asyncio.Event()
        self.resource_version = ""
        self._task: asyncio.Task[None] | None = None

    def add_handler(self, h: Handler) -> None:
        self.handlers.append(h)

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name=f"informer-{self.gvr[2]}")

    async def stop(self) -> None:
        await cancel_and_wait(self._task)

    def _request(self, verb: str, query: dict[str, str]) -> rpb.APIRequest:
        g, v, r = self.gvr
        return rpb.APIRequest(verb=verb, group=g, version=v, resource=r, namespace=self.namespace,
                              query=query, user=APISERVER)

    def _notify(self, kind: str, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
        for h in self.handlers:
            try:
                h(kind, obj, old)
            except Exception:  # noqa: BLE001 - one bad handler must not stop the informer
                log.exception("informer handler failed for %s", self.gvr)

    async def _list(self) -> None:
        resp = await grpcutil.call(self.registry.Handle(self._request("list", {}), timeout=30), "registry")
        body = orjson.loads(resp.body)
        fresh = {object_key(o): o for o in body.get("items") or []}
        old_store, self.store = self.store, fresh
        for k, o in fresh.items():
            prev = old_store.get(k)
            if prev is None:
                self._notify("ADDED", o, None)
            elif prev.get("metadata", {}).get("resourceVersion") != o["metadata"].get("resourceVersion"):
                self._notify("MODIFIED", o, prev)
        for k, o in old_store.items():
            if k not in fresh:
                self._notify("DELETED", o, None)
        self.resource_version = body.get("metadata", {}).get("resourceVersion", "")
        self.synced.set()

    async def _watch(self) -> None:
        with WATCHES_OPEN.labels(self.gvr[2]).track_inprogress():
            await self._watch_events()

    async def _watch_events(self) -> None:
        req = self._request("watch", {"resourceVersion": self.resource_version, "allowWatchBookmarks": "true"})
        async for frame in grpcutil.stream(self.registry.Watch(req), "registry"):
            ev = orjson.loads(frame.data)
            typ, obj = ev["type"], ev["object"]
            if typ == "ERROR":
                if obj.get("code") == 410:
                    raise Gone(obj.get("message", "gone"))
                raise APIError.from_status_dict(obj)
            rv = obj.get("metadata", {}).get("resourceVersion")
            if rv:
                self.resource_version = rv
            if typ == "BOOKMARK":
                continue
            k = object_key(obj)
            if typ == "DELETED":
                self.store.pop(k, None)
                self._notify("DELETED", obj, None)
            else:
                prev = self.store.get(k)
                self.store[k] = obj
                self._notify("ADDED" if prev is None else "MODIFIED", obj, prev)

    async def _run(self) -> None:
        need_list = True
        backoff = Backoff()
        failing = ""  # the error being retried, logged once rather than at every try
        while True:
            try:
                if need_list:
                    await self._list()
                    need_list = False
                if failing:
                    log.info("informer %s: the registry answers again", self.gvr[2])
                    failing = ""
                backoff.reset()
                await self._watch()
            except asyncio.CancelledError:
                raise
            except Gone:
                need_list = True
            except APIError as e:
                if e.message != failing:
                    log.info("informer %s: %s; retrying", self.gvr[2], e.message)
                    failing = e.message
                await asyncio.sleep(backoff.delay())
            except Exception:  # noqa: BLE001
                log.exception("informer %s failed; relisting", self.gvr[2])
                need_list = True
                await asyncio.sleep(backoff.delay())
