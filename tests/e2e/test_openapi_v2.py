"""/openapi/v2 through kubectl: client-side validation of v1 Lists reads the gnostic protobuf document."""
from __future__ import annotations

import json

import pytest
from gnostic_pb import openapi_v2_pb2 as oa

pytestmark = pytest.mark.stack
NS = "openapi-v2-e2e"
KUBECTL_ACCEPT = "application/com.github.proto-openapi.spec.v2@v1.0+protobuf"

LIST = """apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: ConfigMap
  metadata: {name: l1, namespace: %(ns)s}
  data: {a: "1"}
- apiVersion: v1
  kind: ConfigMap
  metadata: {name: l2, namespace: %(ns)s}
  data: {b: "2"}
""" % {"ns": NS}

BAD_LIST = """apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: ConfigMap
  metadata: {name: bad, namespace: %(ns)s}
  spec: {}
""" % {"ns": NS}


def test_lists_are_validated_with_openapi_v2(kubectl, admin):
    # the Accept header kubectl (client-go's OpenAPISchema) sends
    r = admin.get("/openapi/v2", headers={"Accept": KUBECTL_ACCEPT})
    assert r.status_code == 200
    assert r.headers["content-type"] == "application/com.github.proto-openapi.spec.v2.v1.0+protobuf"
    names = {d.name for d in oa.Document.FromString(r.content).definitions.additional_properties}
    assert "io.k8s.api.core.v1.Secret" in names
    assert admin.get("/openapi/v2").json()["swagger"] == "2.0"

    kubectl.run("create", "namespace", NS, check=False)
    try:
        # get | replace of a List, with kubectl's default (strict) validation
        kubectl.run("-n", NS, "create", "secret", "generic", "s1", "--from-literal=a=b")
        listed = kubectl.run("get", "secrets", "-A", "-o", "json").stdout
        out = kubectl.run("replace", "-f", "-", input=listed).stdout
        assert "secret/s1 replaced" in out

        out = kubectl.run("apply", "-f", "-", input=LIST).stdout
        assert "configmap/l1 created" in out and "configmap/l2 created" in out
        got = json.loads(kubectl.run("-n", NS, "get", "cm", "l2", "-o", "json").stdout)
        assert got["data"] == {"b": "2"}

        # an unknown field in a List item: rejected by kubectl itself, with kube's message
        bad = kubectl.run("apply", "-f", "-", input=BAD_LIST, check=False)
        assert bad.returncode != 0
        assert ('ValidationError(ConfigMap): unknown field "spec" in io.k8s.api.core.v1.ConfigMap'
                in bad.stderr), bad.stderr
        assert kubectl.run("-n", NS, "get", "cm", "bad", check=False).returncode != 0
    finally:
        kubectl.run("delete", "namespace", NS, "--wait=false", check=False)
