"""The controller-manager's client of the API (client-go's dynamic client and RESTMapper, in small):
HTTPS to the proxy with the kubeconfig's credentials; errors come back as the Status they carry, an
unreachable API as ServiceUnavailable."""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import orjson

from services.apiserver import kubeconfig
from services.apiserver.restclient import RESTClient
from services.common.errors import APIError
from services.common.informer import HTTPListWatch, Informer

log = logging.getLogger(__name__)

Obj = dict[str, Any]


@dataclass(frozen=True)
class Resource:
    """One resource the API serves, as discovery lists it (a RESTMapping)."""
    group: str
    version: str
    resource: str
    kind: str
    namespaced: bool
    verbs: frozenset[str]

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def path(self, namespace: str = "", name: str = "") -> str:
        base = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if self.namespaced and namespace:
            base += f"/namespaces/{namespace}"
        base += f"/{self.resource}"
        return f"{base}/{name}" if name else base


# kube's controller-manager names itself so (rest.DefaultKubernetesUserAgent); the registry records its
# writes under the User-Agent's first word as field manager, as kube-apiserver does.
USER_AGENT = "kube-controller-manager/v1.33.0-apiary (linux/amd64) apiary"


class Client:
    """JSON objects over a RESTClient (services/apiserver/restclient.py: one aiohttp session, its pool unbounded
    because every informer's watch holds a connection)."""

    def __init__(self, rest: RESTClient) -> None:
        self.rest = rest

    @classmethod
    def from_kubeconfig(cls, path: str, timeout: float = 30.0) -> Client:
        """Made inside the event loop that uses it."""
        return cls(kubeconfig.load(path).rest_client(timeout, USER_AGENT))

    async def close(self) -> None:
        await self.rest.close()

    async def request(self, method: str, path: str, body: Obj | None = None, params: dict[str, str] | None = None,
                      content_type: str = "application/json", accept: str = "application/json") -> Obj:
        headers = {"Accept": accept}
        content = None
        if body is not None:
            content, headers["Content-Type"] = orjson.dumps(body), content_type
        answer = await self.rest.request(method, path, params, content, headers)
        try:
            return orjson.loads(answer) if answer else {}
        except orjson.JSONDecodeError:
            return {}

    async def get(self, res: Resource, namespace: str, name: str) -> Obj:
        return await self.request("GET", res.path(namespace, name))

    async def create(self, res: Resource, namespace: str, obj: Obj) -> Obj:
        return await self.request("POST", res.path(namespace), obj)

    async def update(self, res: Resource, obj: Obj, subresource: str = "") -> Obj:
        meta = obj["metadata"]
        path = res.path(meta.get("namespace", ""), meta["name"])
        return await self.request("PUT", f"{path}/{subresource}" if subresource else path, obj)

    async def patch(self, res: Resource, namespace: str, name: str, patch: Obj | list[Any],
                    content_type: str = "application/merge-patch+json") -> Obj:
        return await self.request("PATCH", res.path(namespace, name), patch, content_type=content_type)  # type: ignore[arg-type]

    async def delete(self, res: Resource, namespace: str, name: str, uid: str = "",
                     propagation: str = "") -> Obj:
        opts: Obj = {"kind": "DeleteOptions", "apiVersion": "v1"}
        if uid:
            opts["preconditions"] = {"uid": uid}
        if propagation:
            opts["propagationPolicy"] = propagation
        return await self.request("DELETE", res.path(namespace, name), opts)

    def informer(self, res: Resource, namespace: str = "", params: dict[str, str] | None = None,
                 metadata_only: bool = False) -> Informer:
        """An informer on `res`; metadata_only keeps PartialObjectMetadata (client-go's metadata informer)."""
        return Informer.over(HTTPListWatch(self.rest, res.path(namespace), params, metadata_only), res.group,
                             res.version, res.resource)

    async def discover(self, failed: set[str] | None = None) -> list[Resource]:
        """Every resource of the preferred version of every group (discovery.ServerPreferredResources),
        subresources left out: from aggregated discovery, two requests (/api and /apis), as client-go asks
        first; from each group-version's APIResourceList where the server answers only the legacy form. A
        group whose server does not answer (Stale, or an error) is skipped this time, and added to failed
        (client-go's ErrGroupDiscoveryFailed: its resources are not known to be gone)."""
        out: list[Resource] = []
        legacy: list[tuple[str, str]] = []
        for path in ("/api", "/apis"):
            doc = await self.request("GET", path, accept=AGGREGATED_DISCOVERY)
            if doc.get("kind") == "APIGroupDiscoveryList":
                out += aggregated_resources(doc, failed)
            elif path == "/api":
                legacy.append(("", (doc.get("versions") or ["v1"])[0]))
            else:
                for g in doc.get("groups") or []:
                    preferred = (g.get("preferredVersion") or {}).get("version") or g["versions"][0]["version"]
                    legacy.append((g["name"], preferred))
        for group, version in legacy:
            path = f"/apis/{group}/{version}" if group else f"/api/{version}"
            try:
                rl = await self.request("GET", path)
            except APIError as e:
                log.info("discovery of %s: %s", path, e)
                if failed is not None:
                    failed.add(group)
                continue
            for r in rl.get("resources") or []:
                if "/" in r["name"]:
                    continue
                out.append(Resource(group, version, r["name"], r["kind"], bool(r.get("namespaced")),
                                    frozenset(r.get("verbs") or ())))
        return out


# client-go's Accept for discovery: the aggregated form (apidiscovery.k8s.io/v2), else the legacy lists.
AGGREGATED_DISCOVERY = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json"


def aggregated_resources(doc: Obj, failed: set[str] | None = None) -> list[Resource]:
    """The resources of each group's preferred (first) version in an APIGroupDiscoveryList; a group whose
    preferred version is Stale (its aggregated server does not answer) is left out, as a failed group."""
    out: list[Resource] = []
    for item in doc.get("items") or []:
        group = (item.get("metadata") or {}).get("name") or ""
        versions = item.get("versions") or []
        if not versions or versions[0].get("freshness") == "Stale":
            if failed is not None:
                failed.add(group)
            continue
        version = versions[0].get("version", "")
        for r in versions[0].get("resources") or []:
            kind = (r.get("responseKind") or {}).get("kind")
            if not kind:
                continue  # client-go drops a resource without responseKind
            out.append(Resource(group, version, r["resource"], kind, r.get("scope") == "Namespaced",
                                frozenset(r.get("verbs") or ())))
    return out


class RESTMapper:
    """Kind -> resource, for the resources discovery found (ownerReferences name kinds, not resources)."""

    def __init__(self, resources: list[Resource]) -> None:
        self.resources = resources
        self._by_kind = {(r.group, r.kind): r for r in resources}
        self._by_gvk = {(r.group, r.version, r.kind): r for r in resources}

    def for_kind(self, api_version: str, kind: str) -> Resource | None:
        group, _, version = api_version.rpartition("/")
        return self._by_gvk.get((group, version, kind)) or self._by_kind.get((group, kind))

    def get(self, group: str, resource: str) -> Resource:
        return next(r for r in self.resources if r.group == group and r.resource == resource)
