"""admissionregistration.k8s.io/v1 webhook configurations: kube's defaults and validation."""
from __future__ import annotations

from typing import Any

from services.registry.resources.admissionregistration import WEBHOOK_KINDS
from services.registry.strategies.admissionregistration import (MutatingWebhookConfigurationStrategy,
                                                                ValidatingWebhookConfigurationStrategy)

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
