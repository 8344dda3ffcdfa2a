"""coordination.k8s.io/v1: Lease (leader election of the controller-manager and of any client-go controller)."""
from __future__ import annotations

from typing import Any

from services.apiserver.printers import column, name_age
from services.apiserver.resource import GroupVersion, ResourceInfo

from .strategies.coordination import LeaseStrategy

Obj = dict[str, Any]
GROUP = "coordination.k8s.io"

# kube's printers: Name, Holder, Age
LEASE_TABLE = name_age(
    [column("Holder", "string", "The holder of the lease")],
    lambda o: [(o.get("spec") or {}).get("holderIdentity") or "<unset>"])

V1 = GroupVersion(GROUP, "v1", 16500, 15, (
    ResourceInfo(
        group=GROUP, version="v1", kind="Lease", plural="leases", singular="lease", namespaced=True,
        key_prefix="/registry/leases/", strategy=LeaseStrategy, table=LEASE_TABLE,
        protobuf="k8s.io.api.coordination.v1.Lease",
    ),
))

GROUP_VERSIONS = (V1,)
