"""selectableFields of a CustomResourceDefinition end to end: kubectl and the official Python client list and watch
custom objects by a declared field (a string, an integer, a boolean; in both served versions), by metadata.name
and metadata.namespace; a field neither declared nor a metadata one is a 400 as kube answers; an invalid
declaration is refused with kube's message."""
from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from kubernetes import client, config, watch

from tests.conftest import Kubectl
from tests.kubectls import RUN, namespace, refused
from tests.waiting import wait_for

pytestmark = pytest.mark.stack
GROUP = f"sel{RUN}.example.com"
NAME = f"shirts.{GROUP}"
RESOURCE = f"shirts.{GROUP}"
SCHEMA = {"type": "object", "properties": {"spec": {"type": "object", "properties": {
    "color": {"type": "string"}, "size": {"type": "integer"}, "folded": {"type": "boolean"}}}}}
FIELDS = [{"jsonPath": ".spec.color"}, {"jsonPath": ".spec.size"}]
CRD = {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition", "metadata": {"name": NAME},
       "spec": {"group": GROUP, "scope": "Namespaced",
                "names": {"plural": "shirts", "singular": "shirt", "kind": "Shirt"},
                "versions": [{"name": "v1", "served": True, "storage": True, "schema": {"openAPIV3Schema": SCHEMA},
                              "selectableFields": FIELDS},
                             {"name": "v2", "served": True, "storage": False, "schema": {"openAPIV3Schema": SCHEMA},
                              "selectableFields": [*FIELDS, {"jsonPath": ".spec.folded"}]}]}}


@pytest.fixture(scope="module")
def shirts(kubectl: Kubectl) -> Iterator[str]:
    kubectl.run("apply", "-f", "-", input=json.dumps(CRD))
    kubectl.run("wait", "--for=condition=Established", f"crd/{NAME}", "--timeout=30s")
    wait_for(lambda: kubectl.run("get", RESOURCE, "-A", check=False).returncode == 0, 10, "shirts served")
    with namespace(kubectl, "crd-sel") as ns:
        for name, color, size, folded in (("a", "red", 1, True), ("b", "blue", 2, False), ("c", "red", 3, False)):
            kubectl.run("-n", ns, "create", "-f", "-", input=yaml.safe_dump({
                "apiVersion": f"{GROUP}/v1", "kind": "Shirt", "metadata": {"name": name},
                "spec": {"color": color, "size": size, "folded": folded}}))
        yield ns
    kubectl.run("delete", "crd", NAME, "--wait=false", check=False)


def names(kubectl: Kubectl, ns: str, selector: str, resource: str = RESOURCE) -> list[str]:
    out = kubectl.run("-n", ns, "get", resource, "--field-selector", selector, "-o", "name").stdout.split()
    return sorted(n.rsplit("/", 1)[1] for n in out)


def test_list_by_selectable_fields(kubectl: Kubectl, shirts: str) -> None:
    ns = shirts
    assert names(kubectl, ns, "spec.color=red") == ["a", "c"]
    assert names(kubectl, ns, "spec.color!=red") == ["b"]
    assert names(kubectl, ns, "spec.color=red,spec.size=3") == ["c"]
    assert names(kubectl, ns, "spec.size==2") == ["b"]
    assert names(kubectl, ns, "metadata.name=b") == ["b"]
    assert names(kubectl, ns, f"metadata.namespace={ns}") == ["a", "b", "c"]
    # v2 declares spec.folded too; v1 does not
    assert names(kubectl, ns, "spec.folded=true", f"shirts.v2.{GROUP}") == ["a"]
    assert names(kubectl, ns, "spec.color=blue", f"shirts.v2.{GROUP}") == ["b"]
    err = refused(kubectl, "-n", ns, "get", f"shirts.v1.{GROUP}", "--field-selector", "spec.folded=true")
    assert "field label not supported: spec.folded" in err, err
    err = refused(kubectl, "-n", ns, "get", RESOURCE, "--field-selector", "spec.nothing=x")
    assert "field label not supported: spec.nothing" in err, err


def test_watch_and_python_client(kubectl: Kubectl, stack: Any, shirts: str) -> None:
    ns = shirts
    api_client = config.new_client_from_config(config_file=str(stack.kubeconfig))
    try:
        custom = client.CustomObjectsApi(api_client)
        listed = custom.list_namespaced_custom_object(GROUP, "v1", ns, "shirts", field_selector="spec.size=1")
        assert [i["metadata"]["name"] for i in listed["items"]] == ["a"]
        with pytest.raises(client.ApiException) as e:
            custom.list_namespaced_custom_object(GROUP, "v1", ns, "shirts", field_selector="spec.nope=1")
        assert e.value.status == 400
        status = json.loads(e.value.body)
        assert (status["reason"], status["message"]) == ("BadRequest", "field label not supported: spec.nope")

        rv = listed["metadata"]["resourceVersion"]
        kubectl.run("-n", ns, "create", "-f", "-", input=yaml.safe_dump({
            "apiVersion": f"{GROUP}/v1", "kind": "Shirt", "metadata": {"name": "d"}, "spec": {"color": "green"}}))
        kubectl.run("-n", ns, "create", "-f", "-", input=yaml.safe_dump({
            "apiVersion": f"{GROUP}/v1", "kind": "Shirt", "metadata": {"name": "e"}, "spec": {"color": "red"}}))
        # b turns red: it enters the selection (ADDED, as kube's watch reports an object newly matching)
        kubectl.run("-n", ns, "patch", RESOURCE, "b", "--type=merge", "-p", '{"spec":{"color":"red"}}')
        seen = []
        for event in watch.Watch().stream(custom.list_namespaced_custom_object, GROUP, "v1", ns, "shirts",
                                          field_selector="spec.color=red", resource_version=rv, timeout_seconds=10):
            seen.append((event["type"], event["object"]["metadata"]["name"]))
            if len(seen) == 2:
                break
        assert seen == [("ADDED", "e"), ("ADDED", "b")]
    finally:
        api_client.close()


def test_invalid_selectable_fields_refused(kubectl: Kubectl) -> None:
    bad = copy.deepcopy(CRD)
    bad["metadata"]["name"] = f"bad{NAME}"
    bad["spec"]["names"] = {"plural": "badshirts", "kind": "BadShirt"}
    bad["spec"]["versions"][0]["selectableFields"] = [{"jsonPath": ".spec.color"}, {"jsonPath": ".spec.color"},
                                                      {"jsonPath": ".spec"}]
    bad["metadata"]["name"] = f"badshirts.{GROUP}"
    err = refused(kubectl, "create", "-f", "-", input=json.dumps(bad))
    assert 'spec.versions[0].selectableFields[1].jsonPath: Duplicate value: ".spec.color"' in err, err
    assert ('spec.versions[0].selectableFields[2].jsonPath: Invalid value: ".spec": must point to a field of type '
            "string, boolean or integer. Enum string fields and strings with formats are allowed.") in err, err
