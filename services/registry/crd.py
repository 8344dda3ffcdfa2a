"""CustomResourceDefinitions at run time: what apiextensions-apiserver's controllers do, in every registry replica.

Each replica watches CRDs through its own list+watch (the handlers it serves, no network hop) and, for every
CRD whose names are accepted, adds the definitions of its served versions to its Catalogue (so discovery,
OpenAPI, storage keys, printing and the generic Store serve them) and registers their schemas
(services.apis.schemas, for OpenAPI, field validation and the field manager). The status controllers run in
every replica too, idempotently: they compute the status from the informer's view (names accepted unless
another CRD of the group holds them, then Established) and write it only when it differs, retrying on
conflict, so any replica may write it and the others then find nothing to do. The same goes for the local
APIService of each served group-version (kube's crdregistration controller) and for the deletion of a
CRD's objects before the CRD goes (the customresourcecleanup finalizer).
"""
from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from typing import Any

import orjson

from apiary_pb import registry_pb2 as rpb
from services.apis import schemas
from services.apis.apiextensions import (
    CRD_GROUP_PRIORITY,
    CRD_VERSION_PRIORITY,
    custom_resources,
    published_schema,
)
from services.apis.install import GROUP_VERSIONS as BUILT_IN
from services.apis.strategies import apiapproval
from services.apis.strategies.apiextensions import CLEANUP_FINALIZER, condition_true
from services.apiserver.registry.rest import now_rfc3339
from services.apiserver.resource import GroupVersion, ResourceInfo
from services.apiserver.webhook.client import WebhookClient
from services.apiserver.webhook.converter import WebhookConverter
from services.common import errors, identity
from services.common.informer import Informer
from services.common.serviceresolver import ServiceResolver

from . import watch
from services.apiserver.endpoints.handlers import Handlers

log = logging.getLogger(__name__)

Obj = dict[str, Any]
GROUP, VERSION, RESOURCE = "apiextensions.k8s.io", "v1", "customresourcedefinitions"
AUTOMANAGED_LABEL = "kube-aggregator.kubernetes.io/automanaged"


class LocalListWatch:
    """List and watch one resource through this registry's own handlers, as the API server itself."""

    def __init__(self, handlers: Handlers, group: str, version: str, resource: str) -> None:
        self.handlers, self.gvr = handlers, (group, version, resource)

    def _request(self, verb: str, query: dict[str, str]) -> rpb.APIRequest:
        g, v, r = self.gvr
        return rpb.APIRequest(verb=verb, group=g, version=v, resource=r, query=query, user=identity.APISERVER)

    async def list(self) -> tuple[list[Obj], str]:
        resp, _ = await self.handlers.handle(self._request("list", {}))
        body = orjson.loads(resp.body)
        return body.get("items") or [], body.get("metadata", {}).get("resourceVersion", "")

    async def watch(self, resource_version: str) -> AsyncIterator[tuple[str, Obj]]:
        req = self._request("watch", {"resourceVersion": resource_version, "allowWatchBookmarks": "true"})
        async for frame in watch.frames(self.handlers, req):
            ev = orjson.loads(frame)
            if ev["type"] == "ERROR":
                obj = ev["object"]
                raise errors.Gone(obj.get("message", "gone")) if obj.get("code") == 410 else \
                    errors.APIError.from_status_dict(obj)
            yield ev["type"], ev["object"]


def _condition(kind: str, status: str, reason: str, message: str, old: list[Obj]) -> Obj:
    """A condition, keeping its lastTransitionTime while its status stays."""
    prev = next((c for c in old if c.get("type") == kind), None)
    since = prev.get("lastTransitionTime") if prev is not None and prev.get("status") == status else None
    return {"type": kind, "status": status, "lastTransitionTime": since or now_rfc3339(), "reason": reason,
            "message": message}


def _names_of(crd: Obj) -> Obj:
    return (crd.get("status") or {}).get("acceptedNames") or {}


