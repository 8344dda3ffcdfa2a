"""One definition per resource (services/apis), and schemas that are Kubernetes' own definitions.

The expected schemas are computed here from the kubernetes-validate package itself, not read back from
the generated services/apis/schemas.json, so a published schema that drifts from kube's fails."""
from __future__ import annotations

import functools
from typing import Any

import orjson
import pytest

from services.apis import install, schemas
from services.apis.authentication import TOKEN_REQUEST
from services.apiserver import openapi
from services.apiserver.registry.rest import Strategy, strategy_for
from services.proxy import protobuf
from tools import kube_definitions

from .conftest import cm

CATALOGUE = install.new_catalogue()

SERVED = [*CATALOGUE.resources, TOKEN_REQUEST]


@functools.cache
def kube() -> dict[str, Any]:
    return kube_definitions.generate(kube_definitions.source_path())


@functools.cache
def published() -> dict[str, Any]:
    out: dict[str, Any] = {}
    for raw in openapi.documents(CATALOGUE, schemas).values():
        out.update(orjson.loads(raw)["components"]["schemas"])
    return out


def _gvks(name: str) -> list[dict[str, str]]:
    return kube()[name].get("x-kubernetes-group-version-kind") or []


@pytest.mark.parametrize("info", SERVED, ids=lambda r: f"{r.api_version}/{r.kind}")
def test_every_served_kind_publishes_kubes_definition(info):
    name = schemas.definition_for(info.group, info.version, info.kind)
    assert {"group": info.group, "version": info.version, "kind": info.kind} in _gvks(name)
    assert published()[name] == kube()[name]
    if not info.virtual:
        assert published()[name + "List"] == kube()[name + "List"]
    # and everything it references, down to ObjectMeta
    for ref in schemas._refs(kube()[name]):
        assert published()[ref] == kube()[ref], ref
    assert "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta" in published()


def test_published_definitions_are_kubes_shape():
    sar = published()[schemas.AUTHZ + "SubjectAccessReview"]
    assert sar["properties"]["spec"] == {
        "allOf": [{"$ref": schemas.REF_PREFIX + schemas.AUTHZ + "SubjectAccessReviewSpec"}],
        "description": kube()[schemas.AUTHZ + "SubjectAccessReview"]["properties"]["spec"]["description"]}
    assert sar["properties"]["apiVersion"]["type"] == "string" and "enum" not in sar["properties"]["kind"]
    subject = published()[schemas.RBAC + "Subject"]
    assert subject["properties"]["apiGroup"]["description"].startswith("APIGroup holds the API group")
    finalizers = published()[schemas.META + "ObjectMeta"]["properties"]["finalizers"]
    assert finalizers["x-kubernetes-list-type"] == "set"


def test_definitions_name_everything_each_kind_needs():
    kinds = CATALOGUE.kinds()
    assert {r.kind for r in kinds} >= {
        "ConfigMap", "Event", "Namespace", "Secret", "ServiceAccount", "APIService", "Role", "ClusterRole",
        "RoleBinding", "ClusterRoleBinding", "TokenReview", "SelfSubjectReview", "TokenRequest",
        "SubjectAccessReview", "LocalSubjectAccessReview", "SelfSubjectAccessReview", "SelfSubjectRulesReview"}
    for r in kinds:
        assert r.strategy is not None and issubclass(r.strategy, Strategy), r.kind
        assert isinstance(strategy_for(r), r.strategy)
        if r.protobuf:
            assert protobuf.KINDS[(r.api_version, r.kind)].DESCRIPTOR.full_name == r.protobuf
    # the proxy decodes protobuf bodies of exactly the kinds whose definition names a message
    assert set(protobuf.KINDS) == {(r.api_version, r.kind) for r in kinds if r.protobuf}
    assert CATALOGUE.priorities() == {(gv.group, gv.version): (gv.group_priority, gv.version_priority)
                                      for gv in install.GROUP_VERSIONS}
    assert CATALOGUE.convertor("", "configmaps") is CATALOGUE.lookup("", "v1", "configmaps").table


def _kube_merge_keys(name: str, path: str = "", seen: frozenset[str] = frozenset()) -> dict[str, str]:
    """Straight from kube's definitions: every list whose patch strategy merges, by path."""
    out: dict[str, str] = {}
    for field, prop in (kube()[name].get("properties") or {}).items():
        sub = f"{path}.{field}" if path else field
        ref = (prop.get("allOf") or [prop])[0].get("$ref") or (prop.get("items") or {}).get("$ref")
        if "merge" in (prop.get("x-kubernetes-patch-strategy") or ""):
            out[sub] = prop.get("x-kubernetes-patch-merge-key", "")
        if ref and ref not in seen:
            out.update(_kube_merge_keys(ref[len(schemas.REF_PREFIX):], sub, seen | {ref}))
    return out


@pytest.mark.parametrize("info", SERVED, ids=lambda r: f"{r.api_version}/{r.kind}")
def test_strategic_merge_keys_come_from_the_definitions(info):
    name = schemas.definition_for(info.group, info.version, info.kind)
    merge_keys = schemas.merge_keys(name)
    assert merge_keys == _kube_merge_keys(name)
    assert merge_keys["metadata.ownerReferences"] == "uid" and merge_keys["metadata.finalizers"] == ""


async def test_strategic_merge_patch_merges_by_the_definitions_keys(api):
    sa = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "bot", "namespace": "default"},
          "secrets": [{"name": "a"}]}
    assert (await api("create", "serviceaccounts", "default", body=sa))[0] == 201
    code, out = await api("patch", "serviceaccounts", "default", "bot", body={"secrets": [{"name": "b"}]},
                          content_type="application/strategic-merge-patch+json")
    assert code == 200 and out["secrets"] == [{"name": "a"}, {"name": "b"}]
    # NamespaceStatus.conditions merge by type (patchMergeKey), through /status
    ns = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "n1"}}
    assert (await api("create", "namespaces", body=ns))[0] == 201
    cond = {"type": "NamespaceDeletionDiscoveryFailure", "status": "False", "reason": "Ok"}
    for c in (cond, {"type": "NamespaceContentRemaining", "status": "False", "reason": "Ok"},
              {**cond, "status": "True", "reason": "Bad"}):
        code, out = await api("patch", "namespaces", "", "n1", body={"status": {"conditions": [c]}},
                              content_type="application/strategic-merge-patch+json", subresource="status")
        assert code == 200, out
    assert [(c["type"], c["status"]) for c in out["status"]["conditions"]] == [
        ("NamespaceDeletionDiscoveryFailure", "True"), ("NamespaceContentRemaining", "False")]
    # a list without a patch strategy (ConfigMap has none; RoleBinding.subjects is atomic) is replaced
    await api("create", "configmaps", "default", body=cm("c", data={"a": "1"}))
    code, out = await api("patch", "configmaps", "default", "c", body={"metadata": {"finalizers": ["x/y"]}},
                          content_type="application/strategic-merge-patch+json")
    assert code == 200 and out["metadata"]["finalizers"] == ["x/y"]
