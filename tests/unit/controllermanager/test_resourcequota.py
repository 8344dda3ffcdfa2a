"""The resource quota controller against an API in memory: real informers (over a ListWatch of that API) and
real work queues; writes are optimistic (an update naming an old resourceVersion is a Conflict)."""
from __future__ import annotations

import asyncio
import copy
from collections.abc import AsyncIterator
from typing import Any

import pytest

from services.common.errors import Conflict, NotFound
from services.common.informer import Informer, object_key
from services.controllermanager.client import Resource
from services.controllermanager.resourcequota import ResourceQuotaController
from tests.waiting import until

Obj = dict[str, Any]
VERBS = frozenset({"create", "list", "watch", "delete", "get", "update"})
CONFIGMAPS = Resource("", "v1", "configmaps", "ConfigMap", True, VERBS)
SECRETS = Resource("", "v1", "secrets", "Secret", True, VERBS)
DEPLOYMENTS = Resource("apps", "v1", "deployments", "Deployment", True, VERBS)
QUOTAS = Resource("", "v1", "resourcequotas", "ResourceQuota", True, VERBS)


class API:
    """Objects by resource, a resourceVersion counter, and the watchers of each resource."""

    def __init__(self) -> None:
        self.rv = 0
        self.objects: dict[str, dict[str, Obj]] = {}
        self.watchers: dict[str, list[asyncio.Queue[tuple[str, Obj]]]] = {}
        self.updates: list[str] = []

    def _emit(self, resource: str, typ: str, obj: Obj) -> None:
        for q in self.watchers.get(resource, []):
            q.put_nowait((typ, copy.deepcopy(obj)))

    def put(self, resource: str, obj: Obj) -> Obj:
        self.rv += 1
        obj = copy.deepcopy(obj)
        obj["metadata"]["resourceVersion"] = str(self.rv)
        store = self.objects.setdefault(resource, {})
        typ = "MODIFIED" if object_key(obj) in store else "ADDED"
        store[object_key(obj)] = obj
        self._emit(resource, typ, obj)
        return copy.deepcopy(obj)

    def create(self, resource: str, namespace: str, name: str, **fields: Any) -> Obj:
        return self.put(resource, {"metadata": {"name": name, "namespace": namespace}, **fields})

    def delete(self, resource: str, namespace: str, name: str) -> None:
        self.rv += 1
        obj = self.objects[resource].pop(f"{namespace}/{name}")
        obj["metadata"]["resourceVersion"] = str(self.rv)
        self._emit(resource, "DELETED", obj)

    def get(self, resource: str, key: str) -> Obj:
        return copy.deepcopy(self.objects[resource][key])


class MemoryListWatch:
    def __init__(self, api: API, resource: str) -> None:
        self.api, self.resource = api, resource

    async def list(self) -> tuple[list[Obj], str]:
        return [copy.deepcopy(o) for o in self.api.objects.get(self.resource, {}).values()], str(self.api.rv)

    async def watch(self, resource_version: str) -> AsyncIterator[tuple[str, Obj]]:
        q: asyncio.Queue[tuple[str, Obj]] = asyncio.Queue()
        self.api.watchers.setdefault(self.resource, []).append(q)
        try:
            while True:
                yield await q.get()
        finally:
            self.api.watchers[self.resource].remove(q)


class MemoryClient:
    """What the controller uses of services.controllermanager.client.Client."""

    def __init__(self, api: API, served: list[Resource]) -> None:
        self.api, self.served = api, served
        self.metadata_only: list[str] = []

    def informer(self, res: Resource, namespace: str = "", params: dict[str, str] | None = None,
                 metadata_only: bool = False) -> Informer:
        if metadata_only:
            self.metadata_only.append(res.resource)
        return Informer.over(MemoryListWatch(self.api, res.resource), res.group, res.version, res.resource)

    async def discover(self) -> list[Resource]:
        return list(self.served)

    async def update(self, res: Resource, obj: Obj, subresource: str = "") -> Obj:
        assert (res.resource, subresource) == ("resourcequotas", "status")
        current = self.api.objects.get(res.resource, {}).get(object_key(obj))
        if current is None:
            raise NotFound("not found")
        if current["metadata"]["resourceVersion"] != obj["metadata"]["resourceVersion"]:
            raise Conflict("the object has been modified; please apply your changes to the latest version")
        self.api.updates.append(object_key(obj))
        return self.api.put(res.resource, {**current, "status": obj["status"]})


@pytest.fixture
async def api() -> AsyncIterator[API]:
    yield API()


async def running(api: API, resync: float = 0.0) -> ResourceQuotaController:
    rq = ResourceQuotaController(MemoryClient(api, [CONFIGMAPS, SECRETS, DEPLOYMENTS, QUOTAS]), 2, resync)  # type: ignore[arg-type]
    await rq.start()
    return rq


def status(api: API, key: str = "a/q") -> Obj:
    return api.objects["resourcequotas"][key].get("status") or {}


