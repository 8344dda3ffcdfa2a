"""admissionregistration.k8s.io/v1 webhook configurations: kube's defaults and validation."""
from __future__ import annotations

from typing import Any

import pytest

from services.apis.admissionregistration import WEBHOOK_KINDS
from services.apis.install import new_catalogue
from services.apis.strategies.admissionregistration import (
    MutatingWebhookConfigurationStrategy,
    ValidatingWebhookConfigurationStrategy,
)
from services.common.errors import BadRequest

from .conftest import ADMIN, Client

CATALOGUE = new_catalogue()

MUTATING, VALIDATING = WEBHOOK_KINDS


def hook(**more: Any) -> dict[str, Any]:
    return {"name": "a.example.com", "sideEffects": "None", "admissionReviewVersions": ["v1"],
            "clientConfig": {"url": "https://hooks.example.com/x"},
            "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"]}],
            **more}


def obj(*hooks: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"name": "cfg"}, "webhooks": list(hooks)}


def causes(strategy: Any, o: dict[str, Any]) -> set[tuple[str, str]]:
    strategy.canonicalize(o)
    return {(c["field"], c["reason"]) for c in strategy.validate(o)}


def test_defaults() -> None:
    o = obj(hook(clientConfig={"service": {"namespace": "ns", "name": "svc"}}))
    MutatingWebhookConfigurationStrategy(MUTATING).canonicalize(o)
    h = o["webhooks"][0]
    assert (h["failurePolicy"], h["matchPolicy"], h["timeoutSeconds"], h["reinvocationPolicy"]) == \
        ("Fail", "Equivalent", 10, "Never")
    assert h["namespaceSelector"] == h["objectSelector"] == {} and h["rules"][0]["scope"] == "*"
    assert h["clientConfig"]["service"]["port"] == 443
    o = obj(hook())
    ValidatingWebhookConfigurationStrategy(VALIDATING).canonicalize(o)
    assert "reinvocationPolicy" not in o["webhooks"][0]


def test_validation() -> None:
    v = ValidatingWebhookConfigurationStrategy(VALIDATING)
    assert causes(v, obj(hook())) == set()
    assert causes(v, obj(hook(), hook())) == {("webhooks[1].name", "FieldValueDuplicate")}
    bad = hook(timeoutSeconds=0, failurePolicy="Maybe", matchPolicy="Close", admissionReviewVersions=[],
               clientConfig={"url": "http://x.example.com/"}, rules=[{"operations": ["GET"], "apiGroups": [],
                                                                      "apiVersions": ["v1"], "resources": ["*", "pods"],
                                                                      "scope": "Somewhere"}])
    del bad["sideEffects"]
    assert causes(v, obj(bad)) == {
        ("webhooks[0].timeoutSeconds", "FieldValueInvalid"), ("webhooks[0].failurePolicy", "FieldValueNotSupported"),
        ("webhooks[0].matchPolicy", "FieldValueNotSupported"), ("webhooks[0].sideEffects", "FieldValueRequired"),
        ("webhooks[0].admissionReviewVersions", "FieldValueRequired"),
        ("webhooks[0].clientConfig.url", "FieldValueInvalid"),
        ("webhooks[0].rules[0].operations[0]", "FieldValueNotSupported"),
        ("webhooks[0].rules[0].apiGroups", "FieldValueRequired"),
        ("webhooks[0].rules[0].resources", "FieldValueInvalid"),
        ("webhooks[0].rules[0].scope", "FieldValueNotSupported")}
    both = hook(clientConfig={"url": "https://x.example.com/", "service": {"namespace": "a", "name": "b"}})
    assert causes(v, obj(both)) == {("webhooks[0].clientConfig", "FieldValueRequired")}
    conditions = [{"name": "ok", "expression": "object != null"}, {"name": "ok", "expression": "("},
                  {"name": "params", "expression": "params.x"}]
    assert causes(v, obj(hook(matchConditions=conditions))) == {
        ("webhooks[0].matchConditions[1].name", "FieldValueDuplicate"),
        ("webhooks[0].matchConditions[1].expression", "FieldValueInvalid"),
        ("webhooks[0].matchConditions[2].expression", "FieldValueInvalid")}
    many = [{"name": f"c{i}", "expression": "true"} for i in range(65)]
    assert ("webhooks[0].matchConditions", "FieldValueTooMany") in causes(v, obj(hook(matchConditions=many)))
    m = MutatingWebhookConfigurationStrategy(MUTATING)
    assert causes(m, obj(hook(reinvocationPolicy="Always"))) == {
        ("webhooks[0].reinvocationPolicy", "FieldValueNotSupported")}


