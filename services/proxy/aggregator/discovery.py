"""Discovery of remote APIServices: what their servers say they serve, merged into apiary's own.

kube-aggregator's discovery manager: each remote group-version's entry of the aggregated discovery
document (apidiscovery.k8s.io/v2) is fetched from its server (its own aggregated /apis, or else its
legacy /apis/<group>/<version> turned into one) with a timeout, cached, and fetched again when the
APIService changes and every REFRESH_PERIOD. A server that cannot be reached keeps its last entry,
marked freshness Stale; one never reached is left out. Groups are ordered as kube orders them: by
the highest groupPriorityMinimum of their APIServices, then by name; versions by versionPriority,
then kube's version order (GA > beta > alpha, higher numbers first).
"""
from __future__ import annotations

import asyncio
import copy
import logging
import re
from collections.abc import Awaitable, Callable
from typing import Any

import orjson

from services.apiserver.httpclient import Response
from services.apiserver.negotiation import DISCOVERY_V2, DISCOVERY_V2BETA1
from services.common.background import cancel_and_wait
from services.common.informer import Informer

from .availability import AGGREGATOR, available
from .proxy import Backends, probe_headers
from .resolver import ResolveError, ServiceResolver, service_ref

log = logging.getLogger(__name__)

REFRESH_PERIOD = 60.0
FETCH_TIMEOUT = 5.0
_ACCEPT = f"{DISCOVERY_V2},{DISCOVERY_V2BETA1},application/json"
_KUBE_VERSION = re.compile(r"^v(\d+)(?:(alpha|beta)(\d+))?$")

Obj = dict[str, Any]


def version_key(version: str) -> tuple[int, int, int, int, str]:
    """Sort key of kube's CompareKubeAwareVersionStrings: GA, then beta, then alpha, higher numbers
    first; versions not shaped like kube's after all of them, alphabetically."""
    m = _KUBE_VERSION.match(version)
    if not m:
        return (1, 0, 0, 0, version)
    rank = {None: 0, "beta": 1, "alpha": 2}[m.group(2)]
    return (0, rank, -int(m.group(1)), -int(m.group(3) or 0), version)


def priorities(apiservices: dict[str, Obj]) -> tuple[dict[str, int], dict[tuple[str, str], int]]:
    """(group -> highest groupPriorityMinimum, (group, version) -> versionPriority)."""
    groups: dict[str, int] = {}
    versions: dict[tuple[str, str], int] = {}
    for api in apiservices.values():
        spec = api.get("spec") or {}
        g, v = spec.get("group") or "", spec.get("version") or ""
        groups[g] = max(groups.get(g, 0), int(spec.get("groupPriorityMinimum") or 0))
        versions[(g, v)] = int(spec.get("versionPriority") or 0)
    return groups, versions


def order_versions(group: str, versions: list[str], version_priority: dict[tuple[str, str], int]) -> list[str]:
    return sorted(versions, key=lambda v: (-version_priority.get((group, v), 0), version_key(v)))


def legacy_to_aggregated(resource_list: Obj, group: str, version: str) -> Obj:
    """An APIResourceList as the version entry of an APIGroupDiscovery (subresources folded in)."""
    resources: dict[str, Obj] = {}
    subs: list[Obj] = []
    for r in resource_list.get("resources") or []:
        name = r.get("name") or ""
        kind = {"group": r.get("group") or group, "version": r.get("version") or version, "kind": r.get("kind", "")}
        if "/" in name:
            subs.append({"parent": name.split("/", 1)[0], "subresource": name.split("/", 1)[1],
                         "responseKind": kind, "verbs": r.get("verbs") or []})
            continue
        entry: Obj = {"resource": name, "responseKind": kind,
                      "scope": "Namespaced" if r.get("namespaced") else "Cluster",
                      "singularResource": r.get("singularName") or "", "verbs": r.get("verbs") or []}
        for src, dst in (("shortNames", "shortNames"), ("categories", "categories")):
            if r.get(src):
                entry[dst] = r[src]
        resources[name] = entry
    for s in subs:
        parent = resources.get(s.pop("parent"))
        if parent is not None:
            parent.setdefault("subresources", []).append(s)
    return {"version": version, "resources": list(resources.values()), "freshness": "Current"}


