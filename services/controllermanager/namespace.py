"""The namespace controller (kube's pkg/controller/namespace): a namespace being deleted is emptied of
every namespaced resource discovery finds (deletecollection where the resource has it, else one delete
per object, all with propagationPolicy=Background), its status conditions say what is left and why, and
once nothing is left the `kubernetes` finalizer is taken out through /finalize; the API server deletes the
namespace when its last finalizer goes."""
from __future__ import annotations

import datetime
import logging
from typing import Any

from services.common.errors import APIError, Conflict, NotFound

from .client import Client, Resource
from .workqueue import WorkQueue

log = logging.getLogger(__name__)

Obj = dict[str, Any]
FINALIZER = "kubernetes"
NAMESPACES = Resource("", "v1", "namespaces", "Namespace", False, frozenset())
# How soon a namespace whose content is still going is looked at again (kube estimates; a few seconds).
RECHECK_SECONDS = 2.0

DISCOVERY_FAILURE = "NamespaceDeletionDiscoveryFailure"
PARSING_FAILURE = "NamespaceDeletionGroupVersionParsingFailure"
CONTENT_FAILURE = "NamespaceDeletionContentFailure"
CONTENT_REMAINING = "NamespaceContentRemaining"
FINALIZERS_REMAINING = "NamespaceFinalizersRemaining"
CONDITION_TYPES = (DISCOVERY_FAILURE, PARSING_FAILURE, CONTENT_FAILURE, CONTENT_REMAINING, FINALIZERS_REMAINING)
# kube's okay messages for each condition, when it is False
OK = {
    DISCOVERY_FAILURE: ("ResourcesDiscovered", "All resources successfully discovered"),
    PARSING_FAILURE: ("ParsedGroupVersions", "All legacy kube types successfully parsed"),
    CONTENT_FAILURE: ("ContentDeleted", "All content successfully deleted, may be waiting on finalization"),
    CONTENT_REMAINING: ("ContentRemoved", "All content successfully removed"),
    FINALIZERS_REMAINING: ("ContentHasNoFinalizers", "All content-preserving finalizers finished"),
}


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def conditions(failed: dict[str, tuple[str, str]], old: list[Obj]) -> list[Obj]:
    """Every deletion condition: True with the failure's reason and message, else False with kube's okay
    reason; lastTransitionTime kept while a condition does not change."""
    previous = {c.get("type"): c for c in old}
    out = []
    for typ in CONDITION_TYPES:
        status, (reason, message) = ("True", failed[typ]) if typ in failed else ("False", OK[typ])
        prev = previous.get(typ)
        when = prev.get("lastTransitionTime") if prev and prev.get("status") == status else _now()
        out.append({"type": typ, "status": status, "lastTransitionTime": when, "reason": reason, "message": message})
    return out


def remaining_messages(counts: dict[str, int], finalizers: dict[str, int]) -> dict[str, tuple[str, str]]:
    """The NamespaceContentRemaining / NamespaceFinalizersRemaining failures, in kube's words."""
    failed: dict[str, tuple[str, str]] = {}
    if counts:
        failed[CONTENT_REMAINING] = ("SomeResourcesRemain", "Some resources are remaining: " + ", ".join(
            f"{r} has {n} resource instances" for r, n in sorted(counts.items())))
    if finalizers:
        failed[FINALIZERS_REMAINING] = ("SomeFinalizersRemain", "Some content in the namespace has finalizers "
                                        "remaining: " + ", ".join(f"{f} in {n} resource instances"
                                                                  for f, n in sorted(finalizers.items())))
    return failed