async def test_a_new_quota_gets_the_usage_of_what_its_namespace_holds(api: API) -> None:
    for name in ("one", "two"):
        api.create("configmaps", "a", name)
    api.create("configmaps", "b", "elsewhere")
    api.create("secrets", "a", "s")
    api.create("deployments", "a", "d")
    rq = await running(api)
    try:
        hard = {"count/configmaps": "5", "secrets": "3", "count/deployments.apps": "1", "requests.cpu": "1",
                "count/widgets.example.com": "2"}
        api.create("resourcequotas", "a", "q", spec={"hard": hard})
        await until(lambda: status(api).get("used"), what="status.used")
        # what it does not count (cpu) has no usage; a resource nobody serves counts nothing
        assert status(api) == {"hard": hard, "used": {"count/configmaps": "2", "secrets": "1",
                                                        "count/deployments.apps": "1",
                                                        "count/widgets.example.com": "0"}}
        assert sorted(rq.client.metadata_only) == ["configmaps", "deployments", "secrets"]  # type: ignore[attr-defined]
    finally:
        await rq.stop()


async def test_a_delete_gives_usage_back(api: API) -> None:
    for name in ("one", "two", "three"):
        api.create("configmaps", "a", name)
    rq = await running(api)
    try:
        api.create("resourcequotas", "a", "q", spec={"hard": {"configmaps": "10"}})
        await until(lambda: (status(api).get("used") or {}).get("configmaps") == "3", what="first count")
        # admission charges a create (used + 1) before the object is written; the create then fails:
        # the controller never sees a delete of it, so only the full recount gives it back
        q = api.get("resourcequotas", "a/q")
        api.put("resourcequotas", {**q, "status": {**q["status"], "used": {"configmaps": "4"}}})
        api.delete("configmaps", "a", "one")
        await until(lambda: status(api)["used"] == {"configmaps": "2"}, what="replenishment")
        # a delete in another namespace or of another resource syncs nothing
        writes = len(api.updates)
        api.create("configmaps", "b", "x")
        api.delete("configmaps", "b", "x")
        api.create("secrets", "a", "s")
        api.delete("secrets", "a", "s")
        api.delete("configmaps", "a", "two")  # the marker: this one is synced
        await until(lambda: status(api)["used"] == {"configmaps": "1"}, what="second replenishment")
        assert len(api.updates) == writes + 1
    finally:
        await rq.stop()


async def test_status_hard_follows_spec_hard(api: API) -> None:
    api.create("configmaps", "a", "one")
    api.create("secrets", "a", "s")
    rq = await running(api)
    try:
        api.create("resourcequotas", "a", "q", spec={"hard": {"count/configmaps": "3"}})
        await until(lambda: status(api).get("hard") == {"count/configmaps": "3"}, what="status.hard")
        q = api.get("resourcequotas", "a/q")
        api.put("resourcequotas", {**q, "spec": {"hard": {"count/configmaps": "5", "count/secrets": "2"}}})
        await until(lambda: status(api).get("hard") == {"count/configmaps": "5", "count/secrets": "2"},
                    what="the raised and added limits")
        assert status(api)["used"] == {"count/configmaps": "1", "count/secrets": "1"}
        q = api.get("resourcequotas", "a/q")
        api.put("resourcequotas", {**q, "spec": {"hard": {"count/secrets": "2"}}})
        await until(lambda: status(api) == {"hard": {"count/secrets": "2"}, "used": {"count/secrets": "1"}},
                    what="a limit taken out of spec goes from status")
    finally:
        await rq.stop()


async def test_the_full_resync_recounts_every_quota(api: API) -> None:
    api.create("configmaps", "a", "one")
    rq = await running(api, resync=0.05)
    try:
        api.create("resourcequotas", "a", "q", spec={"hard": {"configmaps": "10"}})
        await until(lambda: status(api).get("used") == {"configmaps": "1"}, what="first count")
        q = api.get("resourcequotas", "a/q")
        api.put("resourcequotas", {**q, "status": {**q["status"], "used": {"configmaps": "7"}}})
        await until(lambda: status(api).get("used") == {"configmaps": "1"}, what="the resync's recount")
    finally:
        await rq.stop()


async def test_a_conflict_is_retried_from_the_newer_version(api: API) -> None:
    api.create("configmaps", "a", "one")
    client = MemoryClient(api, [CONFIGMAPS, QUOTAS])
    update = client.update
    raced = []

    async def racing_update(res: Resource, obj: Obj, subresource: str = "") -> Obj:
        if not raced:  # admission charges the quota just before the controller's write
            raced.append(True)
            current = api.get("resourcequotas", object_key(obj))
            api.put("resourcequotas", {**current, "status": {"hard": {"configmaps": "9"}, "used": {"configmaps": "5"}}})
        return await update(res, obj, subresource)

    client.update = racing_update  # type: ignore[method-assign]
    rq = ResourceQuotaController(client, 1, 0.0)  # type: ignore[arg-type]
    await rq.start()
    try:
        api.create("resourcequotas", "a", "q", spec={"hard": {"configmaps": "10"}})
        await until(lambda: status(api) == {"hard": {"configmaps": "10"}, "used": {"configmaps": "1"}},
                    what="the sync after the conflict")
    finally:
        await rq.stop()
