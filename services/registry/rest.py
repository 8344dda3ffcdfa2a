"""The registry's kinds whose storage is more than their strategy over the generic Store (kube's
pkg/registry/<group>/<kind>/storage): pods/binding and pods/eviction, a Service's ClusterIP,
serviceaccounts/token and the reviews; with the RBAC escalation check, wired into the library's handlers
over the registry's gRPC clients (storage, admission, auth)."""
from __future__ import annotations

from dataclasses import replace

import orjson

from apiary_pb import envelope_pb2 as pb
from apiary_pb import registry_pb2 as rpb
from apiary_pb import storage_pb2 as spb
from services.apis import schemas
from services.apis.authentication import TOKEN_REQUEST
from services.apis.strategies.pods import BINDING, EVICTION
from services.apis.strategies.reviews import TokenRequestStrategy
from services.apis.strategies.services import ServiceAllocators
from services.apis.strategies.workload import SCALE
from services.apiserver.catalogue import Catalogue
from services.apiserver.endpoints.handlers import Handlers, Installer, KindStorage
from services.apiserver.endpoints.request import NOT_FOUND_MESSAGE, Request, Response
from services.apiserver.registry.rest import Strategy, now_rfc3339
from services.apiserver.registry.scope import Obj, Scope
from services.apiserver.registry.store import Store
from services.common import envelope, errors
from services.common.errors import BadRequest
from services.common.identity import APISERVER

from . import eviction as eviction_rules
from .admission import Admission, AdmissionClient
from .auth import AuthClient
from .escalation import check_escalation
from .ipallocator import DEFAULT_SERVICE_CIDR, ClusterIPAllocator
from .reviews import Reviews
from .storage_client import StorageClient

# An eviction's tries when a Pending pod changes under it (kube's EvictionsRetry allows 20).
EVICTION_ATTEMPTS = 20

# What kube's BindingREST and EvictionREST answer: a Status, 201.
SUCCESS_CREATED = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}

TOKEN_REQUEST_STRATEGY = TokenRequestStrategy(TOKEN_REQUEST)


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
    handlers.installers.update(CoreStorage(handlers, auth, service_cluster_ip_range).installers(catalogue))
    return handlers


