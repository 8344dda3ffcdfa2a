"""PizzaToppings: a pizza may only carry toppings that exist (the book's validating plug-in).

It reads Topping objects from the server's informer, and refuses requests until that informer has
synced (kube's admission ReadyFunc). A topping the informer has not seen yet may have been created a
moment ago (the informer follows storage's watch): on a miss, the informer is first brought up to
every write stored before the request (the kit's wait_fresh).
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
        self.server: Any = None

    def initialize(self, server: Any) -> None:
        self.server = server
        self.toppings = server.informer("toppings")

    def ready(self) -> bool:
        return self.toppings is not None and self.toppings.synced.is_set()

    async def validate(self, a: kit.Attributes) -> None:
        if not self.ready():
            raise a.forbidden("not yet ready to handle request")
        missing = [t["name"] for t in a.obj["spec"]["toppings"] if t["name"] not in self.toppings.store]
        if missing:
            await self.server.wait_fresh("toppings")
            missing = [name for name in missing if name not in self.toppings.store]
        if missing:
            raise a.forbidden(f"unknown topping: {missing[0]}")
