"""HTTPListWatch against an in-process HTTP transport: what it asks for (metadata-only Accept headers, the
watch's parameters) and what the informer keeps (metadata alone, even from a server answering whole
objects), and a 410 from the watch becoming Gone."""
from __future__ import annotations

import asyncio

import httpx
import orjson
import pytest

from services.common.errors import Gone
from services.common.informer import HTTPListWatch, Informer

FULL = {"apiVersion": "v1", "kind": "ConfigMap", "data": {"big": "x" * 100},
        "metadata": {"name": "a", "namespace": "ns", "uid": "U", "resourceVersion": "5"}}


def _server(partial: bool, seen: list[httpx.Request], watch_events: list[dict]) -> httpx.MockTransport:
    async def handle(request: httpx.Request) -> httpx.Response:
        await asyncio.sleep(0)  # a real server's answer is awaited: the informer's loop lets others run
        seen.append(request)
        if request.url.params.get("watch") == "true":
            lines = b"".join(orjson.dumps(e) + b"\n" for e in watch_events)
            return httpx.Response(200, content=lines, headers={"Content-Type": "application/json"})
        if partial:
            body = {"kind": "PartialObjectMetadataList", "apiVersion": "meta.k8s.io/v1",
                    "metadata": {"resourceVersion": "7"},
                    "items": [{"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
                               "metadata": FULL["metadata"]}]}
        else:
            body = {"kind": "ConfigMapList", "apiVersion": "v1", "metadata": {"resourceVersion": "7"}, "items": [FULL]}
        return httpx.Response(200, content=orjson.dumps(body), headers={"Content-Type": "application/json"})
    return httpx.MockTransport(handle)


@pytest.mark.parametrize("partial", [True, False])
def test_metadata_only_asks_for_partial_objects_and_keeps_metadata_alone(partial: bool) -> None:
    seen: list[httpx.Request] = []
    modified = {**FULL, "metadata": {**FULL["metadata"], "resourceVersion": "8"}}
    watch = [{"type": "MODIFIED", "object": modified if not partial else
              {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": modified["metadata"]}}]

    async def run() -> tuple[list[dict], str, list[tuple[str, dict]]]:
        async with httpx.AsyncClient(transport=_server(partial, seen, watch), base_url="https://api") as c:
            lw = HTTPListWatch(c, "/api/v1/configmaps", metadata_only=True)
            items, rv = await lw.list()
            events = [ev async for ev in lw.watch(rv)]
            return items, rv, events

    items, rv, events = asyncio.run(run())
    assert rv == "7"
    assert items == [{"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": FULL["metadata"]}]
    assert events == [("MODIFIED", {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
                                    "metadata": modified["metadata"]})]
    list_req, watch_req = seen
    assert list_req.headers["accept"].startswith("application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1")
    assert watch_req.headers["accept"].startswith("application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1")
    assert watch_req.url.params["resourceVersion"] == "7" and watch_req.url.params["allowWatchBookmarks"] == "true"


def test_whole_objects_by_default() -> None:
    seen: list[httpx.Request] = []

    async def run() -> list[dict]:
        async with httpx.AsyncClient(transport=_server(False, seen, []), base_url="https://api") as c:
            items, _ = await HTTPListWatch(c, "/api/v1/configmaps").list()
            return items

    assert asyncio.run(run()) == [FULL]
    assert seen[0].headers["accept"] == "application/json"


def test_an_expired_watch_is_gone_and_the_informer_relists() -> None:
    seen: list[httpx.Request] = []
    expired = [{"type": "ERROR", "object": {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 410,
                                            "reason": "Expired", "message": "too old resource version"}}]

    async def gone() -> None:
        async with httpx.AsyncClient(transport=_server(True, seen, expired), base_url="https://api") as c:
            async for _ in HTTPListWatch(c, "/api/v1/configmaps").watch("1"):
                pass

    with pytest.raises(Gone):
        asyncio.run(gone())

    async def relists() -> dict:
        async with httpx.AsyncClient(transport=_server(True, seen, expired), base_url="https://api") as c:
            inf = Informer.over(HTTPListWatch(c, "/api/v1/configmaps", metadata_only=True), "", "v1", "configmaps")
            inf.start()
            try:
                while sum(1 for r in seen if "watch" not in r.url.params) < 3:  # listed again after each 410
                    await asyncio.sleep(0.01)
            finally:
                await inf.stop()
            return inf.store

    seen.clear()
    assert asyncio.run(asyncio.wait_for(relists(), 30)) == {"ns/a": {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
                                               "metadata": FULL["metadata"]}}
