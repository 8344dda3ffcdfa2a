"""The registry's kinds whose storage is more than their strategy over the generic Store (kube's
pkg/registry/<group>/<kind>/storage): the subresources registered by their kind (pods/binding and
pods/eviction: pods.py; serviceaccounts/token: serviceaccounts.py), a Service's ClusterIP and the
reviews; with the RBAC escalation check, wired into the library's handlers over the registry's gRPC
clients (storage, admission, auth)."""
from __future__ import annotations

from dataclasses import replace

from apiary_pb import envelope_pb2 as pb
from services.apis import schemas
from services.apis.strategies.services import ServiceAllocators
from services.apis.strategies.workload import SCALE
from services.apiserver.catalogue import Catalogue
from services.apiserver.endpoints.handlers import Handlers, Installer, KindStorage, SubresourceStorage
from services.apiserver.endpoints.request import NOT_FOUND_MESSAGE, Request, Response
from services.apiserver.registry.scope import Obj, Scope
from services.apiserver.registry.store import Store
from services.common import errors

from .admission import Admission, AdmissionClient
from .auth import AuthClient
from .componentstatus import ComponentStatusREST
from .escalation import check_escalation
from .ipallocator import DEFAULT_SERVICE_CIDR, ClusterIPAllocator
from .pods import BindingREST, EvictionREST
from .reviews import Reviews
from .serviceaccounts import TokenREST
from .storage_client import StorageClient


def new_handlers(catalogue: Catalogue, store: StorageClient, admission: AdmissionClient | None,
                 auth: AuthClient | None = None,
                 service_cluster_ip_range: str = DEFAULT_SERVICE_CIDR) -> Handlers[StorageClient]:
    """The library's handlers as the registry serves them: Kubernetes' own definitions, admission and the
    RBAC escalation check through their services, the core kinds' own storage."""
    async def escalation(r: Scope, obj: Obj, old: Obj | None, env: pb.Object) -> None:
        await check_escalation(auth, r, obj, old, env)

    def admission_of(operation: str, options: Obj) -> Admission:
        return Admission(admission, operation, options)

    handlers = Handlers(catalogue, store, schemas, admission_of, validators=(escalation,), scale=SCALE)
    core = CoreStorage(handlers, auth, service_cluster_ip_range)
    handlers.subresources.update(core.subresources())
    handlers.installers.update(core.installers(catalogue))
    return handlers


class CoreStorage:
    """The REST storage of the core kinds that serve more than the generic verbs."""

    def __init__(self, handlers: Handlers[StorageClient], auth: AuthClient | None,
                 service_cluster_ip_range: str) -> None:
        self.h = handlers
        self.reviews = Reviews(auth, handlers.generic)
        self.service_cluster_ip_range = service_cluster_ip_range
        self.component_statuses = ComponentStatusREST(handlers.store)

    def subresources(self) -> dict[tuple[str, str], dict[str, SubresourceStorage]]:
        """By the kind's group and resource, the subresources served by REST objects of their own."""
        return {
            ("", "pods"): {"binding": BindingREST(self.h), "eviction": EvictionREST(self.h)},
            ("", "serviceaccounts"): {"token": TokenREST(self.h, self.reviews)},
        }

    def installers(self, catalogue: Catalogue) -> dict[tuple[str, str], Installer]:
        """By group and resource: services, componentstatuses, and every review (the other virtual kinds)."""
        out: dict[tuple[str, str], Installer] = {("", "services"): self._service_storage}
        for info in catalogue.resources:
            if info.virtual:
                out[(info.group, info.plural)] = self._review_storage
        out[("", "componentstatuses")] = self._component_status_storage
        return out

    def _service_storage(self, storage: KindStorage) -> KindStorage:
        """A Service's Store claims its ClusterIP (kube's Service REST storage with its allocators)."""
        store = self.h.store
        allocators = ServiceAllocators(ClusterIPAllocator(store, self.service_cluster_ip_range))
        return replace(storage, store=Store(store, self.h.generic.manage_fields, allocators.begin_create,
                                            allocators.begin_update, allocators.after_delete))

    def _component_status_storage(self, storage: KindStorage) -> KindStorage:
        """Read only, computed on each read."""
        cs = self.component_statuses
        return replace(storage, verbs={"get": cs.get, "list": cs.list})

    def _review_storage(self, storage: KindStorage) -> KindStorage:
        """A review is created only, and answered, never stored."""
        return replace(storage, verbs={"create": self.review})

    # Reviews (decoded here, answered by reviews.Reviews) ---------------------------------------

    async def review(self, r: Request) -> Response:
        if r.info.namespaced and not r.namespace:
            # LocalSubjectAccessReview is only served under /namespaces/<ns>/.
            raise errors.NotFound(NOT_FOUND_MESSAGE)
        obj = await self.h.decoder.decode(r, r.req.body)
        return Response(201, await self.reviews.review(r, obj))
