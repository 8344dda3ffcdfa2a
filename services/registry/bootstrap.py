"""What kube-apiserver creates at start: the system namespaces, the system PriorityClasses, the default
ServiceCIDR `kubernetes` (its --service-cluster-ip-range, Ready), one local APIService per group-version, and API
Priority and Fairness' bootstrap objects (its
priority-and-fairness-config-producer post-start hook: created when missing, never changed here; the
controller-manager's priority-and-fairness-config controller keeps them after that).

What exists is listed first (one LIST per resource, all at once) and only what is missing is created, as
kube's bootstrap controllers read their listers before they create: a restarted registry is ready after
six reads instead of some sixty refused creates, one after the other, on the path of its readiness."""
from __future__ import annotations

import asyncio
import copy
import logging
from collections.abc import Coroutine
from typing import Any

from apiary_pb import registry_pb2 as rpb
from apiary_pb import storage_pb2 as spb
from services.apis import flowcontrol_bootstrap as apf
from services.apis.strategies.scheduling import SYSTEM_PRIORITY_CLASSES
from services.apiserver.catalogue import Catalogue
from services.apiserver.endpoints.handlers import Handlers
from services.apiserver.endpoints.request import Request
from services.apiserver.registry.rest import now_rfc3339
from services.common import errors, identity

from .ipallocator import DEFAULT_SERVICE_CIDR
from .storage_client import StorageClient

log = logging.getLogger(__name__)

SYSTEM_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")
AUTOMANAGED_LABEL = "kube-aggregator.kubernetes.io/automanaged"
DEFAULT_SERVICE_CIDR_NAME = "kubernetes"
READY_MESSAGE = "Kubernetes default Service CIDR is ready"


def local_apiservice(catalogue: Catalogue, group: str, version: str) -> dict[str, Any]:
    gp, vp = catalogue.priorities().get((group, version), (1000, 15))
    return {
        "apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
        "metadata": {"name": f"{version}.{group}", "labels": {AUTOMANAGED_LABEL: "onstart"}},
        "spec": {"group": group, "version": version, "groupPriorityMinimum": gp, "versionPriority": vp},
    }


async def _existing(handlers: Handlers[StorageClient], group: str, version: str, resource: str) -> set[str]:
    """The names of the resource's objects now stored."""
    info = handlers.catalogue.lookup(group, version, resource)
    assert info is not None, resource
    listed = await handlers.store.list(info, spb.ListRequest(prefix=info.key_prefix))
    return {o.metadata.name for o in listed.items}


async def _all(*steps: Coroutine[Any, Any, Any]) -> None:
    """Every step at once; the first storage error is the bootstrap's (the others are cancelled), so that
    its caller retries the whole of it."""
    try:
        async with asyncio.TaskGroup() as group:
            for step in steps:
                group.create_task(step)
    except* errors.APIError as failed:
        raise failed.exceptions[0] from None


async def _ensure(handlers: Handlers[StorageClient], group: str, version: str, resource: str,
                  obj: dict[str, Any], existing: set[str] | None = None) -> None:
    """Creates obj unless its name is among existing (a LIST's), or stored meanwhile (AlreadyExists)."""
    if existing is not None and obj["metadata"]["name"] in existing:
        return
    req = rpb.APIRequest(verb="create", group=group, version=version, resource=resource, user=identity.APISERVER)
    r: Request = handlers.request(req, "create")
    # Created on the server's own behalf, as kube's bootstrap controllers do before admission is up.
    r.admit = False
    try:
        await handlers.create_object(r, handlers.decoder.check_object(r, obj))
        log.info("created %s %s", resource, obj["metadata"]["name"])
    except errors.AlreadyExists:
        pass


async def default_service_cidr(handlers: Handlers[StorageClient], cidr: str,
                               existing: set[str] | None = None) -> None:
    """kube's default-servicecidr controller: the ServiceCIDR `kubernetes` of the flag's range, created when missing
    and set Ready when it has no Ready condition and names the same range (one that differs is left as it is)."""
    group = "networking.k8s.io"
    await _ensure(handlers, group, "v1", "servicecidrs", {
        "apiVersion": f"{group}/v1", "kind": "ServiceCIDR", "metadata": {"name": DEFAULT_SERVICE_CIDR_NAME},
        "spec": {"cidrs": [cidr]}}, existing)
    req = rpb.APIRequest(verb="update", group=group, version="v1", resource="servicecidrs",
                         name=DEFAULT_SERVICE_CIDR_NAME, subresource="status", user=identity.APISERVER)
    r: Request = handlers.request(req, "update")
    r.admit = False

    def ready(current: dict[str, Any]) -> dict[str, Any]:
        conditions = (current.get("status") or {}).get("conditions") or []
        if (current.get("spec") or {}).get("cidrs") != [cidr] or \
                any(c.get("type") == "Ready" and c.get("status") != "Unknown" for c in conditions):
            return current
        out = copy.deepcopy(current)
        out["status"] = {"conditions": [c for c in conditions if c.get("type") != "Ready"] + [{
            "type": "Ready", "status": "True", "lastTransitionTime": now_rfc3339(), "reason": "",
            "message": READY_MESSAGE}]}
        return out
    await handlers.update_object(r, ready)


async def bootstrap(handlers: Handlers[StorageClient], catalogue: Catalogue,
                    service_cidr: str = DEFAULT_SERVICE_CIDR) -> None:
    fc = "flowcontrol.apiserver.k8s.io"
    resources = {"namespaces": ("", "v1"), "priorityclasses": ("scheduling.k8s.io", "v1"),
                 "servicecidrs": ("networking.k8s.io", "v1"), "apiservices": ("apiregistration.k8s.io", "v1"),
                 "prioritylevelconfigurations": (fc, "v1"),
                 "flowschemas": (fc, "v1")}
    names = list(resources)
    listed = await asyncio.gather(*(_existing(handlers, *resources[r], r) for r in names))
    existing = dict(zip(names, listed))

    def ensure(resource: str, obj: dict[str, Any]) -> Coroutine[Any, Any, None]:
        return _ensure(handlers, *resources[resource], resource, obj, existing[resource])

    async def flowcontrol() -> None:
        # so that a ready server classifies by the whole bootstrap configuration, not catch-all alone; the
        # levels before the schemas, which then never dangle
        levels = apf.MANDATORY_PRIORITY_LEVELS + apf.SUGGESTED_PRIORITY_LEVELS
        schemas = apf.MANDATORY_FLOW_SCHEMAS + apf.SUGGESTED_FLOW_SCHEMAS
        for resource, objects in (("prioritylevelconfigurations", levels), ("flowschemas", schemas)):
            steps = []
            for obj in objects:
                out = copy.deepcopy(obj)
                out["metadata"]["annotations"] = {apf.AUTOUPDATE_ANNOTATION: "true"}
                steps.append(ensure(resource, out))
            await _all(*steps)

    await _all(
        *(ensure("namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
          for ns in SYSTEM_NAMESPACES),
        # the scheduling REST storage's post-start hook: system-node-critical and system-cluster-critical
        *(ensure("priorityclasses", copy.deepcopy(pc)) for pc in SYSTEM_PRIORITY_CLASSES),
        default_service_cidr(handlers, service_cidr, existing["servicecidrs"]),
        *(ensure("apiservices", local_apiservice(catalogue, group, version))
          for group, version in catalogue.group_versions()),
        flowcontrol(),
    )
