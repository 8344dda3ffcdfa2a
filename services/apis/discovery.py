"""discovery.k8s.io/v1: EndpointSlice."""
from __future__ import annotations

from typing import Any

from services.apiserver.printers import AGE, NAME, TableConvertor, age, column, first_three
from services.apiserver.resource import GroupVersion, ResourceInfo

from .strategies.services import EndpointSliceStrategy

Obj = dict[str, Any]
GROUP = "discovery.k8s.io"


def endpointslice_row(o: Obj) -> list[Any]:
    ports = ",".join(str(p.get("port")) if p.get("port") is not None else "<unset>"
                     for p in o.get("ports") or []) or "<unset>"
    addresses = [a for ep in o.get("endpoints") or [] for a in ep.get("addresses") or []]
    return [(o.get("metadata") or {}).get("name", ""), o.get("addressType") or "", ports,
            "<unset>" if not addresses else first_three(addresses), age(o)]


ENDPOINTSLICE_TABLE = TableConvertor((
    NAME,
    column("AddressType", "string", "addressType specifies the type of address carried by this EndpointSlice."),
    column("Ports", "string", "ports specifies the list of network ports exposed by each endpoint in this slice."),
    column("Endpoints", "string", "endpoints is a list of unique endpoints in this slice."),
    AGE,
), endpointslice_row)

V1 = GroupVersion(GROUP, "v1", 16200, 15, (
    ResourceInfo(
        group=GROUP, version="v1", kind="EndpointSlice", plural="endpointslices", singular="endpointslice",
        namespaced=True, key_prefix="/registry/endpointslices/", strategy=EndpointSliceStrategy,
        table=ENDPOINTSLICE_TABLE,
    ),
))

GROUP_VERSIONS = (V1,)
