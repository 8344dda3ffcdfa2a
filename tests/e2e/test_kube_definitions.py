"""Kubernetes' own definitions through the stack: /openapi/v3 and /openapi/v2 publish them for every
served kind, `kubectl explain` shows their nested fields and descriptions, and kubectl's client-side
validation checks the review kinds against them.

Expected schemas and descriptions are read from the kubernetes-validate package here, independently of
the services/apis/schemas.json the registry loads."""
from __future__ import annotations

import functools
import json
from typing import Any

import pytest

from gnostic_pb import openapi_v2_pb2 as oa
from services.apis.authentication import TOKEN_REQUEST
from services.apis.install import new_catalogue
from tools import kube_definitions

CATALOGUE = new_catalogue()

pytestmark = pytest.mark.stack
NS = "kube-definitions-e2e"
PROTOBUF = "application/com.github.proto-openapi.spec.v2@v1.0+protobuf"


@functools.cache
def kube() -> dict[str, Any]:
    return kube_definitions.generate(kube_definitions.source_path())


def _definition(group: str, version: str, kind: str) -> str:
    gvk = {"group": group, "version": version, "kind": kind}
    (name,) = [n for n, s in kube().items()
               if n.endswith("." + kind) and gvk in (s.get("x-kubernetes-group-version-kind") or [])]
    return name


def _description(name: str, *path: str) -> str:
    schema = kube()[name]
    for field in path:
        prop = schema["properties"][field]
        if field == path[-1]:
            return prop["description"]
        ref = (prop.get("allOf") or [prop.get("items") or prop])[0]["$ref"]
        schema = kube()[ref.rsplit("/", 1)[-1]]
    raise AssertionError(path)


def test_openapi_v3_and_v2_publish_kubes_definition_of_every_served_kind(admin):
    root = admin.get("/openapi/v3").json()["paths"]
    v2_json = admin.get("/openapi/v2").json()["definitions"]
    v2_pb = {d.name: d.value for d in oa.Document.FromString(
        admin.get("/openapi/v2", headers={"Accept": PROTOBUF}).content).definitions.additional_properties}
    docs: dict[str, Any] = {}
    # TokenRequest is published with serviceaccounts/token, in the core group's document
    for info, key in [*((r, f"apis/{r.group}/{r.version}" if r.group else f"api/{r.version}")
                        for r in CATALOGUE.resources), (TOKEN_REQUEST, "api/v1")]:
        if key not in docs:
            docs[key] = admin.get(root[key]["serverRelativeURL"]).json()["components"]["schemas"]
        name = _definition(info.group, info.version, info.kind)
        assert docs[key][name] == kube()[name], name
        assert set(v2_json[name]["properties"]) == set(kube()[name]["properties"]), name
        assert v2_json[name]["description"] == kube()[name]["description"]
        assert v2_pb[name].description == kube()[name]["description"]
        fields = {p.name for p in v2_pb[name].properties.additional_properties}
        assert fields == set(kube()[name]["properties"]), name


@pytest.mark.parametrize("field,definition,path", [
    ("rolebinding.subjects.apiGroup", "io.k8s.api.rbac.v1.RoleBinding", ("subjects", "apiGroup")),
    ("secret.type", "io.k8s.api.core.v1.Secret", ("type",)),
    ("subjectaccessreview.spec.resourceAttributes.verb", "io.k8s.api.authorization.v1.SubjectAccessReview",
     ("spec", "resourceAttributes", "verb")),
])
def test_kubectl_explain_shows_kubes_descriptions(kubectl, field, definition, path):
    out = kubectl.run("explain", field).stdout
    assert f"FIELD: {path[-1]} <string>" in out, out
    # kubectl wraps the description at 80 columns: compare the words
    assert " ".join(_description(definition, *path).split()) in " ".join(out.split()), out


def test_kubectl_explain_lists_nested_fields(kubectl):
    out = kubectl.run("explain", "rolebinding.subjects").stdout
    fields = {line.split()[0] for line in out.splitlines() if line.startswith("  ") and "<" in line}
    assert fields == set(kube()["io.k8s.api.rbac.v1.Subject"]["properties"]), out
    assert "kind\t<string> -required-" in out.replace("  ", "")


REVIEWS = """apiVersion: v1
kind: List
items:
- apiVersion: authorization.k8s.io/v1
  kind: SubjectAccessReview
  spec:
    user: alice
    resourceAttributes: {verb: get, resource: configmaps, namespace: %(ns)s}
- apiVersion: authorization.k8s.io/v1
  kind: LocalSubjectAccessReview
  metadata: {namespace: %(ns)s}
  spec:
    user: alice
    resourceAttributes: {verb: get, resource: configmaps, namespace: %(ns)s}
- apiVersion: authorization.k8s.io/v1
  kind: SelfSubjectRulesReview
  spec: {namespace: %(ns)s}
- apiVersion: authentication.k8s.io/v1
  kind: TokenReview
  spec: {token: not-a-token}
""" % {"ns": NS}


def test_kubectl_validates_the_review_kinds_client_side(kubectl):
    # In a v1 List, kubectl validates every item against /openapi/v2 itself (strict, its default).
    out = kubectl.run("create", "-f", "-", "-o", "json", input=REVIEWS).stdout
    items, decoder, at = [], json.JSONDecoder(), 0  # one JSON document per object created
    while out[at:].strip():
        obj, at = decoder.raw_decode(out, at + len(out[at:]) - len(out[at:].lstrip()))
        items.append(obj)
    assert [i["kind"] for i in items] == ["SubjectAccessReview", "LocalSubjectAccessReview",
                                          "SelfSubjectRulesReview", "TokenReview"]
    assert items[0]["status"]["allowed"] is False and items[3]["status"].get("authenticated") is not True
    # a field kube's definition does not have is refused by kubectl, before any request, with kube's names
    bad = kubectl.run("create", "-f", "-", input=REVIEWS.replace("user: alice", "usr: alice")
                      .replace("spec: {token: not-a-token}", "spec: {token: t, audience: [x]}"), check=False)
    assert bad.returncode != 0
    for problem in ('ValidationError(SubjectAccessReview.spec): unknown field "usr" in '
                    'io.k8s.api.authorization.v1.SubjectAccessReviewSpec',
                    'ValidationError(LocalSubjectAccessReview.spec): unknown field "usr" in '
                    'io.k8s.api.authorization.v1.SubjectAccessReviewSpec',
                    'ValidationError(TokenReview.spec): unknown field "audience" in '
                    'io.k8s.api.authentication.v1.TokenReviewSpec'):
        assert problem in bad.stderr, bad.stderr