class NamespaceController:
    def __init__(self, client: Client, workers: int = 2) -> None:
        self.client = client
        self.informer = client.informer(NAMESPACES)
        self.informer.add_handler(self._on_event)
        self.queue = WorkQueue("namespace", self._sync, workers)

    async def start(self) -> None:
        self.informer.start()
        await self.informer.synced.wait()
        self.queue.start()

    async def stop(self) -> None:
        await self.queue.stop()
        await self.informer.stop()

    def _on_event(self, typ: str, obj: Obj, _old: Obj | None) -> None:
        meta = obj.get("metadata") or {}
        if typ != "DELETED" and meta.get("deletionTimestamp"):
            self.queue.add(meta["name"])

    async def _sync(self, name: str) -> None:
        try:
            ns = await self.client.get(NAMESPACES, "", name)
        except NotFound:
            return
        if not (ns.get("metadata") or {}).get("deletionTimestamp"):
            return
        if FINALIZER not in ((ns.get("spec") or {}).get("finalizers") or []):
            return
        failed = await self._delete_all_content(name)
        ns = await self._set_conditions(name, failed)
        if failed:
            self.queue.add_after(name, RECHECK_SECONDS)
            return
        if ns is not None:
            await self._finalize(ns)

    async def _delete_all_content(self, namespace: str) -> dict[str, tuple[str, str]]:
        failed: dict[str, tuple[str, str]] = {}
        try:
            resources = await self.client.discover()
        except Exception as e:  # noqa: BLE001 - the condition says so, and it is tried again
            failed[DISCOVERY_FAILURE] = ("DiscoveryFailed", f"Discovery failed for some groups: {e}")
            return failed
        counts: dict[str, int] = {}
        finalizers: dict[str, int] = {}
        errors: list[str] = []
        for res in resources:
            if not res.namespaced or not {"list", "delete"} <= res.verbs:
                continue
            try:
                await self._delete_collection(res, namespace)
                items = (await self.client.request("GET", res.path(namespace))).get("items") or []
            except APIError as e:
                if e.code in (404, 405):
                    continue
                errors.append(f"{res.resource}.{res.group}: {e.message}" if res.group else
                              f"{res.resource}: {e.message}")
                continue
            if items:
                key = f"{res.resource}.{res.group}" if res.group else f"{res.resource}."
                counts[key] = len(items)
                for item in items:
                    for f in (item.get("metadata") or {}).get("finalizers") or []:
                        finalizers[f] = finalizers.get(f, 0) + 1
        if errors:
            failed[CONTENT_FAILURE] = ("ContentDeletionFailed",
                                       "Failed to delete all resource types, " + "; ".join(errors))
        failed.update(remaining_messages(counts, finalizers))
        return failed

    async def _delete_collection(self, res: Resource, namespace: str) -> None:
        opts = {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Background"}
        if "deletecollection" in res.verbs:
            await self.client.request("DELETE", res.path(namespace), opts)
            return
        for item in (await self.client.request("GET", res.path(namespace))).get("items") or []:
            try:
                await self.client.request("DELETE", res.path(namespace, item["metadata"]["name"]), opts)
            except NotFound:
                continue

    async def _set_conditions(self, name: str, failed: dict[str, tuple[str, str]]) -> Obj | None:
        for _ in range(5):
            try:
                ns = await self.client.get(NAMESPACES, "", name)
            except NotFound:
                return None
            status = ns.setdefault("status", {})
            new = conditions(failed, status.get("conditions") or [])
            if new == status.get("conditions"):
                return ns
            status["conditions"] = new
            try:
                return await self.client.update(NAMESPACES, ns, "status")
            except Conflict:
                continue
        return None

    async def _finalize(self, ns: Obj) -> None:
        name = ns["metadata"]["name"]
        for _ in range(5):
            spec = ns.setdefault("spec", {})
            spec["finalizers"] = [f for f in spec.get("finalizers") or [] if f != FINALIZER]
            try:
                await self.client.update(NAMESPACES, ns, "finalize")
                log.info("namespace %s: content removed, finalized", name)
                return
            except NotFound:
                return
            except Conflict:
                try:
                    ns = await self.client.get(NAMESPACES, "", name)
                except NotFound:
                    return
