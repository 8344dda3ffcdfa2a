"""PizzaToppings: a pizza may only carry toppings that exist (the book's validating plug-in).

It reads Topping objects from the server's informer, and refuses requests until that informer has
synced (kube's admission ReadyFunc). A topping the informer has not seen yet may have been created a
moment ago (the informer follows storage's watch): a miss is confirmed by one read before refusing.
"""
from __future__ import annotations

from typing import Any

from services import kit
from services.common.errors import NotFound


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
        for t in a.obj["spec"]["toppings"]:
            if t["name"] not in self.toppings.store and not await self._exists(t["name"], a):
                raise a.forbidden(f"unknown topping: {t['name']}")

    async def _exists(self, name: str, a: kit.Attributes) -> bool:
        try:
            await self.server.get("toppings", "v1alpha1", "", name, a.user)
        except NotFound:
            return False
        return True