class RemoteDiscovery:
    """The cached aggregated-discovery version entry of every remote APIService, by name."""

    def __init__(self, apiservices: Informer, resolver: ServiceResolver, backends: Backends,
                 on_change: Callable[[], None]) -> None:
        self.apiservices = apiservices
        self.resolver = resolver
        self.backends = backends
        self.on_change = on_change
        self.entries: dict[str, Obj] = {}
        # name -> ("apis/<g>/<v>", its OpenAPI v3 document), for `kubectl explain` and validation
        self.openapi: dict[str, tuple[str, bytes]] = {}
        self._pending: set[str] = set()
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._ticker: asyncio.Task[None] | None = None
        apiservices.add_handler(self._changed)

    def _changed(self, kind: str, obj: Obj, old: Obj | None) -> None:
        name = obj["metadata"]["name"]
        if kind == "DELETED" or service_ref(obj) is None:
            dropped = self.openapi.pop(name, None) is not None
            if self.entries.pop(name, None) is not None or dropped:
                self.on_change()
            return
        entry = self.entries.get(name)
        # a server found available again (the availability controller's write) is asked at once
        recovered = entry is not None and entry.get("freshness") == "Stale" and \
            (available(obj) or {}).get("status") == "True"
        if old is None or obj.get("spec") != old.get("spec") or entry is None or recovered:
            self.enqueue(name)

    def enqueue(self, name: str) -> None:
        self._pending.add(name)
        self._wake.set()

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="remote-discovery")
        self._ticker = asyncio.create_task(self._tick(), name="remote-discovery-resync")

    async def stop(self) -> None:
        await cancel_and_wait(self._ticker)
        await cancel_and_wait(self._task)

    async def _tick(self) -> None:
        while True:
            await asyncio.sleep(REFRESH_PERIOD)
            for name, api in list(self.apiservices.store.items()):
                if service_ref(api) is not None:
                    self.enqueue(name)

    async def _run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            names, self._pending = self._pending, set()
            changed = await asyncio.gather(*(self.refresh(n) for n in names))
            if any(changed):
                self.on_change()

    async def refresh(self, name: str) -> bool:
        """Fetch one APIService's entry; whether what is served changed."""
        api = self.apiservices.store.get(name)
        if api is None or service_ref(api) is None:
            dropped = self.openapi.pop(name, None) is not None
            return self.entries.pop(name, None) is not None or dropped
        before = self.entries.get(name)
        try:
            entry = await self.fetch(api)
        except asyncio.CancelledError:
            raise
        except Exception as e:  # noqa: BLE001 - any failure of the remote server means stale
            log.info("discovery of APIService %s failed: %s", name, e)
            if before is None or before.get("freshness") == "Stale":
                return False
            stale = copy.deepcopy(before)
            stale["freshness"] = "Stale"
            self.entries[name] = stale
            return True
        self.entries[name] = entry
        openapi_before = self.openapi.get(name)
        try:
            doc = await self.fetch_openapi(api)
        except asyncio.CancelledError:
            raise
        except Exception as e:  # noqa: BLE001 - discovery stands without it; the last document stays
            log.info("OpenAPI v3 of APIService %s not fetched: %s", name, e)
            doc = openapi_before
        if doc is None:
            self.openapi.pop(name, None)
        else:
            self.openapi[name] = doc
        return entry != before or doc != openapi_before

    def _target(self, api: Obj) -> tuple[str, Callable[[str, str], Awaitable[Response]]]:
        """The server's URL, and a GET of a path there as the aggregator accepting a content type."""
        try:
            target = self.resolver.resolve(api)
        except ResolveError as e:
            raise RuntimeError(e.message) from None
        host = f"[{target.host}]" if ":" in target.host else target.host
        base, client = f"https://{host}:{target.port}", self.backends.client(api)

        def get(path: str, accept: str) -> Awaitable[Response]:
            return client.get(base + path, probe_headers(AGGREGATOR, accept), FETCH_TIMEOUT, target.server_name)
        return base, get

    async def fetch_openapi(self, api: Obj) -> tuple[str, bytes] | None:
        """The server's OpenAPI v3 document of the APIService's group-version (None: it has none)."""
        spec = api.get("spec") or {}
        path = f"apis/{spec.get('group', '')}/{spec.get('version', '')}"
        base, get = self._target(api)
        resp = await get("/openapi/v3", "application/json")
        if resp.status == 404:
            return None
        _raise_for_status(resp, base + "/openapi/v3")
        url = ((orjson.loads(resp.content).get("paths") or {}).get(path) or {}).get("serverRelativeURL")
        if not url:
            return None
        resp = await get(url, "application/json")
        _raise_for_status(resp, base + url)
        orjson.loads(resp.content)  # a document that does not parse is not served
        return path, resp.content

    async def fetch(self, api: Obj) -> Obj:
        spec = api.get("spec") or {}
        group, version = spec.get("group") or "", spec.get("version") or ""
        _, get = self._target(api)
        resp = await get("/apis", _ACCEPT)
        if resp.status == 200 and "as=APIGroupDiscoveryList" in resp.headers.get("content-type", ""):
            for item in orjson.loads(resp.content).get("items") or []:
                if (item.get("metadata") or {}).get("name") != group:
                    continue
                for v in item.get("versions") or []:
                    if v.get("version") == version:
                        return {**v, "freshness": "Current"}
        resp = await get(f"/apis/{group}/{version}", "application/json")
        if resp.status != 200:
            raise RuntimeError(f"GET /apis/{group}/{version}: {resp.status}")
        return legacy_to_aggregated(orjson.loads(resp.content), group, version)


