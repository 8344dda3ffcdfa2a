"""apiregistration.k8s.io/v1: APIService (kube-aggregator's registration of each group-version)."""
from __future__ import annotations

from typing import Any

from services.apiserver.printers import column, name_age
from services.apiserver.resource import STATUS_VERBS, GroupVersion, ResourceInfo, SubresourceInfo

from .strategies.apiregistration import APIServiceStrategy

Obj = dict[str, Any]
GROUP = "apiregistration.k8s.io"


def _service(obj: Obj) -> str:
    svc = (obj.get("spec") or {}).get("service")
    return f"{svc.get('namespace', '')}/{svc.get('name', '')}" if svc else "Local"


def _available(obj: Obj) -> str:
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c.get("type") == "Available":
            status = c.get("status") or ""
            return status if status == "True" else f"{status} ({c.get('reason', '')})"
    return "Unknown"


V1 = GroupVersion(GROUP, "v1", 17400, 15, (
    ResourceInfo(
        group=GROUP, version="v1", kind="APIService", plural="apiservices", singular="apiservice",
        namespaced=False, key_prefix="/registry/apiregistration.k8s.io/apiservices/",
        categories=("api-extensions",),
        subresources=(SubresourceInfo("status", "APIService", STATUS_VERBS),),
        strategy=APIServiceStrategy, protobuf="k8s.io.kube_aggregator.pkg.apis.apiregistration.v1.APIService",
        table=name_age(
            [column("Service", "string", "The reference to the service that hosts this API endpoint."),
             column("Available", "string", "Whether this service is available.")],
            lambda o: [_service(o), _available(o)]),
    ),
))

GROUP_VERSIONS = (V1,)
