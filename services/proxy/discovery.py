"""Discovery and OpenAPI documents, fetched from the registry and served as-is.

Remote APIServices' groups, discovery entries and OpenAPI v3 documents are merged in
(aggregator/discovery.py) on every change. Documents are refreshed at start, whenever the APIService informer reports a change, and every
REFRESH_PERIOD as a backstop. Everything that can be precomputed (v2beta1 variants, the OpenAPI
index and hashes, per-group APIGroup documents) is built once per refresh, not per request; the
Swagger 2.0 document of /openapi/v2 (JSON and protobuf) is built on its first request after the v3
documents changed, not on the refresh (a CRD's events would each block the loop for its conversion).
"""
from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from apiary_pb import registry_pb2 as rpb
from apiary_pb import registry_pb2_grpc as rgrpc
from services.apiserver import openapi_v2
from services.apiserver.negotiation import DISCOVERY_V2, DISCOVERY_V2BETA1, JSON, negotiate_discovery
from services.common import grpcutil
from services.common.background import cancel_and_wait
from services.common.backoff import Backoff
from services.common.errors import APIError, NotFound

from .aggregator.discovery import merge_aggregated, merge_group_list

log = logging.getLogger(__name__)

REFRESH_PERIOD = 30.0
_EMPTY_AGGREGATED = {"kind": "APIGroupDiscoveryList", "apiVersion": "apidiscovery.k8s.io/v2",
                     "metadata": {}, "items": []}

VERSION_INFO = orjson.dumps({
    "major": "1", "minor": "33", "emulationMajor": "1", "emulationMinor": "33",
    "minCompatibilityMajor": "1", "minCompatibilityMinor": "32",
    "gitVersion": "v1.33.0-apiary", "gitCommit": "0000000000000000000000000000000000000000",
    "gitTreeState": "clean", "buildDate": "2026-01-01T00:00:00Z", "goVersion": "go1.24.0",
    "compiler": "gc", "platform": "linux/amd64",
}, option=orjson.OPT_INDENT_2)


@dataclass(slots=True)
class Document:
    """One HTTP answer: status, body, content type and extra headers."""
    code: int
    body: bytes
    content_type: str = JSON
    headers: list[tuple[bytes, bytes]] = field(default_factory=list)


def _aggregated_variants(raw: bytes) -> tuple[bytes, bytes]:
    doc: dict[str, Any] = orjson.loads(raw) if raw else dict(_EMPTY_AGGREGATED)
    doc["apiVersion"] = "apidiscovery.k8s.io/v2"
    v2 = orjson.dumps(doc)
    doc["apiVersion"] = "apidiscovery.k8s.io/v2beta1"
    return v2, orjson.dumps(doc)


# The paths the proxy serves besides the API groups' (its health checks, metrics, version, OpenAPI)
_SERVER_PATHS = ("/.well-known/openid-configuration", "/api", "/api/v1", "/apis", "/apis/", "/healthz",
                 "/healthz/ping", "/livez", "/livez/ping", "/metrics", "/openapi/v2", "/openapi/v3", "/openapi/v3/",
                 "/openid/v1/jwks", "/readyz", "/readyz/ping", "/version")


def openapi_hash(doc: bytes) -> str:
    """kube-openapi's handler3 hash: the SHA-512 of the document, upper-case hex."""
    return hashlib.sha512(doc).hexdigest().upper()


