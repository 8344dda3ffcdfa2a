"""/openapi/v2: the Swagger 2.0 document converted from the registry's v3 documents, as JSON and
gnostic protobuf."""
from __future__ import annotations

from typing import Any

import orjson
import pytest
import yaml

from apiary_pb import registry_pb2 as rpb
from gnostic_pb import openapi_v2_pb2 as oa
from services.apis import schemas
from services.apis.install import new_catalogue
from services.apiserver import openapi, openapi_v2
from services.proxy.discovery import Discovery

CATALOGUE = new_catalogue()

KUBECTL_ACCEPT = "application/com.github.proto-openapi.spec.v2@v1.0+protobuf"
CM = "io.k8s.api.core.v1.ConfigMap"
META = "io.k8s.apimachinery.pkg.apis.meta.v1."
CM_ITEM = "/api/v1/namespaces/{namespace}/configmaps/{name}"


@pytest.fixture(scope="module")
def v3() -> dict[str, bytes]:
    return openapi.documents(CATALOGUE, schemas)


@pytest.fixture(scope="module")
def swagger(v3) -> dict[str, Any]:
    return openapi_v2.convert(orjson.loads(d) for d in v3.values())


def _walk(node: Any):
    """Every schema node: the values of a properties map are schemas, the map itself is not (JSONSchemaProps
    has properties named $ref and type)."""
    if isinstance(node, dict):
        yield node
        for k, v in node.items():
            if k == "properties" and isinstance(v, dict):
                for prop in v.values():
                    yield from _walk(prop)
            else:
                yield from _walk(v)
    elif isinstance(node, list):
        for v in node:
            yield from _walk(v)


# conversion --------------------------------------------------------------------------


def test_refs_are_rewritten_to_definitions(swagger):
    raw = orjson.dumps(swagger)
    assert b"#/components/schemas/" not in raw
    refs = {n["$ref"] for n in _walk(swagger) if isinstance(n.get("$ref"), str)}
    assert refs and all(r.startswith("#/definitions/") for r in refs)
    # every reference resolves
    assert {r[len("#/definitions/"):] for r in refs} <= set(swagger["definitions"])


def test_definitions_from_every_group_version(swagger, v3):
    names = set()
    for doc in v3.values():
        names |= set(orjson.loads(doc)["components"]["schemas"])
    assert set(swagger["definitions"]) == names
    assert swagger["swagger"] == "2.0" and swagger["securityDefinitions"]["BearerToken"]["type"] == "apiKey"


def test_wrapped_ref_becomes_a_bare_ref_with_its_description(swagger):
    meta = swagger["definitions"][CM]["properties"]["metadata"]
    assert meta["$ref"] == "#/definitions/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
    assert "allOf" not in meta and "default" not in meta and meta["description"].startswith("Standard object")


def test_schema_keywords_and_gvk_extensions_are_kept(swagger):
    cm = swagger["definitions"][CM]
    assert cm["x-kubernetes-group-version-kind"] == [{"group": "", "kind": "ConfigMap", "version": "v1"}]
    assert cm["type"] == "object" and set(cm["properties"]) >= {"apiVersion", "kind", "metadata", "data"}
    assert cm["properties"]["data"]["additionalProperties"]["type"] == "string"
    cm_list = swagger["definitions"][CM + "List"]
    assert cm_list["required"] == ["items"]
    assert cm_list["properties"]["items"]["items"]["$ref"] == "#/definitions/" + CM
    owner = swagger["definitions"][META + "ObjectMeta"]["properties"]["ownerReferences"]
    assert owner["x-kubernetes-list-type"] == "map" and owner["x-kubernetes-patch-merge-key"] == "uid"
    # kubernetes-validate's 1.33 definitions carry no enums, so the keyword is checked on its own
    phase = {"type": "string", "enum": ["Active", "Terminating"]}
    assert openapi_v2.convert_schema({"properties": {"phase": phase}})["properties"]["phase"] == phase