def _raise_for_status(resp: Response, url: str) -> None:
    if not resp.ok:
        raise RuntimeError(f"GET {url}: {resp.status} {resp.reason}")


def merge_aggregated(local: Obj, remote: dict[str, Obj], apiservices: dict[str, Obj]) -> Obj:
    """The /apis APIGroupDiscoveryList: apiary's groups and the remote ones, in kube's order."""
    group_priority, version_priority = priorities(apiservices)
    groups: dict[str, dict[str, Obj]] = {}
    order: list[str] = []
    for item in local.get("items") or []:
        g = (item.get("metadata") or {}).get("name") or ""
        order.append(g)
        groups[g] = {v["version"]: v for v in item.get("versions") or []}
    for name, entry in remote.items():
        api = apiservices.get(name)
        if api is None:
            continue
        g = (api.get("spec") or {}).get("group") or ""
        if g not in groups:
            order.append(g)
            groups[g] = {}
        groups[g][entry["version"]] = entry
    rank = {g: i for i, g in enumerate(order)}
    # without APIServices (before the informer syncs) the registry's order stands
    ordered = sorted(groups, key=lambda g: (-group_priority.get(g, 0), g) if group_priority else (rank[g], g))
    items = []
    for g in ordered:
        versions = order_versions(g, list(groups[g]), version_priority)
        items.append({"metadata": {"name": g, "creationTimestamp": None},
                      "versions": [groups[g][v] for v in versions]})
    return {**local, "items": items}


def merge_group_list(local: Obj, apiservices: dict[str, Obj]) -> Obj:
    """The legacy /apis APIGroupList: every group an APIService names (remote ones too)."""
    group_priority, version_priority = priorities(apiservices)
    versions: dict[str, list[str]] = {}
    for g in local.get("groups") or []:
        versions[g["name"]] = [v["version"] for v in g.get("versions") or []]
    for api in apiservices.values():
        spec = api.get("spec") or {}
        g, v = spec.get("group") or "", spec.get("version") or ""
        if g and v not in versions.setdefault(g, []):
            versions[g].append(v)
    rank = {g: i for i, g in enumerate(versions)}
    out = []
    for g in sorted(versions, key=lambda g: (-group_priority.get(g, 0), g) if group_priority else (rank[g], g)):
        gvs = [{"groupVersion": f"{g}/{v}", "version": v} for v in order_versions(g, versions[g], version_priority)]
        out.append({"name": g, "versions": gvs, "preferredVersion": gvs[0]})
    return {**local, "groups": out}
