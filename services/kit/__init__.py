"""kit: write an aggregated Kubernetes API server in Python.

An aggregated API server is declared, then run::

    from services import kit

    pizza = kit.Kind(
        kind="Pizza", plural="pizzas", namespaced=True,
        versions={"v1beta1": kit.Version(schema=..., to_hub=..., from_hub=..., default=...),
                  "v1alpha1": kit.Version(...)},
        strategy=PizzaStrategy(),                 # kit.Strategy: prepare, validate (kit.invalid(...) errors)
        columns=[kit.Column("Cost", "number", lambda o: o["status"]["cost"])],
    )
    server = kit.APIServer("restaurant.example.com", [pizza, ...], versions=["v1beta1", "v1alpha1"],
                           admission=[MyPlugin()], name="pizza", etcd_prefix="/pizza-apiserver")

    @server.app.get("/apis/restaurant.example.com/v1beta1/namespaces/{ns}/pizzas/{name}/bake")
    async def bake(ns: str, name: str, request: fastapi.Request): ...   # FastAPI routes, authorized

    server.main()                                   # kube-style flags: --secure-port, --etcd-servers, ...

Objects are dicts. Each version converts to and from the hub (the internal type) and defaults
what it decodes; the strategy and admission plug-ins see hub objects only. Versions are listed in
preference order; the first version of a kind (or `storage_version`) is the one stored.

What the kit supplies: HTTPS with kube's client-certificate handling; delegated authentication
(front-proxy request headers, x509, TokenReview) and authorization (SubjectAccessReview, cached)
against the core API server; discovery (aggregated and legacy); OpenAPI v2 and v3; Table output;
watch; storage on etcd through apiary's storage code (watch cache, resourceVersion semantics);
/metrics, /healthz, /readyz, /livez. See docs/kit.md.
"""
from services.apiserver.fielderrors import Cause, duplicate, forbidden, invalid, required

from .api import (
    CREATE,
    DELETE,
    UPDATE,
    AdmissionPlugin,
    Attributes,
    Column,
    Kind,
    Obj,
    Strategy,
    Version,
)
from .server import APIServer

__all__ = [
    "CREATE", "DELETE", "UPDATE", "APIServer", "AdmissionPlugin", "Attributes", "Cause", "Column", "Kind",
    "Obj", "Strategy", "Version", "duplicate", "forbidden", "invalid", "required",
]
