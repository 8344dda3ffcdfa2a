"""HTTPListWatch and its RESTClient against a real HTTP server on loopback (aiohttp's TestServer): what the
informer asks for (metadata-only Accept headers, the watch's parameters) and keeps (metadata alone, even
from a server answering whole objects); a 410 becoming Gone and a relist; a broken watch resumed from the
last resourceVersion without a relist; an event larger than the read buffer; Status answers mapped to
their errors; and a pool that holds more watches than aiohttp's default limit while requests reuse one
connection."""
from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass

import orjson
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from services.apiserver.restclient import RESTClient
from services.common.errors import AlreadyExists, Conflict, Gone, InternalError, NotFound, ServiceUnavailable
from services.common.informer import HTTPListWatch, Informer
from tests.waiting import until

FULL = {"apiVersion": "v1", "kind": "ConfigMap", "data": {"big": "x" * 100},
        "metadata": {"name": "a", "namespace": "ns", "uid": "U", "resourceVersion": "5"}}
PARTIAL_LIST = {"kind": "PartialObjectMetadataList", "apiVersion": "meta.k8s.io/v1", "metadata": {"resourceVersion": "7"},
                "items": [{"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": FULL["metadata"]}]}
FULL_LIST = {"kind": "ConfigMapList", "apiVersion": "v1", "metadata": {"resourceVersion": "7"}, "items": [FULL]}
PATH = "/api/v1/configmaps"


@dataclass
class Seen:
    query: dict[str, str]
    accept: str
    port: int  # the client's port: one per connection

    @property
    def watch(self) -> bool:
        return self.query.get("watch") == "true"


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@asynccontextmanager
async def serving(handler: Handler, seen: list[Seen]) -> AsyncIterator[RESTClient]:
    """A server answering every GET with handler (each request recorded in seen), and a client of it."""
    async def record(request: web.Request) -> web.StreamResponse:
        peer = request.transport.get_extra_info("peername") if request.transport else ("", 0)
        seen.append(Seen(dict(request.query), request.headers.get("Accept", ""), peer[1]))
        return await handler(request)

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", record)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    client = RESTClient(str(server.make_url("/")), None, timeout=10)
    try:
        yield client
    finally:
        await client.close()
        await server.close()


async def stream(request: web.Request, lines: list[bytes]) -> web.StreamResponse:
    resp = web.StreamResponse(headers={"Content-Type": "application/json"})
    await resp.prepare(request)
    for line in lines:
        await resp.write(line)
    await resp.write_eof()
    return resp


