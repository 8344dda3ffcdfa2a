"""PizzaToppings: a pizza may only carry toppings that exist (the book's validating plug-in).

It reads Topping objects from the server's informer, never with a call per request, and refuses
requests until that informer has synced (kube's admission ReadyFunc).
"""
from __future__ import annotations

from typing import Any

from services import kit


class PizzaToppings(kit.AdmissionPlugin):
    name = "PizzaToppings"
    operations = (kit.CREATE, kit.UPDATE)
    resources = ("pizzas",)

    def __init__(self) -> None:
        self.toppings: Any = None

    def initialize(self, server: Any) -> None:
        self.toppings = server.informer("toppings")

    def ready(self) -> bool:
        return self.toppings is not None and self.toppings.synced.is_set()

    async def validate(self, a: kit.Attributes) -> None:
        if not self.ready():
            raise a.forbidden("not yet ready to handle request")
        for t in a.obj["spec"]["toppings"]:
            if t["name"] not in self.toppings.store:
                raise a.forbidden(f"unknown topping: {t['name']}")
