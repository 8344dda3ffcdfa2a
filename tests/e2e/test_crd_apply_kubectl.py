"""Server-side apply of custom objects with kubectl follows the CRD schema's x-kubernetes-list-type (map with
x-kubernetes-list-map-keys, set, atomic) and x-kubernetes-map-type: two field managers owning different items of a
map-list or a set-list merge, a conflict is reported on the item's path as kube reports it, an atomic list or
map is owned whole; fields kept by x-kubernetes-preserve-unknown-fields are typed by their value (objects merge
key by key, lists are atomic)."""
from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from tests.conftest import Kubectl
from tests.kubectls import RUN, namespace, refused
from tests.waiting import wait_for

pytestmark = pytest.mark.stack
GROUP = f"ssa{RUN}.example.com"
NAME = f"routers.{GROUP}"
RESOURCE = f"routers.{GROUP}"
PORT = {"type": "object", "required": ["name"], "properties": {"name": {"type": "string"},
                                                                "protocol": {"type": "string", "default": "TCP"},
                                                                "port": {"type": "integer"}}}
SCHEMA = {"type": "object", "properties": {"spec": {"type": "object", "properties": {
    "ports": {"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name", "protocol"],
              "items": PORT},
    "tags": {"type": "array", "x-kubernetes-list-type": "set", "items": {"type": "string"}},
    "hosts": {"type": "array", "items": {"type": "string"}},
    "selector": {"type": "object", "x-kubernetes-map-type": "atomic", "additionalProperties": {"type": "string"}},
    "labels": {"type": "object", "additionalProperties": {"type": "string"}},
    "extra": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}}}}}
CRD = {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition", "metadata": {"name": NAME},
       "spec": {"group": GROUP, "scope": "Namespaced",
                "names": {"plural": "routers", "singular": "router", "kind": "Router"},
                "versions": [{"name": "v1", "served": True, "storage": True,
                              "schema": {"openAPIV3Schema": SCHEMA}}]}}


@pytest.fixture(scope="module")
def ns(kubectl: Kubectl) -> Iterator[str]:
    kubectl.run("apply", "-f", "-", input=json.dumps(CRD))
    kubectl.run("wait", "--for=condition=Established", f"crd/{NAME}", "--timeout=30s")
    wait_for(lambda: kubectl.run("get", RESOURCE, "-A", check=False).returncode == 0, 10, "routers served")
    with namespace(kubectl, "crd-ssa") as name:
        yield name
    kubectl.run("delete", "crd", NAME, "--wait=false", check=False)


def router(name: str, **spec: Any) -> str:
    return yaml.safe_dump({"apiVersion": f"{GROUP}/v1", "kind": "Router", "metadata": {"name": name}, "spec": spec})


def apply(kubectl: Kubectl, ns: str, manager: str, body: str, *more: str) -> Any:
    return kubectl.run("-n", ns, "apply", "--server-side", f"--field-manager={manager}", *more, "-f", "-", input=body)


def get(kubectl: Kubectl, ns: str, name: str) -> dict[str, Any]:
    return json.loads(kubectl.run("-n", ns, "get", RESOURCE, name, "-o", "json", "--show-managed-fields").stdout)


def managed(obj: dict[str, Any], manager: str) -> dict[str, Any]:
    return next(e["fieldsV1"] for e in obj["metadata"]["managedFields"] if e["manager"] == manager)


def test_map_list_items_of_two_managers_merge(kubectl: Kubectl, ns: str) -> None:
    apply(kubectl, ns, "alice", router("r1", ports=[{"name": "http", "port": 80}], tags=["a"],
                                       labels={"from": "alice"}))
    apply(kubectl, ns, "bob", router("r1", ports=[{"name": "https", "port": 443}], tags=["b"],
                                     labels={"by": "bob"}))
    obj = get(kubectl, ns, "r1")
    assert obj["spec"]["ports"] == [{"name": "http", "protocol": "TCP", "port": 80},
                                    {"name": "https", "protocol": "TCP", "port": 443}]
    assert obj["spec"]["tags"] == ["a", "b"] and obj["spec"]["labels"] == {"from": "alice", "by": "bob"}
    alice = managed(obj, "alice")["f:spec"]
    assert set(alice["f:ports"]) == {'k:{"name":"http","protocol":"TCP"}'}
    assert set(alice["f:tags"]) == {'v:"a"'}
    assert set(managed(obj, "bob")["f:spec"]["f:ports"]) == {'k:{"name":"https","protocol":"TCP"}'}

    # alice's next apply without her port removes only hers
    apply(kubectl, ns, "alice", router("r1", tags=["a"], labels={"from": "alice"}))
    obj = get(kubectl, ns, "r1")
    assert [p["name"] for p in obj["spec"]["ports"]] == ["https"]


def test_conflict_on_a_map_list_item(kubectl: Kubectl, ns: str) -> None:
    apply(kubectl, ns, "alice", router("r2", ports=[{"name": "http", "port": 80}]))
    err = refused(kubectl, "-n", ns, "apply", "--server-side", "--field-manager=bob", "-f", "-",
                  input=router("r2", ports=[{"name": "http", "port": 8080}]))
    assert 'conflict with "alice": .spec.ports[name="http",protocol="TCP"].port' in err, err
    # forced, bob takes the field over
    apply(kubectl, ns, "bob", router("r2", ports=[{"name": "http", "port": 8080}]), "--force-conflicts")
    obj = get(kubectl, ns, "r2")
    assert obj["spec"]["ports"] == [{"name": "http", "protocol": "TCP", "port": 8080}]


def test_atomic_list_and_map_are_owned_whole(kubectl: Kubectl, ns: str) -> None:
    apply(kubectl, ns, "alice", router("r3", hosts=["a.example"], selector={"app": "a"}))
    err = refused(kubectl, "-n", ns, "apply", "--server-side", "--field-manager=bob", "-f", "-",
                  input=router("r3", hosts=["b.example"], selector={"tier": "b"}))
    assert 'Apply failed with 2 conflicts: conflicts with "alice":\n- .spec.hosts\n- .spec.selector\n' in err, err
    obj = get(kubectl, ns, "r3")
    assert managed(obj, "alice")["f:spec"]["f:hosts"] == {} and managed(obj, "alice")["f:spec"]["f:selector"] == {}
    apply(kubectl, ns, "bob", router("r3", hosts=["b.example"], selector={"tier": "b"}), "--force-conflicts")
    obj = get(kubectl, ns, "r3")
    assert obj["spec"]["hosts"] == ["b.example"] and obj["spec"]["selector"] == {"tier": "b"}


def test_preserved_unknown_fields_merge_by_key(kubectl: Kubectl, ns: str) -> None:
    apply(kubectl, ns, "alice", router("r4", extra={"owner": "alice", "nested": {"a": 1}, "list": [1]}))
    apply(kubectl, ns, "bob", router("r4", extra={"team": "bob", "nested": {"b": 2}}))
    obj = get(kubectl, ns, "r4")
    assert obj["spec"]["extra"] == {"owner": "alice", "team": "bob", "nested": {"a": 1, "b": 2}, "list": [1]}
    assert managed(obj, "bob")["f:spec"]["f:extra"] == {"f:nested": {"f:b": {}}, "f:team": {}}
    err = refused(kubectl, "-n", ns, "apply", "--server-side", "--field-manager=bob", "-f", "-",
                  input=router("r4", extra={"list": [2]}))
    assert 'conflict with "alice": .spec.extra.list' in err, err