def test_kube_openapi_parser_rules(swagger):
    """What k8s.io/kube-openapi/pkg/util/proto (kubectl's v2 models) rejects must not occur."""
    for node in _walk(swagger["definitions"]):
        if "$ref" in node:
            assert "type" not in node and "properties" not in node, node
        types = node.get("type")
        if types == "array":
            assert isinstance(node.get("items"), dict), node
        assert not isinstance(types, list)


def test_paths_operations_parameters(swagger):
    item = swagger["paths"][CM_ITEM]
    assert set(item) >= {"get", "put", "delete", "patch", "parameters"}
    gvk = {"group": "", "version": "v1", "kind": "ConfigMap"}
    for method in ("get", "put", "delete", "patch"):
        assert item[method]["x-kubernetes-group-version-kind"] == gvk
    patch = item["patch"]
    names = [p["name"] for p in patch["parameters"]]
    assert names[0] == "body" and "fieldValidation" in names and "force" in names
    fv = next(p for p in patch["parameters"] if p["name"] == "fieldValidation")
    assert fv["in"] == "query" and fv["type"] == "string" and "schema" not in fv
    assert patch["parameters"][0]["schema"] == {"$ref": "#/definitions/" + META + "Patch"}
    assert "application/strategic-merge-patch+json" in patch["consumes"]
    assert item["put"]["consumes"] == ["*/*"] and "application/json" in item["put"]["produces"]
    assert item["put"]["responses"]["200"]["schema"] == {"$ref": "#/definitions/" + CM}
    assert item["put"]["responses"]["401"] == {"description": "Unauthorized"}
    path_params = {p["name"]: p for p in item["parameters"]}
    assert path_params["name"]["in"] == "path" and path_params["name"]["required"] is True
    coll = swagger["paths"]["/api/v1/namespaces/{namespace}/configmaps"]
    assert coll["post"]["x-kubernetes-action"] == "post"
    assert coll["delete"]["x-kubernetes-action"] == "deletecollection"


# protobuf ------------------------------------------------------------------------------


def _ext(exts, name):
    return next(yaml.safe_load(e.value.yaml) for e in exts if e.name == name)


def test_protobuf_parses_back(v3, swagger):
    built = openapi_v2.build(v3)
    doc = oa.Document.FromString(built.protobuf)
    assert doc.swagger == "2.0" and doc.info.title == "Kubernetes"
    defs = {d.name: d.value for d in doc.definitions.additional_properties}
    assert set(defs) == set(swagger["definitions"])
    cm = defs[CM]
    assert list(cm.type.value) == ["object"]
    assert _ext(cm.vendor_extension, "x-kubernetes-group-version-kind") == [
        {"group": "", "kind": "ConfigMap", "version": "v1"}]
    props = {p.name: p.value for p in cm.properties.additional_properties}
    assert props["metadata"]._ref == "#/definitions/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
    assert not props["metadata"].type.value
    assert props["data"].additional_properties.schema.type.value == ["string"]
    items = {p.name: p.value for p in defs[CM + "List"].properties.additional_properties}["items"]
    assert items.items.schema[0]._ref == "#/definitions/" + CM
    assert list(defs[CM + "List"].required) == ["items"]

    paths = {p.name: p.value for p in doc.paths.path}
    assert set(paths) == set(swagger["paths"])
    patch = paths[CM_ITEM].patch
    # what kubectl's v2 query-param verifier (supportsQueryParam) reads
    assert _ext(patch.vendor_extension, "x-kubernetes-group-version-kind") == {
        "group": "", "version": "v1", "kind": "ConfigMap"}
    query = [p.parameter.non_body_parameter.query_parameter_sub_schema.name for p in patch.parameters]
    assert "fieldValidation" in query
    assert patch.parameters[0].parameter.body_parameter.schema._ref.endswith("meta.v1.Patch")
    assert paths[CM_ITEM].parameters[0].parameter.non_body_parameter.path_parameter_sub_schema.required
    ok = {r.name: r.value.response for r in paths[CM_ITEM].put.responses.response_code}
    assert ok["200"].schema.schema._ref == "#/definitions/" + CM
    sec = doc.security_definitions.additional_properties[0]
    assert sec.name == "BearerToken" and sec.value.api_key_security.name == "authorization"
    assert doc.security[0].additional_properties[0].name == "BearerToken"


