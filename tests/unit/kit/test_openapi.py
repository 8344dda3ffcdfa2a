"""The kit's OpenAPI v3: what kubectl reads of it. kubectl (1.27+) sends fieldValidation only when
the PATCH operation of the kind's path declares that query parameter (else it looks for a CRD of the
kind, which an aggregated server's kinds never are), and explain finds a kind by its GVK."""
from __future__ import annotations

import pytest

from services.kit.openapi import schema_name, v3_document
from services.pizza.restaurant import GROUP, kinds


@pytest.mark.parametrize("version", ["v1alpha1", "v1beta1"])
def test_writes_declare_field_validation(version: str) -> None:
    doc = v3_document(GROUP, version, kinds())
    writes = [(path, verb, op) for path, item in doc["paths"].items()
              for verb, op in item.items() if verb in ("post", "put", "patch")]
    patched = {op["x-kubernetes-group-version-kind"]["kind"] for _, verb, op in writes if verb == "patch"}
    assert patched == {"Pizza", "Topping"}
    for path, verb, op in writes:
        params = {p["name"] for p in op["parameters"] if p["in"] == "query"}
        assert {"fieldValidation", "fieldManager", "dryRun"} <= params, (path, verb)


def test_kinds_are_found_by_their_gvk() -> None:
    doc = v3_document(GROUP, "v1beta1", kinds())
    pizza = doc["components"]["schemas"][schema_name(GROUP, "v1beta1", "Pizza")]
    assert pizza["x-kubernetes-group-version-kind"] == [{"group": GROUP, "version": "v1beta1", "kind": "Pizza"}]
    assert "toppings" in pizza["properties"]["spec"]["properties"]
