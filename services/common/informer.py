"""List+watch, level-triggered: relist on 410, resume otherwise.

The Informer reads one resource through a ListWatch: through the registry's gRPC API for the
internal services (RegistryListWatch, the default), or through the proxy's HTTPS API for clients of
the API such as the controller-manager (HTTPListWatch), as client-go's ListWatch does."""
from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import aclosing
from typing import Any, Protocol

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


class RESTClient(Protocol):
    """What HTTPListWatch calls (services.apiserver.restclient.RESTClient, client-go's RESTClient)."""

    async def request(self, method: str, path: str, params: Mapping[str, str] | None = None,
                      body: bytes | None = None, headers: Mapping[str, str] | None = None) -> bytes: ...

    def lines(self, path: str, params: Mapping[str, str] | None = None,
              headers: Mapping[str, str] | None = None) -> AsyncIterator[bytes]: ...


def object_key(obj: dict[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    ns = meta.get("namespace")
    return f"{ns}/{meta.get('name')}" if ns else str(meta.get("name"))


class ListWatch(Protocol):
    """Where an informer reads: a list (items and its resourceVersion), then watch events (type, object)
    from a resourceVersion; an ERROR event is raised as its APIError (Gone for 410)."""

    async def list(self) -> tuple[list[dict[str, Any]], str]: ...

    def watch(self, resource_version: str) -> AsyncIterator[tuple[str, dict[str, Any]]]: ...


def _raise_error_event(obj: dict[str, Any]) -> None:
    if obj.get("code") == 410:
        raise Gone(obj.get("message", "gone"))
    raise APIError.from_status_dict(obj)


class RegistryListWatch:
    """List and watch through the registry's gRPC API, as the API server itself (user APISERVER)."""

    def __init__(self, registry: rgrpc.RegistryStub, group: str, version: str, resource: str,
                 namespace: str = "") -> None:
        self.registry, self.gvr, self.namespace = registry, (group, version, resource), namespace

    def _request(self, verb: str, query: dict[str, str]) -> rpb.APIRequest:
        g, v, r = self.gvr
        return rpb.APIRequest(verb=verb, group=g, version=v, resource=r, namespace=self.namespace,
                              query=query, user=APISERVER)

    async def list(self) -> tuple[list[dict[str, Any]], str]:
        resp = await grpcutil.call(self.registry.Handle(self._request("list", {}), timeout=30), "registry")
        body = orjson.loads(resp.body)
        return body.get("items") or [], body.get("metadata", {}).get("resourceVersion", "")

    async def watch(self, resource_version: str) -> AsyncIterator[tuple[str, dict[str, Any]]]:
        req = self._request("watch", {"resourceVersion": resource_version, "allowWatchBookmarks": "true"})
        async for frame in grpcutil.stream(self.registry.Watch(req), "registry"):
            ev = orjson.loads(frame.data)
            if ev["type"] == "ERROR":
                _raise_error_event(ev["object"])
            yield ev["type"], ev["object"]


class HTTPListWatch:
    """List and watch one collection of the API over HTTPS (`path`: /api/v1/configmaps, ...) through a
    RESTClient, with whatever credentials it carries; metadata_only asks for PartialObjectMetadata, as
    client-go's metadata informers do, where the server offers it."""

    # A watch is ended by the server after this and resumed from the last resourceVersion seen.
    WATCH_SECONDS = 300
    # client-go's metadata client: PartialObjectMetadata(List) first, plain JSON from a server without it.
    METADATA_LIST = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1, application/json"
    METADATA_WATCH = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1, application/json"

    def __init__(self, client: RESTClient, path: str, params: dict[str, str] | None = None,
                 metadata_only: bool = False) -> None:
        # params: the list's and watch's selectors
        self.client, self.path, self.params = client, path, dict(params or {})
        self.metadata_only = metadata_only
        self._list_headers = {"Accept": self.METADATA_LIST if metadata_only else "application/json"}
        self._watch_headers = {"Accept": self.METADATA_WATCH if metadata_only else "application/json"}

    def _object(self, obj: dict[str, Any]) -> dict[str, Any]:
        """What the informer keeps: with metadata_only, the metadata alone even from a server that
        answered whole objects (an aggregated server without PartialObjectMetadata)."""
        if not self.metadata_only or obj.get("kind") == "PartialObjectMetadata" or "metadata" not in obj:
            return obj
        return {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": obj["metadata"]}

    async def list(self) -> tuple[list[dict[str, Any]], str]:
        body = orjson.loads(await self.client.request("GET", self.path, self.params, headers=self._list_headers))
        items = body.get("items") or []
        if self.metadata_only and body.get("kind") != "PartialObjectMetadataList":
            items = [self._object(o) for o in items]
        return items, (body.get("metadata") or {}).get("resourceVersion", "")

    async def watch(self, resource_version: str) -> AsyncIterator[tuple[str, dict[str, Any]]]:
        params = {**self.params, "watch": "true", "resourceVersion": resource_version, "allowWatchBookmarks": "true",
                  "timeoutSeconds": str(self.WATCH_SECONDS)}
        async with aclosing(self.client.lines(self.path, params, self._watch_headers)) as lines:
            async for line in lines:
                ev = orjson.loads(line)
                if ev.get("type") == "ERROR":
                    _raise_error_event(ev.get("object") or {})
                yield ev["type"], self._object(ev.get("object") or {})


class Informer:
    """Keeps `store` (key -> object) in step with one resource; calls handlers on changes.

    Handlers get (event_type, object, old_object) with event_type ADDED, MODIFIED or DELETED.
    Informer(registry, group, version, resource) reads through the registry; Informer.over(source,
    name) through any ListWatch.
    """

    def __init__(self, registry: rgrpc.RegistryStub | None, group: str, version: str, resource: str,
                 namespace: str = "", source: ListWatch | None = None) -> None:
        self.gvr = (group, version, resource)
        self.namespace = namespace
        self.source: ListWatch = source if source is not None else RegistryListWatch(
            registry, group, version, resource, namespace)  # type: ignore[arg-type]
        self.store: dict[str, dict[str, Any]] = {}
        self.handlers: list[Handler] = []
        self.synced = asyncio.Event()
        self.resource_version = ""
        self._task: asyncio.Task[None] | None = None
        self._moved: asyncio.Event | None = None  # set once resource_version moves, while someone waits

    @classmethod
    def over(cls, source: ListWatch, group: str, version: str, resource: str) -> Informer:
        return cls(None, group, version, resource, source=source)

    def add_handler(self, h: Handler) -> None:
        self.handlers.append(h)

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name=f"informer-{self.gvr[2]}")

    async def stop(self) -> None:
        await cancel_and_wait(self._task)

    async def wait_fresh(self, resource_version: int, timeout: float = 3.0) -> bool:
        """Read-your-writes: wait until `store` holds every change up to resource_version (a revision
        the source gave, such as the one a write answered with); False when it does not within timeout."""
        try:
            async with asyncio.timeout(timeout):
                while int(self.resource_version or 0) < resource_version:
                    if self._moved is None:
                        self._moved = asyncio.Event()
                    await self._moved.wait()
        except TimeoutError:
            return False
        return True

    def _advanced(self, resource_version: str) -> None:
        self.resource_version = resource_version
        if self._moved is not None:
            self._moved.set()
            self._moved = None

    def _notify(self, kind: str, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
        for h in self.handlers:
            try:
                h(kind, obj, old)
            except Exception:
                log.exception("informer handler failed for %s", self.gvr)

    async def _list(self) -> None:
        items, resource_version = await self.source.list()
        fresh = {object_key(o): o for o in items}
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
        self._advanced(resource_version)
        self.synced.set()

    async def _watch(self, answered: Callable[[], None]) -> None:
        with WATCHES_OPEN.labels(self.gvr[2]).track_inprogress():
            await self._watch_events(answered)

    async def _watch_events(self, answered: Callable[[], None]) -> None:
        first = True
        async for typ, obj in self.source.watch(self.resource_version):
            if first:
                answered()
                first = False
            rv = obj.get("metadata", {}).get("resourceVersion")
            if typ != "BOOKMARK":
                k = object_key(obj)
                if typ == "DELETED":
                    self.store.pop(k, None)
                    self._notify("DELETED", obj, None)
                else:
                    prev = self.store.get(k)
                    self.store[k] = obj
                    self._notify("ADDED" if prev is None else "MODIFIED", obj, prev)
            if rv:
                self._advanced(rv)

    async def _run(self) -> None:
        need_list = True
        backoff = Backoff()
        failing = ""  # the error being retried, logged once rather than at every try

        def answered() -> None:
            """A list, or a watch's first event, came back: the backoff starts over. Not a watch
            merely opened: while storage is down the registry accepts a watch and breaks it at once,
            and a reset there made every informer retry each 50 ms (1.5 cores of a 2-core machine,
            slowing the restarting storage)."""
            nonlocal failing
            if failing:
                log.info("informer %s: the registry answers again", self.gvr[2])
                failing = ""
            backoff.reset()

        while True:
            try:
                if need_list:
                    await self._list()
                    need_list = False
                    answered()
                await self._watch(answered)
            except asyncio.CancelledError:
                raise
            except Gone:
                need_list = True
            except APIError as e:
                if e.message != failing:
                    log.info("informer %s: %s; retrying", self.gvr[2], e.message)
                    failing = e.message
                await asyncio.sleep(backoff.delay())
            except Exception:
                log.exception("informer %s failed; relisting", self.gvr[2])
                need_list = True
                await asyncio.sleep(backoff.delay())