def test_scalar_extension_values_are_yaml():
    any_ = openapi_v2._any("it's: a string")
    assert yaml.safe_load(any_.yaml) == "it's: a string"
    assert yaml.safe_load(openapi_v2._any(True).yaml) is True
    assert yaml.safe_load(openapi_v2._any({"a": [1, ""]}).yaml) == {"a": [1, ""]}


# serving -------------------------------------------------------------------------------


@pytest.mark.parametrize("accept,want", [
    ("", openapi_v2.JSON),
    ("*/*", openapi_v2.JSON),
    ("application/json", openapi_v2.JSON),
    ("application/json, */*", openapi_v2.JSON),
    (KUBECTL_ACCEPT, openapi_v2.PROTOBUF),
    ("application/com.github.proto-openapi.spec.v2.v1.0+protobuf", openapi_v2.PROTOBUF),
    ("*/*, " + KUBECTL_ACCEPT, openapi_v2.PROTOBUF),  # the specific range first, as goautoneg sorts
    (KUBECTL_ACCEPT + ";q=0.5, application/json", openapi_v2.JSON),
    ("application/yaml", None),
    ("application/vnd.kubernetes.protobuf", None),
])
def test_negotiate(accept, want):
    assert openapi_v2.negotiate(accept) == want


def _discovery(v3) -> Discovery:
    d = Discovery(None)  # type: ignore[arg-type]
    d.load(rpb.DiscoveryResponse(openapi=v3))
    return d


def test_content_negotiation(v3):
    d = _discovery(v3)
    js = d.lookup("/openapi/v2", "application/json", {})
    assert js.code == 200 and js.content_type == "application/json"
    gvk = orjson.loads(js.body)["definitions"][CM]["x-kubernetes-group-version-kind"]
    assert gvk == [{"group": "", "kind": "ConfigMap", "version": "v1"}]
    pb = d.lookup("/openapi/v2", KUBECTL_ACCEPT, {})
    assert pb.code == 200 and pb.content_type == "application/com.github.proto-openapi.spec.v2.v1.0+protobuf"
    assert oa.Document.FromString(pb.body).swagger == "2.0"
    headers = dict(pb.headers)
    assert headers[b"vary"] == b"Accept" and dict(js.headers)[b"etag"] == headers[b"etag"]
    assert d.lookup("/openapi/v2", "", {}).body == js.body
    assert d.lookup("/openapi/v2", "text/html", {}).code == 406
    not_modified = d.lookup("/openapi/v2", KUBECTL_ACCEPT, {}, headers[b"etag"].decode())
    assert not_modified.code == 304 and not_modified.body == b""
    assert d.lookup("/openapi/v2", KUBECTL_ACCEPT, {}, '"stale"').code == 200


def test_cached_until_the_v3_documents_change(v3):
    d = _discovery(v3)
    first = d.openapi_v2
    d.load(rpb.DiscoveryResponse(openapi=dict(v3)))
    assert d.openapi_v2 is first
    smaller = {k: v for k, v in v3.items() if k != "apis/rbac.authorization.k8s.io/v1"}
    d.load(rpb.DiscoveryResponse(openapi=smaller))
    assert d.openapi_v2 is not first and d.openapi_v2.etag != first.etag
    assert not any(p.startswith("/apis/rbac.") for p in orjson.loads(d.openapi_v2.json)["paths"])


def test_a_conversion_failure_keeps_the_previous_document(v3, monkeypatch):
    d = _discovery(v3)
    first = d.openapi_v2

    def boom(*_a, **_k):
        raise ValueError("boom")

    monkeypatch.setattr(openapi_v2, "convert", boom)
    d.load(rpb.DiscoveryResponse(openapi={"api/v1": v3["api/v1"]}))
    assert d.openapi_v2 is first and d.loaded.is_set()
