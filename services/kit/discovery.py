"""Discovery documents of the server's one group: /apis (legacy APIGroupList, or aggregated
APIGroupDiscoveryList v2 / v2beta1), /apis/<group> and /apis/<group>/<version>. Each is made once."""
from __future__ import annotations

from collections.abc import Sequence

import orjson

from .api import Kind, Obj

VERBS = ["create", "delete", "get", "list", "patch", "update", "watch"]


def _version_list(group: str, versions: Sequence[str]) -> list[Obj]:
    return [{"groupVersion": f"{group}/{v}", "version": v} for v in versions]


def api_group(group: str, versions: Sequence[str], preferred: str) -> Obj:
    return {"name": group, "versions": _version_list(group, versions),
            "preferredVersion": {"groupVersion": f"{group}/{preferred}", "version": preferred}}


def resource_list(group: str, version: str, kinds: Sequence[Kind]) -> Obj:
    resources = []
    for k in kinds:
        r: Obj = {"name": k.plural, "singularName": k.singular, "namespaced": k.namespaced, "kind": k.kind,
                  "verbs": VERBS}
        if k.short_names:
            r["shortNames"] = list(k.short_names)
        if k.categories:
            r["categories"] = list(k.categories)
        resources.append(r)
    return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": f"{group}/{version}",
            "resources": resources}


def aggregated(group: str, versions: Sequence[str], kinds: Sequence[Kind], api_version: str) -> Obj:
    """APIGroupDiscoveryList; versions in preference order (the first is the preferred one)."""
    out_versions = []
    for v in versions:
        resources = []
        for k in kinds:
            if v not in k.versions:
                continue
            r: Obj = {"resource": k.plural, "responseKind": {"group": group, "version": v, "kind": k.kind},
                      "scope": "Namespaced" if k.namespaced else "Cluster", "singularResource": k.singular,
                      "verbs": VERBS}
            if k.short_names:
                r["shortNames"] = list(k.short_names)
            if k.categories:
                r["categories"] = list(k.categories)
            resources.append(r)
        out_versions.append({"version": v, "resources": resources, "freshness": "Current"})
    return {"kind": "APIGroupDiscoveryList", "apiVersion": f"apidiscovery.k8s.io/{api_version}", "metadata": {},
            "items": [{"metadata": {"name": group, "creationTimestamp": None}, "versions": out_versions}]}


class Documents:
    """Every discovery document, serialized once."""

    def __init__(self, group: str, versions: Sequence[str], kinds: Sequence[Kind]) -> None:
        preferred = versions[0]
        self.group_list = orjson.dumps({"kind": "APIGroupList", "apiVersion": "v1",
                                        "groups": [api_group(group, versions, preferred)]})
        self.group = orjson.dumps({"kind": "APIGroup", "apiVersion": "v1", **api_group(group, versions, preferred)})
        self.versions = {v: orjson.dumps(resource_list(group, v, [k for k in kinds if v in k.versions]))
                         for v in versions}
        self.aggregated = {av: orjson.dumps(aggregated(group, versions, kinds, av)) for av in ("v2", "v2beta1")}