class Discovery:
    def __init__(self, registry: rgrpc.RegistryStub) -> None:
        self.registry = registry
        self.loaded = asyncio.Event()
        self._changed = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.core: dict[str, bytes] = {}
        self.groups: dict[str, bytes] = {}
        self.api_versions = b""
        self.api_group_list = b""
        self.group_docs: dict[str, bytes] = {}
        self.resource_lists: dict[str, bytes] = {}
        self.kinds: dict[tuple[str, str], str] = {}
        self.openapi: dict[str, tuple[bytes, str]] = {}
        self.openapi_index = b'{"paths":{}}'
        self.root_paths = orjson.dumps({"paths": sorted(_SERVER_PATHS)})
        self._v2_built: openapi_v2.Built | None = None
        # the registry's v3 documents /openapi/v2 is next built from (on its next request: converting every
        # group's documents costs the proxy's loop 100+ ms, which a refresh on every CRD event would block)
        self._openapi_v2_source: Mapping[str, bytes] | None = None
        # the registry's /apis documents, before the remote APIServices are merged in
        self._local_groups: dict[str, Any] = dict(_EMPTY_AGGREGATED)
        self._local_group_list: dict[str, Any] = {"kind": "APIGroupList", "apiVersion": "v1", "groups": []}
        # set by the proxy: the APIServices by name, and the remote ones' cached version entries
        self.apiservices: Callable[[], dict[str, dict[str, Any]]] = dict
        self.remote_entries: dict[str, dict[str, Any]] = {}
        # OpenAPI v3 documents: the registry's, and the remote servers' ("apis/<g>/<v>" -> document)
        self._local_openapi: dict[str, tuple[bytes, str]] = {}
        self.remote_openapi: dict[str, tuple[str, bytes]] = {}

    # lifecycle ----------------------------------------------------------------

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="discovery")

    async def stop(self) -> None:
        await cancel_and_wait(self._task)

    def invalidate(self) -> None:
        """Ask for a refresh soon (called from the APIService informer)."""
        self._changed.set()

    async def _run(self) -> None:
        backoff = Backoff()
        while True:
            try:
                await self.refresh()
                backoff.reset()
                try:
                    await asyncio.wait_for(self._changed.wait(), REFRESH_PERIOD)
                except TimeoutError:
                    pass
                # several APIService events usually come together: take them as one refresh
                await asyncio.sleep(0.05)
            except asyncio.CancelledError:
                raise
            except APIError as e:
                delay = backoff.delay()
                log.info("discovery: %s; retrying in %.2fs", e.message, delay)
                await asyncio.sleep(delay)
            except Exception:  # noqa: BLE001
                log.exception("discovery refresh failed")
                await asyncio.sleep(backoff.delay())

    async def refresh(self) -> None:
        self._changed.clear()
        resp = await grpcutil.call(self.registry.Discovery(rpb.DiscoveryRequest(), timeout=30), "registry")
        self.load(resp)

    def load(self, resp: rpb.DiscoveryResponse) -> None:
        core_v2, core_v2b1 = _aggregated_variants(resp.aggregated_core)
        self._local_groups = orjson.loads(resp.aggregated_groups) if resp.aggregated_groups \
            else dict(_EMPTY_AGGREGATED)
        self._local_group_list = orjson.loads(resp.api_group_list) if resp.api_group_list \
            else {"kind": "APIGroupList", "apiVersion": "v1", "groups": []}
        self._local_openapi = {path: (doc, openapi_hash(doc)) for path, doc in resp.openapi.items()}
        self._openapi_v2_source = resp.openapi
        self.core = {"v2": core_v2, "v2beta1": core_v2b1}
        self.api_versions = resp.api_versions or b'{"kind":"APIVersions","versions":["v1"]}'
        self.merge()
        self.resource_lists = dict(resp.resource_lists)
        self.kinds = {(gv, r.get("name", "")): r.get("kind", "")
                      for gv, doc in self.resource_lists.items()
                      for r in orjson.loads(doc).get("resources") or []}
        self.loaded.set()

    def merge(self) -> None:
        """Rebuild /apis (both forms) and /apis/<group> from the registry's documents, the APIServices
        and the remote servers' entries (aggregator/discovery.py): on every change, not per request."""
        aggregated = orjson.dumps(merge_aggregated(self._local_groups, self.remote_entries, self.apiservices()))
        groups_v2, groups_v2b1 = _aggregated_variants(aggregated)
        group_list = merge_group_list(self._local_group_list, self.apiservices())
        self.groups = {"v2": groups_v2, "v2beta1": groups_v2b1}
        self.api_group_list = orjson.dumps(group_list)
        self.group_docs = {g["name"]: orjson.dumps({"kind": "APIGroup", "apiVersion": "v1", **g})
                           for g in group_list.get("groups") or []}
        # /openapi/v3: a remote group-version's document as its server serves it (kube-aggregator's
        # v3 proxying, cached here), never in place of one the registry serves
        openapi = dict(self._local_openapi)
        for path, doc in self.remote_openapi.values():
            if path not in openapi:
                openapi[path] = (doc, openapi_hash(doc))
        self.openapi = openapi
        # GET /: kube's index of every path its muxes serve (routes.Index), groups and versions included
        versions = [f"/apis/{g['name']}/{v['version']}" for g in group_list.get("groups") or []
                    for v in g.get("versions") or []]
        self.root_paths = orjson.dumps({"paths": sorted({*_SERVER_PATHS, *versions, *(
            f"/apis/{g['name']}" for g in group_list.get("groups") or [])})})
        self.openapi_index = orjson.dumps({"paths": {
            path: {"serverRelativeURL": f"/openapi/v3/{path}?hash={h}"} for path, (_, h) in sorted(openapi.items())}})

    # serving ------------------------------------------------------------------

    def kind(self, group: str, version: str, resource: str) -> str:
        """The kind a resource's bodies have ("" when unknown)."""
        return self.kinds.get((f"{group}/{version}" if group else version, resource), "")

    def serves(self, group: str, version: str) -> bool:
        return (f"{group}/{version}" if group else version) in self.resource_lists

    def lookup(self, path: str, accept: str, query: dict[str, str],
               if_none_match: str = "") -> Document | None:
        """The discovery or OpenAPI answer for path, or None when path is not one of them."""
        parts = path.strip("/").split("/")
        head = parts[0]
        if head == "api":
            if len(parts) == 1:
                return self._aggregated(self.core, self.api_versions, accept)
            if len(parts) == 2:
                return self._resource_list(parts[1])
            return None
        if head == "apis":
            if len(parts) == 1:
                return self._aggregated(self.groups, self.api_group_list, accept)
            if len(parts) == 2:
                doc = self.group_docs.get(parts[1])
                if doc is None:
                    raise NotFound("the server could not find the requested resource")
                return Document(200, doc)
            if len(parts) == 3:
                return self._resource_list(f"{parts[1]}/{parts[2]}")
            return None
        if head == "openapi":
            return self._openapi(parts[1:], accept, query, if_none_match)
        return None

    def _aggregated(self, docs: dict[str, bytes], legacy: bytes, accept: str) -> Document:
        version = negotiate_discovery(accept)
        if version is None:
            return Document(200, legacy)
        ctype = DISCOVERY_V2 if version == "v2" else DISCOVERY_V2BETA1
        return Document(200, docs[version], ctype, [(b"vary", b"Accept")])

    def _resource_list(self, gv: str) -> Document:
        doc = self.resource_lists.get(gv)
        if doc is None:
            raise NotFound("the server could not find the requested resource")
        return Document(200, doc)

    @property
    def openapi_v2(self) -> openapi_v2.Built | None:
        """/openapi/v2 of the last refresh's documents, built on its first read after a change (kube's
        lazily computed spec)."""
        source, self._openapi_v2_source = self._openapi_v2_source, None
        if source is not None:
            try:
                self._v2_built = openapi_v2.build(source, self._v2_built)
            except Exception:  # a conversion bug must not take discovery and /openapi/v3 down
                log.exception("building /openapi/v2 failed; keeping the previous document")
        return self._v2_built

    def _openapi_v2(self, accept: str, if_none_match: str) -> Document:
        """As kube-openapi's handler: JSON or gnostic protobuf by Accept, one ETag for both, 406 otherwise."""
        built = self.openapi_v2
        if built is None:
            raise NotFound("the server could not find the requested resource")
        vary = (b"vary", b"Accept")
        ctype = openapi_v2.negotiate(accept)
        if ctype is None:
            return Document(406, b"", "text/plain; charset=utf-8", [vary])
        etag = f'"{built.etag}"'.encode()
        headers = [vary, (b"etag", etag)]
        if if_none_match and etag in [t.strip().encode() for t in if_none_match.split(",")]:
            return Document(304, b"", ctype, headers)
        body = built.json if ctype == openapi_v2.JSON else built.protobuf
        return Document(200, body, ctype, headers)

    def _openapi(self, parts: list[str], accept: str, query: dict[str, str], if_none_match: str) -> Document:
        if parts == ["v2"]:
            return self._openapi_v2(accept, if_none_match)
        if not parts or parts[0] != "v3":
            raise NotFound("the server could not find the requested resource")
        if len(parts) == 1:
            return Document(200, self.openapi_index, JSON, [(b"cache-control", b"no-cache, private")])
        key = "/".join(parts[1:])
        entry = self.openapi.get(key)
        if entry is None:
            raise NotFound("the server could not find the requested resource")
        doc, digest = entry
        etag = f'"{digest}"'.encode()
        wanted = query.get("hash")
        if wanted and wanted != digest:
            # as kube-openapi does: send the client to the current document
            location = f"/openapi/v3/{key}?hash={digest}".encode()
            return Document(301, b"", JSON,
                            [(b"location", location), (b"cache-control", b"no-cache, private")])
        cache = b"public, immutable" if wanted else b"no-cache, private"
        if if_none_match and if_none_match.encode() == etag:
            return Document(304, b"", JSON, [(b"etag", etag), (b"cache-control", cache)])
        return Document(200, doc, JSON, [(b"etag", etag), (b"cache-control", cache)])
