"""The resource verbs (kube's registry/generic Store and endpoints/handlers, on hub objects):
get, list, watch, create, update, patch, delete, each answered in the request's version.

Writes run kube's order: decode and default in the request's version, convert to the hub, the
strategy's PrepareForCreate/Update, mutating admission, the strategy's validation (422 with field
paths), validating admission, then the storage write in the storage version.
"""
from __future__ import annotations

import asyncio
import datetime
import random
import re
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import orjson

from apiary_pb import envelope_pb2 as pb
from services.apiserver import patch as patches
from services.apiserver.fielderrors import Cause, invalid, required
from services.common import errors
from services.common.decoding import loads_json, loads_json_fields
from services.common.errors import APIError, BadRequest, MethodNotAllowed, UnsupportedMediaType

from .api import CREATE, DELETE, UPDATE, AdmissionPlugin, Attributes, Kind, Obj
from .scheme import Scheme, drop, unknown_fields
from .storage import Storage
from .table import row, table

MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"
PATCH_TYPES = (JSON_PATCH, MERGE_PATCH, STRATEGIC_MERGE_PATCH)
UPDATE_RETRIES = 8

_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_SUBDOMAIN_MSG = ("a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or "
                  "'.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used "
                  "for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')")
_NAME_CHARS = "bcdfghjklmnpqrstvwxz2456789"  # kube's utilrand alphanums


def now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class Call:
    """One resource request, as the verbs need it."""

    kind: Kind
    version: str
    namespace: str
    name: str
    query: dict[str, str]
    user: pb.UserInfo
    body: bytes = b""
    content_type: str = ""
    table: bool = False
    warnings: list[str] = field(default_factory=list)

    @property
    def dry_run(self) -> bool:
        return self.query.get("dryRun") == "All"


