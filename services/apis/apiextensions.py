"""apiextensions.k8s.io/v1: CustomResourceDefinition, and the resource definitions a CRD makes at run time
(custom_resources): one ResourceInfo per served version, all over one storage, that the registry adds to its
Catalogue once the CRD is established."""
from __future__ import annotations

from typing import Any

from services.apiserver.conversion import same_fields
from services.apiserver.printers import CREATED_AT_TABLE
from services.apiserver.resource import GroupVersion, ResourceInfo

from .kinds import status
from .strategies.apiextensions import CustomResourceDefinitionStrategy, custom_resource_strategy, storage_version

Obj = dict[str, Any]
GROUP = "apiextensions.k8s.io"

CRD = ResourceInfo(
    group=GROUP, version="v1", kind="CustomResourceDefinition", plural="customresourcedefinitions",
    singular="customresourcedefinition", namespaced=False,
    key_prefix="/registry/apiextensions.k8s.io/customresourcedefinitions/", short_names=("crd", "crds"),
    categories=("api-extensions",), subresources=(status("CustomResourceDefinition"),),
    strategy=CustomResourceDefinitionStrategy, table=CREATED_AT_TABLE,
)

# kube-aggregator's apiVersionPriorities for apiextensions.k8s.io/v1
V1 = GroupVersion(GROUP, "v1", 16700, 15, (CRD,))

GROUP_VERSIONS = (V1,)

# kube's crdregistration controller: the local APIService of a CRD's group-version
CRD_GROUP_PRIORITY = 1000
CRD_VERSION_PRIORITY = 100


def custom_resources(crd: Obj) -> list[GroupVersion]:
    """The definitions of a CRD's served versions, by the names it accepted (status.acceptedNames, which
    the naming controller fills from spec.names), each in a GroupVersion of its own."""
    spec = crd.get("spec") or {}
    names = (crd.get("status") or {}).get("acceptedNames") or spec.get("names") or {}
    group, plural, kind = spec.get("group") or "", names.get("plural") or "", names.get("kind") or ""
    stored = storage_version(spec)
    out = []
    for ver in spec.get("versions") or []:
        if not ver.get("served"):
            continue
        version = ver.get("name") or ""
        schema = (ver.get("schema") or {}).get("openAPIV3Schema") or {}
        status_enabled = (ver.get("subresources") or {}).get("status") is not None
        info = ResourceInfo(
            group=group, version=version, kind=kind, plural=plural,
            singular=names.get("singular") or kind.lower(), namespaced=spec.get("scope") == "Namespaced",
            key_prefix=f"/registry/{group}/{plural}/", short_names=tuple(names.get("shortNames") or ()),
            categories=tuple(names.get("categories") or ()),
            subresources=(status(kind),) if status_enabled else (),
            strategy=custom_resource_strategy(kind, schema, status_enabled),
            conversion=None if version == stored else same_fields(f"{group}/{stored}", kind),
        )
        out.append(GroupVersion(group, version, CRD_GROUP_PRIORITY, CRD_VERSION_PRIORITY, (info,)))
    return out
