"""The pods' subresources served by REST objects of their own (kube's pkg/registry/core/pod/storage):
pods/binding (BindingREST) and pods/eviction (EvictionREST, its rules in eviction.py), registered for the
pods by services/registry/rest.py."""
from __future__ import annotations

from abc import ABC, abstractmethod

import orjson

from apiary_pb import registry_pb2 as rpb
from apiary_pb import storage_pb2 as spb
from services.apis.strategies.pods import BINDING, EVICTION
from services.apiserver.endpoints.handlers import Handlers
from services.apiserver.endpoints.request import Request, Response
from services.apiserver.registry.rest import Strategy, now_rfc3339
from services.apiserver.registry.scope import Obj
from services.common import envelope, errors
from services.common.errors import BadRequest
from services.common.identity import APISERVER

from . import eviction as eviction_rules
from .storage_client import StorageClient

# An eviction's tries when a Pending pod changes under it (kube's EvictionsRetry allows 20).
EVICTION_ATTEMPTS = 20

# What kube's BindingREST and EvictionREST answer: a Status, 201.
SUCCESS_CREATED = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}


async def decode_named(h: Handlers[StorageClient], r: Request, strategy: Strategy) -> Obj:
    """The request's body as strategy's kind, named as the pod in the URL, and valid."""
    obj = await h.decoder.decode(r.as_body_kind(strategy), r.req.body)
    body_name = obj["metadata"].get("name") or ""
    if body_name != r.req.name:
        raise BadRequest("name in URL does not match name in Binding object" if strategy is BINDING
                         else f"name in URL does not match name in {strategy.info.kind} object")
    causes = strategy.validate(obj)
    if causes:
        raise errors.invalid(strategy.info.kind, strategy.info.group, body_name, causes)
    return obj


class PodSubresource(ABC):
    """A pod's subresource that is created only (kube's rest.Creater), over the pods' handlers."""

    def __init__(self, handlers: Handlers[StorageClient]) -> None:
        self.h = handlers
        self.verbs = {"create": self.create}

    @abstractmethod
    async def create(self, r: Request) -> Response: ...


class BindingREST(PodSubresource):
    async def create(self, r: Request) -> Response:
        """Assign the pod to binding.target (a node): 409 when it is being deleted or already assigned."""
        binding = await decode_named(self.h, r, BINDING)
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


class EvictionREST(PodSubresource):
    async def create(self, r: Request) -> Response:
        """kube's EvictionREST.Create: delete the pod unless its PodDisruptionBudget forbids it (eviction.py)."""
        eviction = await decode_named(self.h, r, EVICTION)
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