class Resources:
    def __init__(self, scheme: Scheme, storage: Storage, prefix: str, admission: list[AdmissionPlugin]) -> None:
        self.scheme, self.storage, self.prefix, self.admission = scheme, storage, prefix.rstrip("/"), admission

    # keys ----------------------------------------------------------------------------------------

    def collection(self, kind: Kind, namespace: str) -> str:
        base = f"{self.prefix}/{self.scheme.group}/{kind.plural}/"
        return f"{base}{namespace}/" if kind.namespaced and namespace else base

    def key(self, kind: Kind, namespace: str, name: str) -> str:
        return f"{self.collection(kind, namespace)}{name}"

    # reads ---------------------------------------------------------------------------------------

    async def get(self, c: Call) -> Obj:
        obj = await self.storage.get(self.key(c.kind, c.namespace, c.name), c.query.get("resourceVersion", ""))
        return self._out(c, obj)

    def _out(self, c: Call, obj: pb.Object) -> Obj:
        if not c.table:
            return self.scheme.render(c.kind, c.version, obj)
        hub = self.scheme.from_storage(c.kind, obj)
        rendered = self.scheme.from_hub(c.kind, c.version, hub)
        return table(c.kind, [row(c.kind, hub, rendered, c.query.get("includeObject", "Metadata"))],
                     {"resourceVersion": obj.metadata.resource_version})

    async def list(self, c: Call) -> Obj:
        q = c.query
        try:
            limit = int(q.get("limit") or 0)
        except ValueError:
            raise BadRequest(f'limit: Invalid value: "{q["limit"]}": must be an integer') from None
        items, rv, cont, remaining = await self.storage.list(
            self.collection(c.kind, c.namespace), resource_version=q.get("resourceVersion", ""),
            resource_version_match=q.get("resourceVersionMatch", ""), limit=limit, continue_=q.get("continue", ""),
            label_selector=q.get("labelSelector", ""), field_selector=q.get("fieldSelector", ""))
        meta: Obj = {"resourceVersion": rv}
        if cont:
            meta["continue"] = cont
        if remaining is not None:
            meta["remainingItemCount"] = remaining
        if c.table:
            rows = []
            for o in items:
                hub = self.scheme.from_storage(c.kind, o)
                rows.append(row(c.kind, hub, self.scheme.from_hub(c.kind, c.version, hub),
                                q.get("includeObject", "Metadata")))
            return table(c.kind, rows, meta)
        return {"kind": f"{c.kind.kind}List", "apiVersion": self.scheme.api_version(c.version), "metadata": meta,
                "items": [self.scheme.render(c.kind, c.version, o) for o in items]}

    async def watch(self, c: Call) -> AsyncIterator[bytes]:
        """The watch events as JSON lines, each object in the request's version (or a Table)."""
        q = c.query
        first = True
        async for ev in self.storage.watch(
                self.collection(c.kind, c.namespace), resource_version=q.get("resourceVersion", ""),
                label_selector=q.get("labelSelector", ""), field_selector=q.get("fieldSelector", ""),
                allow_bookmarks=q.get("allowWatchBookmarks") == "true",
                send_initial_events=q.get("sendInitialEvents") == "true"):
            if ev.type == "ERROR":
                obj: Obj = APIError.from_pb(ev.status).status()
            elif ev.type == "BOOKMARK":
                meta: Obj = {"resourceVersion": ev.object.metadata.resource_version}
                if ev.object.metadata.annotations:
                    meta["annotations"] = dict(ev.object.metadata.annotations)
                obj = {"kind": c.kind.kind, "apiVersion": self.scheme.api_version(c.version), "metadata": meta}
            elif c.table:
                hub = self.scheme.from_storage(c.kind, ev.object)
                rendered = self.scheme.from_hub(c.kind, c.version, hub)
                obj = table(c.kind, [row(c.kind, hub, rendered, q.get("includeObject", "Metadata"))],
                            {"resourceVersion": ev.object.metadata.resource_version}, columns=first)
                first = False
            else:
                obj = self.scheme.render(c.kind, c.version, ev.object)
            yield orjson.dumps({"type": ev.type, "object": obj}) + b"\n"

    # writes --------------------------------------------------------------------------------------

    def _body(self, c: Call) -> Obj:
        try:
            return loads_json(c.body or b"{}")
        except ValueError as e:
            raise BadRequest(f"couldn't get version/kind; json parse error: {e}") from None

    def _object(self, c: Call) -> Obj:
        """The request's object, checked for unknown and duplicate fields per fieldValidation
        (Strict: 400; Warn, the default: Warning headers; Ignore), unknown ones dropped."""
        try:
            obj, duplicates = loads_json_fields(c.body or b"{}")
        except ValueError as e:
            raise BadRequest(f"couldn't get version/kind; json parse error: {e}") from None
        return self._checked(c, obj, duplicates)

    def _checked(self, c: Call, obj: Any, duplicates: list[str]) -> Obj:
        if not isinstance(obj, dict):
            raise BadRequest("the body of the request must be an object")
        unknown = unknown_fields(c.kind, c.version, obj)
        if unknown or duplicates:
            problems = [f'duplicate field "{d}"' for d in duplicates] + [f'unknown field "{u}"' for u in unknown]
            mode = c.query.get("fieldValidation") or "Warn"
            if mode == "Strict":
                raise BadRequest("strict decoding error: " + ", ".join(problems))
            if mode == "Warn":
                c.warnings.extend(problems)
            drop(obj, unknown)
        return obj

    def _invalid(self, c: Call, name: str, errs: list[Cause]) -> None:
        if errs:
            raise errors.invalid(c.kind.kind, self.scheme.group, name, errs)

    def _check_meta(self, c: Call, meta: Obj) -> list[Cause]:
        name = meta.get("name") or ""
        if not name:
            return [required("metadata.name", "name or generateName is required")]
        if len(name) > 253 or not _SUBDOMAIN.match(name):
            return [invalid("metadata.name", name, _SUBDOMAIN_MSG)]
        return []

    def _namespace(self, c: Call, meta: Obj) -> None:
        if not c.kind.namespaced:
            meta.pop("namespace", None)
            return
        ns = meta.get("namespace") or ""
        if ns and ns != c.namespace:
            raise BadRequest("the namespace of the provided object does not match the namespace sent on the request")
        meta["namespace"] = c.namespace

    async def _admit(self, op: str, c: Call, obj: Obj | None, old: Obj | None, name: str, mutate: bool) -> None:
        a = Attributes(op, c.kind, self.scheme.group, c.version, c.namespace, name, obj, old, c.user, c.dry_run)
        for plugin in self.admission:
            if plugin.handles(a):
                await (plugin.admit(a) if mutate else plugin.validate(a))

    async def create(self, c: Call) -> Obj:
        hub = self.scheme.decode(c.kind, c.version, self._object(c))
        meta = hub["metadata"]
        self._namespace(c, meta)
        if not meta.get("name") and meta.get("generateName"):
            meta["name"] = meta["generateName"] + "".join(random.choices(_NAME_CHARS, k=5))
        for k in ("resourceVersion", "deletionTimestamp", "deletionGracePeriodSeconds", "selfLink"):
            meta.pop(k, None)
        meta.update(uid=str(uuid.uuid4()), creationTimestamp=now(), generation=1)
        c.kind.strategy.prepare_for_create(hub)
        name = meta.get("name", "")
        await self._admit(CREATE, c, hub, None, name, mutate=True)
        self._invalid(c, name, self._check_meta(c, meta) + c.kind.strategy.validate(hub))
        await self._admit(CREATE, c, hub, None, name, mutate=False)
        obj = self.scheme.to_storage(c.kind, hub)
        if not c.dry_run:
            obj = await self.storage.create(self.key(c.kind, c.namespace, name), obj)
        return self.scheme.render(c.kind, c.version, obj)

    async def update(self, c: Call) -> Obj:
        hub = self.scheme.decode(c.kind, c.version, self._object(c))
        meta = hub["metadata"]
        if meta.get("name") and meta["name"] != c.name:
            raise BadRequest(f"the name of the object ({meta['name']}) does not match the name on the URL ({c.name})")
        meta["name"] = c.name
        return await self._update(c, lambda current: hub)

    async def patch(self, c: Call) -> Obj:
        media = c.content_type.split(";", 1)[0].strip().lower()
        if media not in PATCH_TYPES:
            raise UnsupportedMediaType("the body of the request was in an unknown format - accepted media types "
                                       "include: " + ", ".join(PATCH_TYPES))
        ops = patches.decode_patch(c.body, media)

        def patched(current: Obj) -> Obj:
            doc = self.scheme.from_hub(c.kind, c.version, current)
            if media == JSON_PATCH:
                out = patches.apply_json_patch(doc, ops)
            elif media == MERGE_PATCH:
                out = patches.apply_merge_patch(doc, ops)
            else:
                out = patches.apply_strategic_merge_patch(doc, ops, {})
            return self.scheme.decode(c.kind, c.version, self._checked(c, out, []))

        return await self._update(c, patched, from_current=True)

    async def _update(self, c: Call, make: Callable[[Obj], Obj], from_current: bool = False) -> Obj:
        key = self.key(c.kind, c.namespace, c.name)
        for _ in range(UPDATE_RETRIES):
            stored = await self.storage.get(key)
            old = self.scheme.from_storage(c.kind, stored)
            hub = make(old)
            meta = hub["metadata"]
            self._namespace(c, meta)
            expected = meta.get("resourceVersion") or ""
            if from_current and not expected:
                expected = stored.metadata.resource_version
            old_meta = old["metadata"]
            for k in ("uid", "creationTimestamp"):
                if k in old_meta:
                    meta[k] = old_meta[k]
            meta["name"] = c.name
            c.kind.strategy.prepare_for_update(hub, old)
            spec_changed = {k: v for k, v in hub.items() if k not in ("metadata", "status")} != {
                k: v for k, v in old.items() if k not in ("metadata", "status")}
            meta["generation"] = int(old_meta.get("generation") or 1) + (1 if spec_changed else 0)
            await self._admit(UPDATE, c, hub, old, c.name, mutate=True)
            self._invalid(c, c.name, self._check_meta(c, meta) + c.kind.strategy.validate_update(hub, old))
            await self._admit(UPDATE, c, hub, old, c.name, mutate=False)
            meta.pop("resourceVersion", None)
            obj = self.scheme.to_storage(c.kind, hub)
            if c.dry_run:
                obj.metadata.resource_version = stored.metadata.resource_version
                return self.scheme.render(c.kind, c.version, obj)
            try:
                obj = await self.storage.update(key, obj, expected)
            except errors.Conflict:
                if from_current and not (self._body_rv(c)):
                    continue  # a patch without a resourceVersion is retried on the new state, as kube does
                raise
            return self.scheme.render(c.kind, c.version, obj)
        raise errors.conflict(c.kind.plural, self.scheme.group, c.name, errors.MODIFIED)

    @staticmethod
    def _body_rv(c: Call) -> str:
        try:
            doc = orjson.loads(c.body or b"{}")
        except orjson.JSONDecodeError:
            return ""
        return str(((doc.get("metadata") or {}) if isinstance(doc, dict) else {}).get("resourceVersion") or "")

    async def delete(self, c: Call) -> Obj:
        opts: Obj = {}
        if c.body:
            opts = self._body(c)
            if not isinstance(opts, dict):
                raise BadRequest("DeleteOptions must be an object")
        pre = opts.get("preconditions") or {}
        key = self.key(c.kind, c.namespace, c.name)
        old = self.scheme.from_storage(c.kind, await self.storage.get(key))
        await self._admit(DELETE, c, None, old, c.name, mutate=True)
        await self._admit(DELETE, c, None, old, c.name, mutate=False)
        if c.dry_run:
            return self.scheme.from_hub(c.kind, c.version, old)
        obj = await self.storage.delete(key, pre.get("uid") or "", pre.get("resourceVersion") or "")
        return self.scheme.render(c.kind, c.version, obj)

    async def dispatch(self, verb: str, c: Call) -> tuple[int, Obj]:
        if verb == "get":
            return 200, await self.get(c)
        if verb == "list":
            return 200, await self.list(c)
        if verb == "create":
            return 201, await self.create(c)
        if verb == "update":
            return 200, await self.update(c)
        if verb == "patch":
            return 200, await self.patch(c)
        if verb == "delete":
            return 200, await self.delete(c)
        raise MethodNotAllowed(f"the server does not allow this method on the requested resource ({verb})")


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
