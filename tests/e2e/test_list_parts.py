"""A LIST large enough to travel in parts (storage → registry → proxy, mux.Streamed) reaches
clients whole: the same objects as the answer in one piece (YAML, which the proxy converts whole),
a valid JSON document for kubectl and the official Python client."""
from __future__ import annotations

import json

import orjson
import pytest
import yaml
from kubernetes import client, config

pytestmark = pytest.mark.stack
NS = "list-parts"
COUNT = 300  # about 2.5 KiB each: several 256 KiB parts
# the root-ca-cert-publisher's ConfigMap, in every namespace as on kube: not one of the test's
ROOT_CA = "kube-root-ca.crt"


@pytest.fixture(scope="module")
def filled(admin):
    admin.post("/api/v1/namespaces", json={"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    for i in range(COUNT):
        r = admin.post(f"/api/v1/namespaces/{NS}/configmaps", json={
            "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"cm-{i:03d}"},
            "data": {"i": str(i), "pad": "x" * 2500}})
        assert r.status_code in (201, 409), r.text
    return NS


@pytest.mark.parametrize("rv", ["", "0"])
def test_list_in_parts_is_whole(admin, filled, rv):
    params = {"resourceVersion": rv} if rv else {}
    r = admin.get(f"/api/v1/namespaces/{filled}/configmaps", params=params)
    assert r.status_code == 200 and r.headers["content-type"] == "application/json"
    assert "content-length" not in r.headers  # it went out in parts (chunked transfer)
    listed = orjson.loads(r.content)
    assert listed["kind"] == "ConfigMapList" and listed["metadata"]["resourceVersion"]
    names = [i["metadata"]["name"] for i in listed["items"] if i["metadata"]["name"] != ROOT_CA]
    assert names == [f"cm-{i:03d}" for i in range(COUNT)]
    y = admin.get(f"/api/v1/namespaces/{filled}/configmaps", params=params, headers={"Accept": "application/yaml"})
    assert y.status_code == 200 and "content-length" in y.headers
    assert [i["data"] for i in yaml.safe_load(y.text)["items"]] == [i["data"] for i in listed["items"]]


def test_kubectl_and_python_client_read_it(kubectl, stack, filled):
    out = json.loads(kubectl.run("get", "configmaps", "-n", filled, "-o", "json").stdout)
    assert len([i for i in out["items"] if i["metadata"]["name"] != ROOT_CA]) == COUNT
    api_client = config.new_client_from_config(config_file=str(stack.kubeconfig))
    try:
        items = [i for i in client.CoreV1Api(api_client).list_namespaced_config_map(filled).items
                 if i.metadata.name != ROOT_CA]
        assert [i.metadata.name for i in items] == [f"cm-{i:03d}" for i in range(COUNT)]
        assert items[7].data["i"] == "7"
    finally:
        api_client.close()
