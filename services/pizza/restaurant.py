"""The restaurant.programming-kubernetes.info API ("Programming Kubernetes", chapter 8): Pizza and
Topping in v1alpha1 and v1beta1, the hub both convert through, defaulting and validation.

v1alpha1 lists a pizza's toppings by name, a repeated name meaning more of it; v1beta1 and the hub
list each topping once with its quantity.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from services import kit
from services.common.errors import BadRequest

GROUP = "restaurant.programming-kubernetes.info"
DEFAULT_TOPPINGS = ("salami", "mozzarella", "tomato")


def _spec(obj: kit.Obj, path: str = "spec") -> dict[str, Any]:
    spec = obj.get("spec")
    if spec is None:
        return {}
    if not isinstance(spec, dict):
        raise BadRequest(f"{path}: expected an object, got {type(spec).__name__}")
    return spec


def _toppings(spec: dict[str, Any], item: Callable[[Any, int], Any]) -> list[Any]:
    toppings = spec.get("toppings")
    if toppings is None:
        return []
    if not isinstance(toppings, list):
        raise BadRequest("spec.toppings: expected an array")
    return [item(t, i) for i, t in enumerate(toppings)]


def _name(t: Any, i: int) -> str:
    if not isinstance(t, str):
        raise BadRequest(f"spec.toppings[{i}]: expected a string")
    return t


def _topping(t: Any, i: int) -> dict[str, Any]:
    if not isinstance(t, dict) or not isinstance(t.get("name", ""), str) \
            or type(t.get("quantity", 0)) is not int:
        raise BadRequest(f"spec.toppings[{i}]: expected an object with a string name and an integer quantity")
    return {"name": t.get("name", ""), "quantity": t.get("quantity", 0)}


def _status(obj: kit.Obj) -> dict[str, Any]:
    status = obj.get("status")
    if status is None:
        return {}
    if not isinstance(status, dict) or not isinstance(status.get("cost", 0), (int, float)):
        raise BadRequest("status: expected an object with a numeric cost")
    return {"cost": float(status["cost"])} if "cost" in status else {}


def _with_status(out: kit.Obj, hub: kit.Obj) -> kit.Obj:
    if hub.get("status"):
        out["status"] = dict(hub["status"])
    return out


# Pizza: conversions ------------------------------------------------------------------------------------


def pizza_v1alpha1_to_hub(obj: kit.Obj) -> kit.Obj:
    toppings: list[dict[str, Any]] = []
    index: dict[str, int] = {}
    for name in _toppings(_spec(obj), _name):
        if name in index:
            toppings[index[name]]["quantity"] += 1
        else:
            index[name] = len(toppings)
            toppings.append({"name": name, "quantity": 1})
    return _with_status({"spec": {"toppings": toppings}}, {"status": _status(obj)})


def pizza_hub_to_v1alpha1(hub: kit.Obj) -> kit.Obj:
    names = [t["name"] for t in hub["spec"]["toppings"] for _ in range(t["quantity"])]
    return _with_status({"spec": {"toppings": names}}, hub)


def pizza_v1beta1_to_hub(obj: kit.Obj) -> kit.Obj:
    return _with_status({"spec": {"toppings": _toppings(_spec(obj), _topping)}}, {"status": _status(obj)})


def pizza_hub_to_v1beta1(hub: kit.Obj) -> kit.Obj:
    return _with_status({"spec": {"toppings": [dict(t) for t in hub["spec"]["toppings"]]}}, hub)


# Pizza: defaulting (SetDefaults_PizzaSpec) ---------------------------------------------------------------


def default_pizza_v1alpha1(obj: kit.Obj) -> None:
    spec = obj.setdefault("spec", {})
    if isinstance(spec, dict) and not spec.get("toppings"):
        spec["toppings"] = list(DEFAULT_TOPPINGS)


def default_pizza_v1beta1(obj: kit.Obj) -> None:
    spec = obj.setdefault("spec", {})
    if not isinstance(spec, dict):
        return
    if not spec.get("toppings"):
        spec["toppings"] = [{"name": n, "quantity": 1} for n in DEFAULT_TOPPINGS]
    for t in spec["toppings"] if isinstance(spec["toppings"], list) else ():
        if isinstance(t, dict) and not t.get("quantity"):
            t["quantity"] = 1


# Pizza: validation (on the hub) ------------------------------------------------------------------------


def validate_pizza(pizza: kit.Obj) -> list[kit.Cause]:
    errs: list[kit.Cause] = []
    seen: set[str] = set()
    for i, t in enumerate(pizza["spec"]["toppings"]):
        path = f"spec.toppings[{i}]"
        if t["quantity"] <= 0:
            errs.append(kit.invalid(f"{path}.quantity", t["quantity"], "cannot be negative or zero"))
        if not t["name"]:
            errs.append(kit.required(f"{path}.name", "cannot be empty"))
        elif t["name"] in seen:
            errs.append(kit.duplicate(f"{path}.name", t["name"]))
        seen.add(t["name"])
    return errs


class PizzaStrategy(kit.Strategy):
    """status.cost is the server's: the sum of each topping's cost times its quantity."""

    def __init__(self) -> None:
        self.toppings: Any = None

    def initialize(self, server: Any) -> None:
        self.toppings = server.informer("toppings")

    def _cost(self, pizza: kit.Obj) -> None:
        total = 0.0
        for t in pizza["spec"]["toppings"]:
            topping = self.toppings.store.get(t["name"]) if self.toppings is not None else None
            if topping is not None:
                total += topping["spec"]["cost"] * t["quantity"]
        pizza["status"] = {"cost": round(total, 6)}

    def prepare_for_create(self, obj: kit.Obj) -> None:
        self._cost(obj)

    def prepare_for_update(self, obj: kit.Obj, old: kit.Obj) -> None:
        self._cost(obj)

    def validate(self, obj: kit.Obj) -> list[kit.Cause]:
        return validate_pizza(obj)


# Topping: the same in both versions -------------------------------------------------------------------


def topping_to_hub(obj: kit.Obj) -> kit.Obj:
    cost = _spec(obj).get("cost", 0)
    if isinstance(cost, bool) or not isinstance(cost, (int, float)):
        raise BadRequest("spec.cost: expected a number")
    return {"spec": {"cost": float(cost)}}


def topping_from_hub(hub: kit.Obj) -> kit.Obj:
    return {"spec": {"cost": hub["spec"]["cost"]}}


class ToppingStrategy(kit.Strategy):
    def validate(self, obj: kit.Obj) -> list[kit.Cause]:
        cost = obj["spec"]["cost"]
        return [kit.invalid("spec.cost", cost, "cannot be negative")] if cost < 0 else []


# Schemas and kinds ---------------------------------------------------------------------------------------

_COST = {"type": "number", "format": "double", "description": "cost is the cost of the whole pizza including "
         "all toppings."}
_PIZZA = "Pizza specifies an offered pizza with toppings."


def _pizza_schema(toppings: dict[str, Any]) -> dict[str, Any]:
    return {"description": _PIZZA, "type": "object", "properties": {
        "spec": {"description": "PizzaSpec is the specification of a pizza.", "type": "object",
                 "properties": {"toppings": toppings}},
        "status": {"description": "PizzaStatus is the status of a pizza.", "type": "object",
                   "properties": {"cost": _COST}}}}


PIZZA_V1ALPHA1_SCHEMA = _pizza_schema({
    "description": "toppings is a list of Topping names. They don't have to be unique. Order does not matter.",
    "type": "array", "items": {"type": "string", "default": ""}})
PIZZA_V1BETA1_SCHEMA = _pizza_schema({
    "description": "toppings is a list of Toppings with quantities.", "type": "array",
    "items": {"description": "PizzaTopping is a topping with a quantity.", "type": "object",
              "required": ["name"],
              "properties": {"name": {"description": "name is the name of a Topping object.", "type": "string"},
                             "quantity": {"description": "quantity is the number of how often the topping is "
                                          "put onto the pizza.", "type": "integer", "format": "int64"}}}})
TOPPING_SCHEMA = {"description": "Topping is a topping put onto a pizza.", "type": "object", "properties": {
    "spec": {"description": "ToppingSpec is the specification of a topping.", "type": "object",
             "properties": {"cost": {"description": "cost is the cost of one instance of this topping.",
                                     "type": "number", "format": "double"}}}}}


def _toppings_cell(pizza: kit.Obj) -> str:
    return ",".join(f"{t['name']}({t['quantity']})" for t in pizza["spec"]["toppings"])


def kinds() -> tuple[kit.Kind, kit.Kind]:
    pizza = kit.Kind(
        kind="Pizza", plural="pizzas", namespaced=True, storage_version="v1beta1",
        versions={
            "v1beta1": kit.Version(PIZZA_V1BETA1_SCHEMA, pizza_v1beta1_to_hub, pizza_hub_to_v1beta1,
                                   default_pizza_v1beta1),
            "v1alpha1": kit.Version(PIZZA_V1ALPHA1_SCHEMA, pizza_v1alpha1_to_hub, pizza_hub_to_v1alpha1,
                                    default_pizza_v1alpha1),
        },
        strategy=PizzaStrategy(),
        columns=[kit.Column("Toppings", "string", _toppings_cell, "The toppings and their quantities."),
                 kit.Column("Cost", "number", lambda p: p.get("status", {}).get("cost", 0.0),
                            "The cost of the whole pizza.")],
    )
    topping_version = kit.Version(TOPPING_SCHEMA, topping_to_hub, topping_from_hub)
    topping = kit.Kind(
        kind="Topping", plural="toppings", namespaced=False, storage_version="v1beta1",
        versions={"v1beta1": topping_version, "v1alpha1": topping_version},
        strategy=ToppingStrategy(),
        columns=[kit.Column("Cost", "number", lambda t: t["spec"]["cost"], "The cost of one of it.")],
    )
    return pizza, topping