class CoreStorage:
    """The REST storage of the core kinds that serve more than the generic verbs."""

    def __init__(self, handlers: Handlers[StorageClient], auth: AuthClient | None,
                 service_cluster_ip_range: str) -> None:
        self.h = handlers
        self.reviews = Reviews(auth, handlers.generic)
        self.service_cluster_ip_range = service_cluster_ip_range

    def installers(self, catalogue: Catalogue) -> dict[tuple[str, str], Installer]:
        """By group and resource: pods, services, serviceaccounts, and every review (a virtual kind)."""
        out: dict[tuple[str, str], Installer] = {
            ("", "pods"): self._pod_storage,
            ("", "services"): self._service_storage,
            ("", "serviceaccounts"): self._service_account_storage,
        }
        for info in catalogue.resources:
            if info.virtual:
                out[(info.group, info.plural)] = self._review_storage
        return out

    def _pod_storage(self, storage: KindStorage) -> KindStorage:
        """pods/binding and pods/eviction (kube's BindingREST and EvictionREST)."""
        return replace(storage, subresources={**storage.subresources, "binding": {"create": self.bind},
                                              "eviction": {"create": self.evict}})

    def _service_storage(self, storage: KindStorage) -> KindStorage:
        """A Service's Store claims its ClusterIP (kube's Service REST storage with its allocators)."""
        store = self.h.store
        allocators = ServiceAllocators(ClusterIPAllocator(store, self.service_cluster_ip_range))
        return replace(storage, store=Store(store, self.h.generic.manage_fields, allocators.begin_create,
                                            allocators.begin_update, allocators.after_delete))

    def _service_account_storage(self, storage: KindStorage) -> KindStorage:
        """serviceaccounts/token (kube's TokenREST)."""
        return replace(storage, subresources={**storage.subresources, "token": {"create": self.token_request}})

    def _review_storage(self, storage: KindStorage) -> KindStorage:
        """A review is created only, and answered, never stored."""
        return replace(storage, verbs={"create": self.review})

    # pods/binding and pods/eviction (kube's BindingREST and EvictionREST) ---------------------------

    async def _decode_named(self, r: Request, strategy: Strategy) -> Obj:
        obj = await self.h.decoder.decode(r.as_body_kind(strategy), r.req.body)
        body_name = obj["metadata"].get("name") or ""
        if body_name != r.req.name:
            raise BadRequest("name in URL does not match name in Binding object" if strategy is BINDING
                             else f"name in URL does not match name in {strategy.info.kind} object")
        causes = strategy.validate(obj)
        if causes:
            raise errors.invalid(strategy.info.kind, strategy.info.group, body_name, causes)
        return obj

    async def bind(self, r: Request) -> Response:
        """Assign the pod to binding.target (a node): 409 when it is being deleted or already assigned."""
        binding = await self._decode_named(r, BINDING)
        node = binding["target"]["name"]

        def transform(current: Obj) -> Obj:
            meta, spec = current["metadata"], current.setdefault("spec", {})
            if meta.get("deletionTimestamp"):
                raise errors.conflict("pods/binding", "", r.req.name,
                                      f"pod {r.req.name} is being deleted, cannot be assigned to a host")
            if spec.get("nodeName"):
                raise errors.conflict("pods/binding", "", r.req.name,
                                      f'pod {r.req.name} is already assigned to node "{spec["nodeName"]}"')
            spec["nodeName"] = node
            annotations = (binding["metadata"].get("annotations") or {})
            if annotations:
                meta["annotations"] = {**(meta.get("annotations") or {}), **annotations}
            status = current.setdefault("status", {})
            conds = [c for c in status.get("conditions") or [] if c.get("type") != "PodScheduled"]
            status["conditions"] = conds + [{"type": "PodScheduled", "status": "True",
                                             "lastProbeTime": None, "lastTransitionTime": now_rfc3339()}]
            return current

        await self.h.update_object(r, transform)
        return Response(201, orjson.dumps(SUCCESS_CREATED))

    async def evict(self, r: Request) -> Response:
        """kube's EvictionREST.Create: delete the pod unless its PodDisruptionBudget forbids it (eviction.py)."""
        eviction = await self._decode_named(r, EVICTION)
        opts = dict(eviction.get("deleteOptions") or {})
        if r.dry_run:
            opts["dryRun"] = ["All"]
        admission = self.h.admission_for("DELETE", {**opts, "kind": "DeleteOptions", "apiVersion": "meta.k8s.io/v1"})
        pinned = bool((opts.get("preconditions") or {}).get("resourceVersion"))

        async def delete(options: Obj) -> Response:
            await self.h.rest(r).delete(r, r.req.name, options, admission.admit, self.h.validation(admission))
            return Response(201, orjson.dumps(SUCCESS_CREATED))

        def at_version(pod: Obj) -> Obj:
            pre = {**(opts.get("preconditions") or {}), "resourceVersion": pod["metadata"].get("resourceVersion")}
            return {**opts, "preconditions": pre}

        for attempt in range(EVICTION_ATTEMPTS):
            pod = envelope.from_envelope(await self.h.rest(r).get(r, r.req.name))
            if not eviction_rules.can_ignore_budget(pod):
                break
            try:
                return await delete(at_version(pod) if eviction_rules.should_enforce_resource_version(pod)
                                    and not pinned else opts)
            except errors.Conflict:
                if pinned or attempt == EVICTION_ATTEMPTS - 1:
                    raise
        budgets = eviction_rules.matching_budgets(pod, await self._budgets(r))
        if len(budgets) > 1:
            raise eviction_rules.more_than_one()
        if not budgets:
            return await delete(opts)
        pdb = budgets[0]
        if eviction_rules.unhealthy_may_go(pod, pdb):
            try:
                return await delete(opts if pinned else at_version(pod))
            except errors.Conflict:
                if pinned:
                    raise
                raise eviction_rules.still_processing(pdb["metadata"]["name"]) from None
        if r.dry_run:
            eviction_rules.check_and_decrement(pdb, r.req.name)
        else:
            pdb_r = self.h.request(rpb.APIRequest(
                verb="update", group="policy", version="v1", resource="poddisruptionbudgets", subresource="status",
                namespace=r.namespace, name=pdb["metadata"]["name"], user=APISERVER), "update")
            def decrement(current: Obj) -> Obj:
                # unpinned (no resourceVersion): a conflict with another eviction re-reads and checks again,
                # as kube's RetryOnConflict does
                pdb = eviction_rules.check_and_decrement(current, r.req.name)
                pdb["metadata"].pop("resourceVersion", None)
                return pdb

            await self.h.update_object(pdb_r, decrement)
        return await delete(opts)

    async def _budgets(self, r: Request) -> list[Obj]:
        """The PodDisruptionBudgets of the request's namespace (kube lists them through its loopback client)."""
        info = self.h.catalogue.lookup("policy", "v1", "poddisruptionbudgets")
        if info is None:
            return []
        resp = await self.h.store.list(info, spb.ListRequest(prefix=info.collection_prefix(r.namespace)), r.timing)
        return [envelope.from_envelope(e) for e in resp.items]

    # Reviews and TokenRequest (decoded here, answered by reviews.Reviews) --------------------

    async def review(self, r: Request) -> Response:
        if r.info.namespaced and not r.namespace:
            # LocalSubjectAccessReview is only served under /namespaces/<ns>/.
            raise errors.NotFound(NOT_FOUND_MESSAGE)
        obj = await self.h.decoder.decode(r, r.req.body)
        return Response(201, await self.reviews.review(r, obj))

    async def token_request(self, r: Request) -> Response:
        obj = await self.h.decoder.decode(r.as_body_kind(TOKEN_REQUEST_STRATEGY), r.req.body)
        return Response(201, await self.reviews.token_request(r, obj))