class CRDController:
    """The naming, establishing, registration and finalizer controllers of CustomResourceDefinitions, and the
    installer of their resources into this replica's Catalogue."""

    def __init__(self, handlers: Handlers) -> None:
        self.handlers = handlers
        self.catalogue = handlers.catalogue
        self.informer = Informer.over(LocalListWatch(handlers, GROUP, VERSION, RESOURCE), GROUP, VERSION, RESOURCE)
        self.informer.add_handler(self._on_event)
        # Conversion webhooks named by a Service reach one of its endpoints (as admission webhooks do), from
        # Services, Endpoints and EndpointSlices this replica lists and watches through its own handlers.
        self.service_informers = [Informer.over(LocalListWatch(handlers, g, "v1", r), g, "v1", r)
                                  for g, r in (("", "services"), ("", "endpoints"),
                                               ("discovery.k8s.io", "endpointslices"))]
        self.webhooks = WebhookClient(ServiceResolver(*self.service_informers))
        self._queue: asyncio.Queue[str] = asyncio.Queue()
        self._queued: set[str] = set()
        # per CRD name: what is installed (its signature) and the definitions it added
        self._installed: dict[str, tuple[Any, list[GroupVersion]]] = {}

    # Lifecycle ------------------------------------------------------------------------------

    async def run(self) -> None:
        self.informer.start()
        for informer in self.service_informers:
            informer.start()
        try:
            while True:
                name = await self._queue.get()
                self._queued.discard(name)
                try:
                    await self.sync(name)
                except errors.Conflict:
                    # another replica wrote first: the informer brings the newer object, tried again with it
                    await asyncio.sleep(0.05)
                    self._enqueue(name)
                except errors.APIError as e:
                    log.info("crd %s: %s; retrying", name, e.message)
                    await asyncio.sleep(0.2)
                    self._enqueue(name)
                except Exception:  # one bad CRD must not stop the others
                    log.exception("crd %s: sync failed", name)
        finally:
            await asyncio.gather(self.informer.stop(), *(i.stop() for i in self.service_informers))
            await self.webhooks.aclose()

    def _on_event(self, kind: str, obj: Obj, old: Obj | None) -> None:
        self._enqueue((obj.get("metadata") or {}).get("name") or "")
        # a CRD that goes or changes its names may free names another one of its group waits for
        group = (obj.get("spec") or {}).get("group")
        for key, other in self.informer.store.items():
            if key != obj["metadata"].get("name") and (other.get("spec") or {}).get("group") == group and \
                    not condition_true(other, "NamesAccepted"):
                self._enqueue(key)

    def _enqueue(self, name: str) -> None:
        if name and name not in self._queued:
            self._queued.add(name)
            self._queue.put_nowait(name)

    # One CRD --------------------------------------------------------------------------------

    async def sync(self, name: str) -> None:
        crd = self.informer.store.get(name)
        if crd is None:
            self._uninstall(name)
            await self._sync_apiservices()
            return
        meta = crd.get("metadata") or {}
        if meta.get("deletionTimestamp"):
            if CLEANUP_FINALIZER in (meta.get("finalizers") or []):
                await self._clean_up(crd)
            return
        status = self._status(crd)
        if condition_true({"status": status}, "NamesAccepted"):
            self._install(name, {**crd, "status": status})
            await self._sync_apiservices()
        if status != crd.get("status"):
            await self._write_status(crd, status)

    def _status(self, crd: Obj) -> Obj:
        """kube's naming and establishing controllers: the names this CRD may have, and its conditions."""
        spec = crd.get("spec") or {}
        names = spec.get("names") or {}
        old = crd.get("status") or {}
        old_conditions = old.get("conditions") or []
        accepted = dict(_names_of(crd))
        taken = self._names_in_use(crd)
        # checked in kube's order; the last conflict names the condition's reason, as kube's overwrite does
        failure: tuple[str, str] | None = None
        for key, reason in (("plural", "PluralConflict"), ("singular", "SingularConflict"),
                            ("shortNames", "ShortNamesConflict"), ("kind", "KindConflict"),
                            ("listKind", "ListKindConflict")):
            if key == "shortNames":
                shorts = names.get("shortNames") or []
                clash = sorted((set(shorts) - set(accepted.get("shortNames") or [])) & taken["shortNames"])
                if clash:
                    failure = (reason, f'"{clash[0]}" is already in use')
                else:
                    accepted["shortNames"] = shorts
                continue
            wanted = names.get(key) or ""
            if wanted and wanted != accepted.get(key) and wanted in taken[key]:
                failure = (reason, f'"{wanted}" is already in use')
            elif wanted:
                accepted[key] = wanted
        if names.get("categories"):
            accepted["categories"] = names["categories"]
        else:
            accepted.pop("categories", None)
        if not accepted.get("shortNames"):
            accepted.pop("shortNames", None)
        conditions = [c for c in old_conditions
                      if c.get("type") not in ("NamesAccepted", "Established", apiapproval.CONDITION)]
        approval = apiapproval.condition(crd)  # kube's apiapproval controller, in the same step
        if approval is not None:
            conditions.append(_condition(apiapproval.CONDITION, *approval, old_conditions))
        if failure is None:
            named = _condition("NamesAccepted", "True", "NoConflicts", "no conflicts found", old_conditions)
            established = _condition("Established", "True", "InitialNamesAccepted",
                                     "the initial names have been accepted", old_conditions)
        else:
            named = _condition("NamesAccepted", "False", failure[0], failure[1], old_conditions)
            established = next((c for c in old_conditions if c.get("type") == "Established"), None) or \
                _condition("Established", "False", "NotAccepted", "not all names are accepted", old_conditions)
        return {**old, "conditions": [named, established] + conditions, "acceptedNames": accepted}

    def _names_in_use(self, crd: Obj) -> dict[str, set[str]]:
        """The names other CRDs of the same group accepted (and the group's built-in resources)."""
        group = (crd.get("spec") or {}).get("group")
        taken: dict[str, set[str]] = {"plural": set(), "singular": set(), "kind": set(), "listKind": set(),
                                      "shortNames": set()}
        for key, other in self.informer.store.items():
            if key == crd["metadata"].get("name") or (other.get("spec") or {}).get("group") != group:
                continue
            names = _names_of(other)
            for k in ("plural", "singular", "kind", "listKind"):
                if names.get(k):
                    taken[k].add(names[k])
            taken["shortNames"].update(names.get("shortNames") or ())
        for r in self.catalogue.resources:
            if r.group == group and r.key_prefix and not self._owned(r):
                taken["plural"].add(r.plural)
                taken["kind"].add(r.kind)
        return taken

    def _owned(self, info: ResourceInfo) -> bool:
        return any(info in gv.resources for _, gvs in self._installed.values() for gv in gvs)

    # The Catalogue --------------------------------------------------------------------------

    def _install(self, name: str, crd: Obj) -> None:
        """Serve the CRD's versions (again, when its spec or names changed since)."""
        signature = (crd["metadata"].get("generation"), orjson.dumps(_names_of(crd), option=orjson.OPT_SORT_KEYS))
        current = self._installed.get(name)
        if current is not None and current[0] == signature:
            return
        conversion = (crd.get("spec") or {}).get("conversion") or {}
        # the webhook's client config and review version read once per CRD change, not per request
        converter = WebhookConverter(self.webhooks, crd) if conversion.get("strategy") == "Webhook" else None
        group_versions = custom_resources(crd, converter)
        self._uninstall(name)
        for gv in group_versions:
            for info in gv.resources:
                schemas.register_custom(info.group, info.version, info.kind, published_schema(crd, info.version))
        self.catalogue.add(*group_versions)
        self._installed[name] = (signature, group_versions)
        log.info("serving %s in %s", name, ", ".join(f"{gv.group}/{gv.version}" for gv in group_versions))

    def _uninstall(self, name: str) -> None:
        current = self._installed.pop(name, None)
        if current is None:
            return
        infos = [info for gv in current[1] for info in gv.resources]
        for info in infos:
            schemas.unregister_custom(info.group, info.version, info.kind)
        self.catalogue.remove(*infos)
        log.info("no longer serving %s", name)

    def served_group_versions(self) -> set[tuple[str, str]]:
        return {(gv.group, gv.version) for _, gvs in self._installed.values() for gv in gvs}

    # Writes ---------------------------------------------------------------------------------

    def _request(self, verb: str, group: str, version: str, resource: str, name: str = "", body: Obj | None = None,
                 subresource: str = "", namespace: str = "") -> rpb.APIRequest:
        return rpb.APIRequest(verb=verb, group=group, version=version, resource=resource, name=name,
                              namespace=namespace, subresource=subresource, user=identity.APISERVER,
                              body=orjson.dumps(body) if body is not None else b"", content_type="application/json")

    async def _write_status(self, crd: Obj, status: Obj) -> Obj:
        body = {**crd, "status": status}
        resp, _ = await self.handlers.handle(self._request("update", GROUP, VERSION, RESOURCE, crd["metadata"]["name"],
                                                           body, "status"))
        # kube's mutation cache: the next CRD of the group sees these names taken before the watch brings them
        written: Obj = orjson.loads(resp.body)
        self.informer.store[crd["metadata"]["name"]] = written
        return written

    async def _clean_up(self, crd: Obj) -> None:
        """kube's finalizer controller: every object of the CRD goes, then the finalizer (and with it the CRD)."""
        name = crd["metadata"]["name"]
        if name not in self._installed and condition_true(crd, "NamesAccepted"):
            self._install(name, crd)  # (a replica started after the deletion began still finds the objects)
        if not condition_true(crd, "Terminating"):
            status = crd.get("status") or {}
            conditions = [c for c in status.get("conditions") or [] if c.get("type") != "Terminating"]
            conditions.append(_condition("Terminating", "True", "InstanceDeletionInProgress",
                                         "CustomResource deletion is in progress", []))
            crd = await self._write_status(crd, {**status, "conditions": conditions})
        installed = self._installed.get(name)
        for gv in installed[1] if installed else []:
            for info in gv.resources:
                info.strategy.terminating = True  # type: ignore[union-attr]  # kube's crdHandler refuses creates
        for gv in (installed[1] if installed else [])[:1]:
            info = gv.resources[0]
            resp, _ = await self.handlers.handle(self._request("list", info.group, info.version, info.plural))
            for item in orjson.loads(resp.body).get("items") or []:
                meta = item.get("metadata") or {}
                try:
                    await self.handlers.handle(self._request("delete", info.group, info.version, info.plural,
                                                             meta.get("name") or "",
                                                             namespace=meta.get("namespace") or ""))
                except errors.NotFound:
                    pass
            resp, _ = await self.handlers.handle(self._request("list", info.group, info.version, info.plural))
            if orjson.loads(resp.body).get("items"):
                raise errors.Conflict(f"{name}: objects are still being deleted")  # retried
        self._uninstall(name)
        meta = crd["metadata"]
        body = {**crd, "metadata": {**meta, "finalizers": [f for f in meta.get("finalizers") or []
                                                           if f != CLEANUP_FINALIZER]}}
        await self.handlers.handle(self._request("update", GROUP, VERSION, RESOURCE, name, body))
        await self._sync_apiservices()

    async def _sync_apiservices(self) -> None:
        """kube's crdregistration controller: a Local APIService for every group-version a CRD serves, and none
        left for a group-version no CRD serves any more (those built in stay)."""
        wanted = self.served_group_versions()
        built_in = {(gv.group, gv.version) for gv in BUILT_IN}
        resp, _ = await self.handlers.handle(self._request("list", "apiregistration.k8s.io", "v1", "apiservices"))
        existing = {(o["spec"].get("group") or "", o["spec"].get("version") or ""): o
                    for o in orjson.loads(resp.body).get("items") or [] if not o["spec"].get("service")}
        for group, version in sorted(wanted - set(existing)):
            body = {"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
                    "metadata": {"name": f"{version}.{group}", "labels": {AUTOMANAGED_LABEL: "true"}},
                    "spec": {"group": group, "version": version, "groupPriorityMinimum": CRD_GROUP_PRIORITY,
                             "versionPriority": CRD_VERSION_PRIORITY}}
            try:
                await self.handlers.handle(self._request("create", "apiregistration.k8s.io", "v1", "apiservices",
                                                         body=body))
            except errors.AlreadyExists:
                pass
        for (group, version), obj in existing.items():
            labels = obj["metadata"].get("labels") or {}
            if (group, version) not in wanted and (group, version) not in built_in and \
                    labels.get(AUTOMANAGED_LABEL) == "true" and not self._crd_serves(group, version):
                try:
                    await self.handlers.handle(self._request("delete", "apiregistration.k8s.io", "v1", "apiservices",
                                                             obj["metadata"]["name"]))
                except errors.NotFound:
                    pass

    def _crd_serves(self, group: str, version: str) -> bool:
        """Whether a CRD in the informer (installed here or not yet) serves group/version."""
        for crd in self.informer.store.values():
            spec = crd.get("spec") or {}
            if spec.get("group") == group and not (crd.get("metadata") or {}).get("deletionTimestamp") and \
                    any(v.get("name") == version and v.get("served") for v in spec.get("versions") or []):
                return True
        return False
