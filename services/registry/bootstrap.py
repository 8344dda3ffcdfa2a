"""What kube-apiserver creates at start: the system namespaces, the system PriorityClasses, the default
ServiceCIDR `kubernetes` (its --service-cluster-ip-range, Ready), one local APIService per group-version, and API
Priority and Fairness' bootstrap objects (its
priority-and-fairness-config-producer post-start hook: created when missing, never changed here; the
controller-manager's priority-and-fairness-config controller keeps them after that)."""
from __future__ import annotations

import copy
import logging
from typing import Any

from apiary_pb import registry_pb2 as rpb
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


async def _ensure(handlers: Handlers[StorageClient], group: str, version: str, resource: str,
                  obj: dict[str, Any]) -> None:
    req = rpb.APIRequest(verb="create", group=group, version=version, resource=resource, user=identity.APISERVER)
    r: Request = handlers.request(req, "create")
    # Created on the server's own behalf, as kube's bootstrap controllers do before admission is up.
    r.admit = False
    try:
        await handlers.create_object(r, handlers.decoder.check_object(r, obj))
        log.info("created %s %s", resource, obj["metadata"]["name"])
    except errors.AlreadyExists:
        pass


async def default_service_cidr(handlers: Handlers[StorageClient], cidr: str) -> None:
    """kube's default-servicecidr controller: the ServiceCIDR `kubernetes` of the flag's range, created when missing
    and set Ready when it has no Ready condition and names the same range (one that differs is left as it is)."""
    group = "networking.k8s.io"
    await _ensure(handlers, group, "v1", "servicecidrs", {
        "apiVersion": f"{group}/v1", "kind": "ServiceCIDR", "metadata": {"name": DEFAULT_SERVICE_CIDR_NAME},
        "spec": {"cidrs": [cidr]}})
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
    for ns in SYSTEM_NAMESPACES:
        await _ensure(handlers, "", "v1", "namespaces",
                      {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    # the scheduling REST storage's post-start hook: system-node-critical and system-cluster-critical
    for pc in SYSTEM_PRIORITY_CLASSES:
        await _ensure(handlers, "scheduling.k8s.io", "v1", "priorityclasses", copy.deepcopy(pc))
    await default_service_cidr(handlers, service_cidr)
    for group, version in catalogue.group_versions():
        await _ensure(handlers, "apiregistration.k8s.io", "v1", "apiservices",
                      local_apiservice(catalogue, group, version))
    # so that a ready server classifies by the whole bootstrap configuration, not catch-all alone; the
    # levels before the schemas, which then never dangle
    levels = apf.MANDATORY_PRIORITY_LEVELS + apf.SUGGESTED_PRIORITY_LEVELS
    schemas = apf.MANDATORY_FLOW_SCHEMAS + apf.SUGGESTED_FLOW_SCHEMAS
    for resource, objects in (("prioritylevelconfigurations", levels), ("flowschemas", schemas)):
        for obj in objects:
            out = copy.deepcopy(obj)
            out["metadata"]["annotations"] = {apf.AUTOUPDATE_ANNOTATION: "true"}
            await _ensure(handlers, "flowcontrol.apiserver.k8s.io", "v1", resource, out)
