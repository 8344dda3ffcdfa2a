"""A kit kind's watch as JSON lines (kube's watch encoding): each event's object in the request's version,
or a Table row of it; bookmarks and the ERROR Status as the core's watch sends them. The watch ends after
its timeoutSeconds."""
from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import orjson

from services.apiserver import printers
from services.apiserver.endpoints.handlers import Handlers
from services.apiserver.endpoints.request import Request, check_list_options
from services.common import envelope
from services.common.errors import APIError

from .storage import ResourceStorage, Storage


def events(handlers: Handlers[ResourceStorage], storage: Storage, req: Any) -> AsyncIterator[bytes]:
    """The watch events of an rpb.APIRequest (verb watch) as JSON lines; the request is checked (404, 400,
    422) before the first event is asked for."""
    r = handlers.request(req, "watch")
    check_list_options(r, watch=True)
    return _events(r, storage, handlers.catalogue.convertor(r.info.group, r.info.plural))


async def _events(r: Request, storage: Storage, convertor: printers.TableConvertor) -> AsyncIterator[bytes]:
    info, q, req = r.info, r.query, r.req
    field_selector = r.field_selector
    first = True
    async for ev in storage.watch(info.collection_prefix(r.namespace),
                                  resource_version=q.get("resourceVersion", ""),
                                  label_selector=q.get("labelSelector", ""), field_selector=field_selector,
                                  allow_bookmarks=q.get("allowWatchBookmarks") == "true",
                                  send_initial_events=q.get("sendInitialEvents") == "true"):
        kind = ev.type.encode()
        if ev.type == "ERROR":
            obj = orjson.dumps(APIError.from_pb(ev.status).status())
        elif ev.type == "BOOKMARK":
            meta: dict[str, Any] = {"resourceVersion": ev.object.metadata.resource_version}
            if ev.object.metadata.annotations:
                meta["annotations"] = dict(ev.object.metadata.annotations)
            obj = orjson.dumps({"kind": info.kind, "apiVersion": info.api_version, "metadata": meta})
        elif req.table:
            obj = orjson.dumps(printers.table(convertor, [info.served(ev.object)],
                                              {"resourceVersion": ev.object.metadata.resource_version},
                                              q.get("includeObject", "Metadata"), with_columns=first))
            first = False
        else:
            obj = envelope.to_json(info.served(ev.object))
        yield b'{"type":"' + kind + b'","object":' + obj + b"}\n"


async def until_timeout(it: AsyncIterator[bytes], timeout: float) -> AsyncIterator[bytes]:
    """The items of `it` until `timeout` seconds have passed (a watch's timeoutSeconds)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        remaining = deadline - loop.time()
        if remaining <= 0:
            return
        try:
            item = await asyncio.wait_for(anext(it), remaining)
        except (StopAsyncIteration, TimeoutError):
            return
        yield item
