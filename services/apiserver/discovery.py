"""Discovery documents built from a catalogue (kube's endpoints/discovery): aggregated (v2, or v2beta1),
legacy (APIVersions, APIGroupList, APIGroup), and APIResourceLists; the registry's and an aggregated server's."""
from __future__ import annotations

from typing import Any

import orjson

from .catalogue import Catalogue
from .resource import ResourceInfo

Obj = dict[str, Any]


def _aggregated_resource(r: ResourceInfo) -> Obj:
    out: Obj = {
        "resource": r.plural,
        "responseKind": {"group": r.group, "version": r.version, "kind": r.kind},
        "scope": "Namespaced" if r.namespaced else "Cluster",
        "singularResource": r.singular,
        "verbs": sorted(r.verbs),
    }
    if r.short_names:
        out["shortNames"] = list(r.short_names)
    if r.categories:
        out["categories"] = list(r.categories)
    if r.subresources:
        out["subresources"] = [
            {"subresource": s.name, "responseKind": {"group": r.group if s.group is None else s.group,
                                                     "version": s.version or r.version, "kind": s.kind},
             "verbs": sorted(s.verbs)}
            for s in sorted(r.subresources, key=lambda s: s.name)
        ]
    return out


def _ordered_groups(catalogue: Catalogue) -> list[tuple[str, list[str]]]:
    """Groups with their versions, by kube-aggregator's priorities (highest first)."""
    groups: dict[str, list[str]] = {}
    priorities = catalogue.priorities()
    for g, ver in catalogue.group_versions():
        groups.setdefault(g, []).append(ver)
    for g, versions in groups.items():
        versions.sort(key=lambda ver: -priorities.get((g, ver), (0, 0))[1])
    return sorted(groups.items(),
                  key=lambda item: (-max(priorities.get((item[0], ver), (0, 0))[0] for ver in item[1]),
                                    item[0]))


def aggregated(catalogue: Catalogue, core: bool, api_version: str = "v2") -> Obj:
    items = []
    for g, versions in _ordered_groups(catalogue):
        if (g == "") != core:
            continue
        items.append({
            "metadata": {"name": g, "creationTimestamp": None},
            "versions": [{"version": ver, "resources": [_aggregated_resource(r)
                                                        for r in catalogue.in_group_version(g, ver)],
                          "freshness": "Current"} for ver in versions],
        })
    return {"kind": "APIGroupDiscoveryList", "apiVersion": f"apidiscovery.k8s.io/{api_version}", "metadata": {},
            "items": items}


def api_versions() -> Obj:
    return {"kind": "APIVersions", "versions": ["v1"],
            "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": ""}]}


def _api_group(group: str, versions: list[str]) -> Obj:
    gvs = [{"groupVersion": f"{group}/{ver}", "version": ver} for ver in versions]
    return {"name": group, "versions": gvs, "preferredVersion": gvs[0]}


def api_group_list(catalogue: Catalogue) -> Obj:
    groups = [_api_group(g, versions) for g, versions in _ordered_groups(catalogue) if g]
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}


def api_group(catalogue: Catalogue, group: str) -> Obj:
    """/apis/<group>: its versions, the preferred one first."""
    versions = dict(_ordered_groups(catalogue))[group]
    return {"kind": "APIGroup", "apiVersion": "v1", **_api_group(group, versions)}


def resource_list(catalogue: Catalogue, group: str, version: str) -> Obj:
    gv = f"{group}/{version}" if group else version
    resources: list[Obj] = []
    for r in catalogue.in_group_version(group, version):
        entry: Obj = {"name": r.plural, "singularName": r.singular, "namespaced": r.namespaced, "kind": r.kind,
                      "verbs": list(r.verbs)}
        if r.short_names:
            entry["shortNames"] = list(r.short_names)
        if r.categories:
            entry["categories"] = list(r.categories)
        if not r.virtual:
            entry["storageVersionHash"] = r.storage_version_hash()
        resources.append(entry)
        for s in sorted(r.subresources, key=lambda s: s.name):
            sub: Obj = {"name": f"{r.plural}/{s.name}", "singularName": "", "namespaced": r.namespaced}
            if s.group is not None:
                sub["group"], sub["version"] = s.group, s.version or r.version
            sub["kind"], sub["verbs"] = s.kind, list(s.verbs)
            resources.append(sub)
    return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": resources}


def documents(catalogue: Catalogue) -> dict[str, Any]:
    """Every discovery document, encoded once for each version of the catalogue."""
    return {
        "aggregated_core": orjson.dumps(aggregated(catalogue, core=True)),
        "aggregated_groups": orjson.dumps(aggregated(catalogue, core=False)),
        "api_versions": orjson.dumps(api_versions()),
        "api_group_list": orjson.dumps(api_group_list(catalogue)),
        "resource_lists": {
            (f"{g}/{ver}" if g else ver): orjson.dumps(resource_list(catalogue, g, ver))
            for g, ver in catalogue.group_versions()
        },
    }