# MutatingAdmissionPolicy: v1, v1beta1 and v1alpha1 over one storage -----------------------------------

GROUP = "admissionregistration.k8s.io"
MAP_POLICY = {"metadata": {"name": "stamp"}, "spec": {
    "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"],
                                            "resources": ["configmaps"]}]},
    "mutations": [{"patchType": "ApplyConfiguration",
                   "applyConfiguration": {"expression": "Object{metadata: Object.metadata{labels: {'a': 'b'}}}"}}]}}


async def _call(handlers: Any, verb: str, version: str, name: str = "", body: Any = None,
                resource: str = "mutatingadmissionpolicies") -> tuple[int, Any]:
    return await Client(handlers)(verb, resource, name=name, body=body, group=GROUP, version=version, user=ADMIN)


async def test_mutating_policy_versions_share_one_storage(handlers: Any, storage: Any) -> None:
    code, created = await _call(handlers, "create", "v1alpha1",
                                body={"apiVersion": f"{GROUP}/v1alpha1", "kind": "MutatingAdmissionPolicy",
                                      **MAP_POLICY})
    assert code == 201 and created["apiVersion"] == f"{GROUP}/v1alpha1"
    for version in ("v1", "v1beta1", "v1alpha1"):
        _, got = await _call(handlers, "get", version, "stamp")
        assert got["apiVersion"] == f"{GROUP}/{version}" and got["kind"] == "MutatingAdmissionPolicy"
        assert got["spec"]["mutations"] == created["spec"]["mutations"]
        _, listed = await _call(handlers, "list", version)
        assert listed["apiVersion"] == f"{GROUP}/{version}"
        assert [(i["apiVersion"], i["metadata"]["name"]) for i in listed["items"]] == [(f"{GROUP}/{version}",
                                                                                         "stamp")]
    # an update through v1 of what v1alpha1 created: one object, at the next resourceVersion
    got["metadata"].setdefault("labels", {})["x"] = "y"
    got["apiVersion"] = f"{GROUP}/v1"
    code, updated = await _call(handlers, "update", "v1", "stamp", got)
    assert code == 200 and updated["apiVersion"] == f"{GROUP}/v1" and updated["metadata"]["labels"] == {"x": "y"}
    _, old = await _call(handlers, "get", "v1alpha1", "stamp")
    assert old["metadata"]["resourceVersion"] == updated["metadata"]["resourceVersion"]
    # a v1beta1 body sent to the v1 URL is refused as kube refuses a mismatched version
    with pytest.raises(BadRequest, match="does not match the expected API version"):
        await _call(handlers, "create", "v1", body={"apiVersion": f"{GROUP}/v1beta1",
                                                    "kind": "MutatingAdmissionPolicy", **MAP_POLICY})
    code, _ = await _call(handlers, "delete", "v1beta1", "stamp")
    assert code == 200
    _, listed = await _call(handlers, "list", "v1")
    assert listed["items"] == []


def test_mutating_policy_versions_name_one_storage_version() -> None:
    hashes = {CATALOGUE.lookup(GROUP, v, p).storage_version_hash()  # type: ignore[union-attr]
              for v in ("v1", "v1beta1", "v1alpha1") for p in ("mutatingadmissionpolicies",)}
    assert len(hashes) == 1
    assert CATALOGUE.lookup(GROUP, "v1", "validatingadmissionpolicies").storage_version_hash() \
        not in hashes  # type: ignore[union-attr]