def server_gone() -> str:
    """The URL of a loopback port nobody listens on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


def events(*evs: dict) -> list[bytes]:
    return [orjson.dumps(e) + b"\n" for e in evs]


def api(list_body: dict, watch_lines: list[bytes]) -> Handler:
    async def handle(request: web.Request) -> web.StreamResponse:
        if request.query.get("watch") == "true":
            return await stream(request, watch_lines)
        return web.json_response(list_body, dumps=lambda o: orjson.dumps(o).decode())
    return handle


@pytest.mark.parametrize("partial", [True, False])
async def test_metadata_only_asks_for_partial_objects_and_keeps_metadata_alone(partial: bool) -> None:
    seen: list[Seen] = []
    modified = {**FULL, "metadata": {**FULL["metadata"], "resourceVersion": "8"}}
    watch = events({"type": "MODIFIED", "object": modified if not partial else
                    {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": modified["metadata"]}})
    async with serving(api(PARTIAL_LIST if partial else FULL_LIST, watch), seen) as c:
        lw = HTTPListWatch(c, PATH, metadata_only=True)
        items, rv = await lw.list()
        got = [ev async for ev in lw.watch(rv)]

    assert rv == "7"
    assert items == [{"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": FULL["metadata"]}]
    assert got == [("MODIFIED", {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
                                 "metadata": modified["metadata"]})]
    list_req, watch_req = seen
    assert list_req.accept.startswith("application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1")
    assert watch_req.accept.startswith("application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1")
    assert watch_req.query == {"watch": "true", "resourceVersion": "7", "allowWatchBookmarks": "true",
                               "timeoutSeconds": str(HTTPListWatch.WATCH_SECONDS)}


async def test_whole_objects_by_default_with_the_selectors_on_list_and_watch() -> None:
    seen: list[Seen] = []
    bookmark = {"type": "BOOKMARK", "object": {"kind": "ConfigMap", "metadata": {"resourceVersion": "9"}}}
    async with serving(api(FULL_LIST, events(bookmark)), seen) as c:
        lw = HTTPListWatch(c, PATH, {"labelSelector": "a=b"})
        items, _ = await lw.list()
        got = [ev async for ev in lw.watch("7")]
    assert items == [FULL]
    assert got == [("BOOKMARK", bookmark["object"])]
    assert seen[0].accept == "application/json" and seen[0].query == {"labelSelector": "a=b"}
    assert seen[1].query["labelSelector"] == "a=b"


async def test_an_event_larger_than_the_read_buffer_is_read_whole() -> None:
    big = {**FULL, "data": {"big": "y" * 600_000}}  # aiohttp's line limit is 128 KiB by default
    line = orjson.dumps({"type": "ADDED", "object": big}) + b"\n"
    pieces = [line[i:i + 16_384] for i in range(0, len(line), 16_384)]  # many chunks of the stream
    async with serving(api(FULL_LIST, pieces + events({"type": "DELETED", "object": FULL})), []) as c:
        got = [ev async for ev in HTTPListWatch(c, PATH).watch("1")]
    assert got == [("ADDED", big), ("DELETED", FULL)]


async def test_an_expired_watch_is_gone_and_the_informer_relists() -> None:
    seen: list[Seen] = []
    expired = events({"type": "ERROR", "object": {"kind": "Status", "apiVersion": "v1", "status": "Failure",
                                                  "code": 410, "reason": "Expired", "message": "too old resource version"}})
    async with serving(api(PARTIAL_LIST, expired), seen) as c:
        with pytest.raises(Gone):
            async for _ in HTTPListWatch(c, PATH).watch("1"):
                pass

        seen.clear()
        inf = Informer.over(HTTPListWatch(c, PATH, metadata_only=True), "", "v1", "configmaps")
        inf.start()
        try:
            await until(lambda: sum(1 for r in seen if not r.watch) >= 3, what="listed again after each 410")
        finally:
            await inf.stop()
    assert inf.store == {"ns/a": {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
                                  "metadata": FULL["metadata"]}}


async def test_a_watch_answered_410_is_gone() -> None:
    async def handle(request: web.Request) -> web.StreamResponse:
        return web.json_response({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 410,
                                  "reason": "Expired", "message": "too old resource version: 1 (5)"}, status=410)
    async with serving(handle, []) as c:
        with pytest.raises(Gone, match="too old resource version"):
            async for _ in HTTPListWatch(c, PATH).watch("1"):
                pass


async def test_a_broken_watch_resumes_from_the_last_resource_version_without_a_relist() -> None:
    seen: list[Seen] = []
    modified = {**FULL, "metadata": {**FULL["metadata"], "resourceVersion": "8"}}
    release = asyncio.Event()

    async def handle(request: web.Request) -> web.StreamResponse:
        if request.query.get("watch") != "true":
            return web.json_response(FULL_LIST)
        resp = web.StreamResponse(headers={"Content-Type": "application/json"})
        await resp.prepare(request)
        if sum(1 for r in seen if r.watch) == 1:
            await resp.write(orjson.dumps({"type": "MODIFIED", "object": modified}) + b"\n")
            assert request.transport is not None
            request.transport.abort()  # the connection breaks in the middle of the stream
            return resp
        await release.wait()
        return resp

    async with serving(handle, seen) as c:
        inf = Informer.over(HTTPListWatch(c, PATH), "", "v1", "configmaps")
        inf.start()
        try:
            await until(lambda: sum(1 for r in seen if r.watch) >= 2, what="the watch resumed")
        finally:
            release.set()
            await inf.stop()
    assert [r.watch for r in seen] == [False, True, True]
    assert seen[2].query["resourceVersion"] == "8"
    assert inf.store == {"ns/a": modified}


async def test_status_answers_become_their_errors_and_an_unreachable_server_is_unavailable() -> None:
    answers = {
        "/exists": (409, {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 409,
                          "reason": "AlreadyExists", "message": 'configmaps "a" already exists',
                          "details": {"name": "a", "kind": "configmaps"}}),
        "/conflict": (409, {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 409,
                            "reason": "Conflict", "message": "the object has been modified"}),
        "/missing": (404, {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 404,
                           "reason": "NotFound", "message": 'configmaps "b" not found'}),
    }

    async def handle(request: web.Request) -> web.StreamResponse:
        if request.path in answers:
            code, body = answers[request.path]
            return web.json_response(body, status=code)
        return web.Response(status=500, text="upstream exploded")

    async with serving(handle, []) as c:
        with pytest.raises(AlreadyExists) as exists:
            await c.request("POST", "/exists", body=b"{}")
        assert exists.value.message == 'configmaps "a" already exists'
        assert exists.value.details == {"name": "a", "kind": "configmaps"}
        with pytest.raises(Conflict):
            await c.request("PUT", "/conflict", body=b"{}")
        with pytest.raises(NotFound, match='configmaps "b" not found'):
            await c.request("GET", "/missing")
        with pytest.raises(InternalError, match="upstream exploded"):
            await c.request("GET", "/other")
        with pytest.raises(NotFound):
            async for _ in c.lines("/missing"):
                pass

    down = RESTClient(server_gone(), None, timeout=5)
    try:
        with pytest.raises(ServiceUnavailable):
            await down.request("GET", PATH)
        with pytest.raises(ServiceUnavailable):
            async for _ in down.lines(PATH):
                pass
    finally:
        await down.close()


async def test_the_pool_holds_more_watches_than_aiohttps_default_limit_and_requests_share_a_connection() -> None:
    """~40 informer watches stay open in the controller-manager: past a pool limit a watch or a lease
    renewal would wait for a connection for ever; between requests the idle connection is kept."""
    seen: list[Seen] = []
    release = asyncio.Event()
    watches = 110  # aiohttp's TCPConnector holds 100 by default

    async def handle(request: web.Request) -> web.StreamResponse:
        if request.query.get("watch") != "true":
            return web.json_response(FULL_LIST)
        resp = web.StreamResponse(headers={"Content-Type": "application/json"})
        await resp.prepare(request)
        await release.wait()
        return resp

    async def watch(c: RESTClient) -> None:
        async for _ in c.lines(PATH, {"watch": "true"}):
            pass

    async def run() -> None:
        async with serving(handle, seen) as c:
            tasks = [asyncio.create_task(watch(c)) for _ in range(watches)]
            try:
                await until(lambda: sum(1 for r in seen if r.watch) >= watches, what="every watch open")
                for _ in range(5):
                    await c.request("GET", PATH)
            finally:
                release.set()
                await asyncio.gather(*tasks)

    await asyncio.wait_for(run(), 60)
    requests = [r for r in seen if not r.watch]
    assert len(requests) == 5 and len({r.port for r in requests}) == 1
    assert len({r.port for r in seen if r.watch}) == watches
