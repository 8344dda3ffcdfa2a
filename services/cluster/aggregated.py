"""The aggregated API servers a local stack can run beside its core services: what each is (its
module, port, APIServices and the RBAC it needs) and the repository's own, the pizza server."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class APIServiceSpec:
    group: str
    version: str
    group_priority_minimum: int = 1000
    version_priority: int = 15


@dataclass(frozen=True)
class AggregatedServer:
    """An aggregated API server of the local stack.

    `name` is its process name (pid and log files), its Service's and its ServiceAccount's; the
    process runs `python -m <module>` with stack.kube_style_flags (or what `flags` returns instead)
    plus `args`; it must serve HTTPS on --secure-port, and `ready_path` answering 200 means ready.
    `objects` are more API objects written before it starts (its own RBAC, for instance).
    """

    name: str
    namespace: str
    port: int
    module: str
    apiservices: tuple[APIServiceSpec, ...]
    args: tuple[str, ...] = ()
    # (stack, server) -> its flags, instead of stack.kube_style_flags
    flags: Callable[[Any, "AggregatedServer"], list[str]] | None = None
    ready_path: str = "/readyz"
    etcd_prefix: str = ""
    objects: tuple[dict[str, Any], ...] = ()

    @property
    def service_name(self) -> str:
        return f"{self.name}.{self.namespace}.svc"

    @property
    def user(self) -> str:
        """The identity it talks to apiary with: its ServiceAccount's, as in a cluster."""
        return f"system:serviceaccount:{self.namespace}:{self.name}"


def namespace_reader_rbac(namespace: str, service_account: str) -> tuple[dict[str, Any], ...]:
    """What an aggregated server with kube's NamespaceLifecycle admission needs besides
    system:auth-delegator and the auth-reader binding: it lists and watches namespaces
    (k8s/pizza/rbac.yaml grants the same)."""
    name = f"{service_account}:namespaces"
    return (
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": name},
         "rules": [{"apiGroups": [""], "resources": ["namespaces"], "verbs": ["get", "list", "watch"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": name},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
         "subjects": [{"kind": "ServiceAccount", "name": service_account, "namespace": namespace}]},
    )


PIZZA_GROUP = "restaurant.programming-kubernetes.info"
# The book's pizza server (services/pizza). Its port: 8444, not the kit's default 8443, whose last
# two digits are the proxy's (6443) and would meet another test stack's proxy 2000 ports of offset
# away. Its etcd prefix is one path segment (the storage keys read the group from the second).
# /metrics is served without authorization, as every apiary service's health port serves it, so
# that Prometheus scrapes it with no credentials.
PIZZA = AggregatedServer(
    name="pizza-apiserver", namespace="pizza-apiserver", port=8444, module="services.pizza",
    apiservices=(APIServiceSpec(PIZZA_GROUP, "v1alpha1", 1000, 15), APIServiceSpec(PIZZA_GROUP, "v1beta1", 1000, 20)),
    args=("--bind-address", "127.0.0.1",
          "--authorization-always-allow-paths", "/healthz,/readyz,/livez,/metrics"),
    etcd_prefix="/pizza-apiserver",
    objects=namespace_reader_rbac("pizza-apiserver", "pizza-apiserver"),
)

# What `make run` (and the tests' shared stack) runs besides the core services.
AGGREGATED_SERVERS: tuple[AggregatedServer, ...] = (PIZZA,)
