"""A kit kind's strict-decoding walk (its definitions beside Kubernetes' own), and Table ages as kubectl prints
them."""
from __future__ import annotations

import pytest

from services.apiserver.printers import human_duration
from services.kit.openapi import Definitions
from services.pizza.restaurant import GROUP, kinds

PIZZA, TOPPING = kinds()
DEFINITIONS = Definitions(GROUP, [PIZZA, TOPPING], ["v1beta1", "v1alpha1"])


def unknown_fields(version: str, obj: dict) -> list[str]:
    unknown, _ = DEFINITIONS.check(obj, DEFINITIONS.definition_for(GROUP, version, "Pizza"), "Pizza")
    return unknown


def test_unknown_fields_by_the_versions_schema() -> None:
    obj = {"apiVersion": "x", "kind": "Pizza", "metadata": {"name": "p", "labelz": {}, "labels": {"a": "b"}},
           "spec": {"toppings": [{"name": "a", "quantity": 1}, {"name": "b", "quantty": 2}], "crust": "thin"},
           "status": {"cost": 1}, "extra": 1}
    unknown = unknown_fields("v1beta1", obj)
    assert unknown == ["metadata.labelz", "spec.toppings[1].quantty", "spec.crust", "extra"]
    # in v1alpha1 toppings are strings: nothing below them is a field
    assert unknown_fields("v1alpha1", {"spec": {"toppings": ["a", "b"]}}) == []


@pytest.mark.parametrize("seconds, text", [(0, "0s"), (119, "119s"), (125, "2m5s"), (600, "10m"), (3 * 3600, "3h"),
                                           (3 * 3600 + 120, "3h2m"), (30 * 3600, "30h"), (50 * 3600, "2d2h"),
                                           (400 * 86400, "400d"), (3 * 365 * 86400, "3y")])
def test_ages_as_kubectl_prints_them(seconds: int, text: str) -> None:
    assert human_duration(seconds) == text
