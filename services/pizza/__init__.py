"""The pizza restaurant: the aggregated API server of "Programming Kubernetes", chapter 8, on the kit."""
from __future__ import annotations

from services import kit

from .admission import PizzaToppings
from .restaurant import GROUP, kinds


def server() -> kit.APIServer:
    return kit.APIServer(GROUP, kinds(), versions=["v1beta1", "v1alpha1"], admission=[PizzaToppings()],
                         name="pizza", etcd_prefix="/pizza-apiserver")
