"""Properties of the restaurant API's conversions and defaulting (hypothesis), and its validation."""
from __future__ import annotations

import copy

import pytest
from hypothesis import given
from hypothesis import strategies as st

from services.common import envelope
from services.common.errors import BadRequest
from services.kit.kinds import catalogue, hub
from services.pizza.restaurant import (
    GROUP,
    default_pizza_v1alpha1,
    default_pizza_v1beta1,
    kinds,
    pizza_hub_to_v1alpha1,
    pizza_hub_to_v1beta1,
    pizza_v1alpha1_to_hub,
    pizza_v1beta1_to_hub,
    validate_pizza,
)

PIZZA, TOPPING = kinds()
CATALOGUE = catalogue(GROUP, [PIZZA, TOPPING], ["v1beta1", "v1alpha1"], "/pizza")
names = st.text(alphabet="abcdefghijklmnopqrstuvwxyz-", min_size=1, max_size=12)
costs = st.floats(min_value=0, max_value=1e6, allow_nan=False)
status = st.one_of(st.just(None), costs.map(lambda c: {"cost": c}))


def _with(obj: dict, st_: dict | None) -> dict:
    if st_ is not None:
        obj["status"] = st_
    return obj


# A valid v1beta1 spec: unique non-empty names, quantities > 0.
v1beta1_pizzas = st.builds(
    lambda toppings, s: _with({"spec": {"toppings": [{"name": n, "quantity": q} for n, q in toppings.items()]}}, s),
    st.dictionaries(names, st.integers(min_value=1, max_value=20), max_size=6), status)
# A valid v1alpha1 spec: any non-empty names, repeated or not, in any order.
v1alpha1_pizzas = st.builds(lambda toppings, s: _with({"spec": {"toppings": toppings}}, s),
                            st.lists(names, max_size=12), status)


def grouped(names_: list[str]) -> list[str]:
    """v1alpha1's normal form: each name's repetitions together, in order of first appearance."""
    order = list(dict.fromkeys(names_))
    return [n for n in order for _ in range(names_.count(n))]


@given(v1alpha1_pizzas)
def test_v1alpha1_round_trips_through_v1beta1(pizza: dict) -> None:
    hub = pizza_v1alpha1_to_hub(copy.deepcopy(pizza))
    beta = pizza_hub_to_v1beta1(copy.deepcopy(hub))
    hub2 = pizza_v1beta1_to_hub(copy.deepcopy(beta))
    assert hub2 == hub
    back = pizza_hub_to_v1alpha1(hub2)
    # a repeated name means more of it: the same multiset, each name's repetitions together
    assert back["spec"]["toppings"] == grouped(pizza["spec"]["toppings"])
    assert back.get("status") == pizza.get("status")
    if pizza["spec"]["toppings"] == grouped(pizza["spec"]["toppings"]):
        assert back == pizza


@given(v1beta1_pizzas)
def test_v1beta1_round_trips_through_v1alpha1(pizza: dict) -> None:
    hub = pizza_v1beta1_to_hub(copy.deepcopy(pizza))
    alpha = pizza_hub_to_v1alpha1(copy.deepcopy(hub))
    hub2 = pizza_v1alpha1_to_hub(copy.deepcopy(alpha))
    assert hub2 == hub
    assert pizza_hub_to_v1beta1(hub2) == pizza


@given(v1beta1_pizzas)
def test_valid_v1beta1_pizzas_validate(pizza: dict) -> None:
    assert validate_pizza(pizza_v1beta1_to_hub(pizza)) == []


@given(st.one_of(v1alpha1_pizzas, st.builds(lambda s: _with({}, s), status)))
def test_v1alpha1_defaulting_is_idempotent(pizza: dict) -> None:
    once = copy.deepcopy(pizza)
    default_pizza_v1alpha1(once)
    twice = copy.deepcopy(once)
    default_pizza_v1alpha1(twice)
    assert once == twice and once["spec"]["toppings"]


@given(st.builds(lambda toppings, s: _with({"spec": {"toppings": toppings}}, s),
                 st.lists(st.builds(lambda n, q: {"name": n, "quantity": q}, names,
                                    st.integers(min_value=0, max_value=5)), max_size=6), status))
def test_v1beta1_defaulting_is_idempotent(pizza: dict) -> None:
    once = copy.deepcopy(pizza)
    default_pizza_v1beta1(once)
    twice = copy.deepcopy(once)
    default_pizza_v1beta1(twice)
    assert once == twice
    assert all(t["quantity"] > 0 for t in once["spec"]["toppings"]) and once["spec"]["toppings"]


@given(v1alpha1_pizzas, st.sampled_from(["v1alpha1", "v1beta1"]))
def test_scheme_round_trips_whole_objects_through_storage(pizza: dict, version: str) -> None:
    obj = {"apiVersion": f"{GROUP}/v1alpha1", "kind": "Pizza",
           "metadata": {"name": "p", "namespace": "default", "uid": "u", "labels": {"a": "b"}}, **pizza}
    alpha, target = CATALOGUE.lookup(GROUP, "v1alpha1", "pizzas"), CATALOGUE.lookup(GROUP, version, "pizzas")
    assert alpha is not None and target is not None
    stored = alpha.stored(envelope.to_envelope(copy.deepcopy(obj)))
    assert stored.api_version == f"{GROUP}/v1beta1"  # the storage version
    assert hub(PIZZA, "v1beta1", envelope.from_envelope(stored)) == hub(PIZZA, "v1alpha1", copy.deepcopy(obj))
    out = envelope.from_envelope(target.served(stored))
    assert out["apiVersion"] == f"{GROUP}/{version}" and out["metadata"] == obj["metadata"]


def test_defaults_are_the_books() -> None:
    empty: dict = {}
    default_pizza_v1beta1(empty)
    assert empty == {"spec": {"toppings": [{"name": "salami", "quantity": 1}, {"name": "mozzarella", "quantity": 1},
                                           {"name": "tomato", "quantity": 1}]}}
    alpha: dict = {"spec": {}}
    default_pizza_v1alpha1(alpha)
    assert alpha == {"spec": {"toppings": ["salami", "mozzarella", "tomato"]}}


def test_validation_names_the_field() -> None:
    hub = pizza_v1beta1_to_hub({"spec": {"toppings": [{"name": "salami", "quantity": -1}, {"name": "", "quantity": 1},
                                                      {"name": "salami", "quantity": 2}]}})
    causes = validate_pizza(hub)
    assert causes == [
        {"reason": "FieldValueInvalid", "message": "Invalid value: -1: cannot be negative or zero",
         "field": "spec.toppings[0].quantity"},
        {"reason": "FieldValueRequired", "message": "Required value: cannot be empty", "field": "spec.toppings[1].name"},
        {"reason": "FieldValueDuplicate", "message": 'Duplicate value: "salami"', "field": "spec.toppings[2].name"},
    ]


@pytest.mark.parametrize("spec", [{"toppings": "salami"}, {"toppings": [1]}, {"toppings": [{"name": 1}]},
                                  {"toppings": [{"name": "a", "quantity": "1"}]}])
def test_ill_typed_bodies_are_bad_requests(spec: dict) -> None:
    with pytest.raises(BadRequest):
        hub(PIZZA, "v1beta1", {"metadata": {"name": "p"}, "spec": spec})
