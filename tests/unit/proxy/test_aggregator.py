"""The aggregator's pure parts: endpoint resolution, discovery merging and ordering, identity headers."""
from __future__ import annotations

from typing import Any

import pytest

from services.common.identity import user_pb
from services.proxy.aggregator import discovery
from services.proxy.aggregator.proxy import identity_headers
from services.proxy.aggregator.resolver import ResolveError, ServiceResolver, Target


class _Store:
    def __init__(self, items: dict[str, Any]) -> None:
        self.store = items

    def add_handler(self, handler: Any) -> None:
        pass


def apiservice(group: str, version: str, gpm: int, vp: int, service: bool = True) -> dict[str, Any]:
    spec: dict[str, Any] = {"group": group, "version": version, "groupPriorityMinimum": gpm, "versionPriority": vp}
    if service:
        spec["service"] = {"namespace": "ns", "name": "api", "port": 443}
    return {"metadata": {"name": f"{version}.{group}"}, "spec": spec}


def resolver(svc: dict[str, Any] | None, ep: dict[str, Any] | None, slices: list[dict[str, Any]] = ()) -> ServiceResolver:
    return ServiceResolver(_Store({"ns/api": svc} if svc else {}), _Store({"ns/api": ep} if ep else {}),
                           _Store({f"ns/s{i}": s for i, s in enumerate(slices)}))  # type: ignore[arg-type]


SVC = {"metadata": {"name": "api", "namespace": "ns"}, "spec": {"ports": [{"name": "https", "port": 443}]}}


def test_resolution_reasons() -> None:
    api = apiservice("g.io", "v1", 100, 10)
    with pytest.raises(ResolveError) as e:
        resolver(None, None).resolve(api)
    assert (e.value.reason, e.value.message) == ("ServiceNotFound", 'service/api in "ns" is not present')
    other_port = {"spec": {"ports": [{"port": 80}]}}
    with pytest.raises(ResolveError) as e:
        resolver(other_port, None).resolve(api)
    assert e.value.reason == "ServicePortError"
    with pytest.raises(ResolveError) as e:
        resolver(SVC, None).resolve(api)
    assert e.value.reason == "EndpointsNotFound"
    wrong_name = {"subsets": [{"addresses": [{"ip": "127.0.0.1"}], "ports": [{"name": "http", "port": 8443}]}]}
    with pytest.raises(ResolveError) as e:
        resolver(SVC, wrong_name).resolve(api)
    assert (e.value.reason, e.value.message) == (
        "MissingEndpoints", 'endpoints for service/api in "ns" have no addresses with port name "https"')


def test_round_robin_over_endpoints_and_ready_slices() -> None:
    ep = {"subsets": [{"addresses": [{"ip": "127.0.0.1"}, {"ip": "127.0.0.2"}],
                       "ports": [{"name": "https", "port": 8443}]}]}
    sl = {"metadata": {"namespace": "ns", "labels": {"kubernetes.io/service-name": "api"}},
          "addressType": "IPv4", "ports": [{"name": "https", "port": 9443}],
          "endpoints": [{"addresses": ["127.0.0.3"]}, {"addresses": ["127.0.0.4"], "conditions": {"ready": False}}]}
    r = resolver(SVC, ep, [sl])
    api = apiservice("g.io", "v1", 100, 10)
    seen = {r.resolve(api) for _ in range(6)}
    assert seen == {Target("127.0.0.1", 8443, "api.ns.svc"), Target("127.0.0.2", 8443, "api.ns.svc"),
                    Target("127.0.0.3", 9443, "api.ns.svc")}
    external = {"spec": {"type": "ExternalName", "externalName": "backend.example.com"}}
    assert resolver(external, None).resolve(api) == Target("backend.example.com", 443, "api.ns.svc")


def test_kube_version_order() -> None:
    versions = ["v11alpha2", "foo1", "v10beta3", "v1", "v2", "v12alpha1", "v3beta1", "foo10", "v10", "v11beta2"]
    assert sorted(versions, key=discovery.version_key) == [
        "v10", "v2", "v1", "v11beta2", "v10beta3", "v3beta1", "v12alpha1", "v11alpha2", "foo1", "foo10"]


def test_merge_orders_groups_by_priority_then_name() -> None:
    local = {"kind": "APIGroupDiscoveryList", "items": [
        {"metadata": {"name": "rbac.authorization.k8s.io"}, "versions": [{"version": "v1", "resources": []}]}]}
    apis = {a["metadata"]["name"]: a for a in (
        apiservice("rbac.authorization.k8s.io", "v1", 17000, 15, service=False),
        apiservice("b.example.com", "v1", 1000, 15), apiservice("a.example.com", "v1beta1", 1000, 10),
        apiservice("a.example.com", "v1", 1000, 10), apiservice("top.example.com", "v1", 18000, 1))}
    remote = {name: {"version": a["spec"]["version"], "resources": [], "freshness": "Current"}
              for name, a in apis.items() if "service" in a["spec"] and not name.startswith("v1.top")}
    merged = discovery.merge_aggregated(local, remote, apis)
    assert [i["metadata"]["name"] for i in merged["items"]] == [
        "rbac.authorization.k8s.io", "a.example.com", "b.example.com"]
    # equal versionPriority: kube's version order (GA first)
    assert [v["version"] for v in merged["items"][1]["versions"]] == ["v1", "v1beta1"]
    legacy = discovery.merge_group_list({"kind": "APIGroupList", "groups": []}, apis)
    assert [g["name"] for g in legacy["groups"]] == ["top.example.com", "rbac.authorization.k8s.io",
                                                     "a.example.com", "b.example.com"]
    assert legacy["groups"][2]["preferredVersion"] == {"groupVersion": "a.example.com/v1", "version": "v1"}


def test_legacy_resource_list_to_aggregated() -> None:
    entry = discovery.legacy_to_aggregated({"resources": [
        {"name": "pizzas", "singularName": "pizza", "namespaced": True, "kind": "Pizza", "verbs": ["get"],
         "shortNames": ["pz"]},
        {"name": "pizzas/status", "namespaced": True, "kind": "Pizza", "verbs": ["get", "patch"]}]},
        "restaurant.example.com", "v1beta1")
    assert entry == {"version": "v1beta1", "freshness": "Current", "resources": [{
        "resource": "pizzas", "scope": "Namespaced", "singularResource": "pizza", "verbs": ["get"],
        "shortNames": ["pz"],
        "responseKind": {"group": "restaurant.example.com", "version": "v1beta1", "kind": "Pizza"},
        "subresources": [{"subresource": "status", "verbs": ["get", "patch"],
                          "responseKind": {"group": "restaurant.example.com", "version": "v1beta1",
                                           "kind": "Pizza"}}]}]}


def test_identity_headers() -> None:
    user = user_pb("alice", ["devs", "system:authenticated"])
    user.uid = "42"
    user.extra["scopes.example.com/a b"].values.extend(["x", "y"])
    assert identity_headers(user) == [
        (b"x-remote-user", b"alice"), (b"x-remote-uid", b"42"), (b"x-remote-group", b"devs"),
        (b"x-remote-group", b"system:authenticated"),
        (b"x-remote-extra-scopes.example.com%2Fa%20b", b"x"), (b"x-remote-extra-scopes.example.com%2Fa%20b", b"y")]
