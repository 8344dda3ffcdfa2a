"""apiextensions.k8s.io/v1: CustomResourceDefinition, and the resource definitions a CRD makes at run time
(custom_resources): one ResourceInfo per served version, all over one storage, that the registry adds to its
Catalogue once the CRD is established."""
from __future__ import annotations

import re
from typing import Any

from services.apiserver.conversion import Conversion, same_fields
from services.apiserver.printers import CREATED_AT_TABLE, NAME, TableConvertor, column
from services.apiserver.resource import GroupVersion, ResourceInfo
from services.apiserver.webhook.converter import WebhookConversion, WebhookConverter

from . import schemas
from .kinds import SCALE, status
from .strategies import selectablefields
from .strategies.apiextensions import (
    CustomResourceDefinitionStrategy,
    custom_resource_strategy,
    storage_version,
)

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


def custom_resources(crd: Obj, converter: WebhookConverter | None = None) -> list[GroupVersion]:
    """The definitions of a CRD's served versions, by the names it accepted (status.acceptedNames, which
    the naming controller fills from spec.names), each in a GroupVersion of its own. With conversion strategy
    Webhook every version, the storage version too (objects stored in an older one), converts through converter
    (made once per CRD); with None only the apiVersion changes."""
    spec = crd.get("spec") or {}
    names = (crd.get("status") or {}).get("acceptedNames") or spec.get("names") or {}
    group, plural, kind = spec.get("group") or "", names.get("plural") or "", names.get("kind") or ""
    stored = storage_version(spec)
    stored_selectable = tuple(dict.fromkeys(name for ver in spec.get("versions") or []
                                            for name in selectablefields.names(ver.get("selectableFields") or [])))
    out = []
    for ver in spec.get("versions") or []:
        if not ver.get("served"):
            continue
        version = ver.get("name") or ""
        schema = (ver.get("schema") or {}).get("openAPIV3Schema") or {}
        subresources = ver.get("subresources") or {}
        status_enabled = subresources.get("status") is not None
        scale = subresources.get("scale")
        info = ResourceInfo(
            group=group, version=version, kind=kind, plural=plural,
            singular=names.get("singular") or kind.lower(), namespaced=spec.get("scope") == "Namespaced",
            key_prefix=f"/registry/{group}/{plural}/", short_names=tuple(names.get("shortNames") or ()),
            categories=tuple(names.get("categories") or ()),
            subresources=((SCALE,) if scale is not None else ()) + ((status(kind),) if status_enabled else ()),
            strategy=custom_resource_strategy(
                kind, schema, status_enabled, scale,
                (ver.get("deprecationWarning") or f"{group}/{version} {kind} is deprecated")
                if ver.get("deprecated") else "",
                selectablefields.names(ver.get("selectableFields") or []), stored_selectable),
            table=printer_columns(ver.get("additionalPrinterColumns") or []),
            conversion=_conversion(group, version, stored, kind, converter),
        )
        out.append(GroupVersion(group, version, CRD_GROUP_PRIORITY, CRD_VERSION_PRIORITY, (info,)))
    return out


def _conversion(group: str, version: str, stored: str, kind: str,
                converter: WebhookConverter | None) -> Conversion | None:
    if converter is not None:
        return WebhookConversion(f"{group}/{stored}", kind, converter=converter)
    return None if version == stored else same_fields(f"{group}/{stored}", kind)


_STEP = re.compile(r"\.([^.\[\]]+)|\[(\d+)\]")


def _json_path(obj: Any, path: str) -> Any:
    """A printer column's simple JSONPath (.spec.replicas, .status.conditions[0].type); None when absent."""
    value = obj
    for name, index in _STEP.findall(path.strip().strip("{}")):
        if name and isinstance(value, dict):
            value = value.get(name)
        elif index and isinstance(value, list) and int(index) < len(value):
            value = value[int(index)]
        else:
            return None
    return value


def printer_columns(columns: list[Obj]) -> TableConvertor | None:
    """A version's additionalPrinterColumns after Name (kube's CR table convertor); None: Name and Age."""
    if not columns:
        return None
    paths = [c.get("jsonPath") or "" for c in columns]

    def cells(obj: Obj) -> list[Any]:
        values = [_json_path(obj, p) for p in paths]
        return [(obj.get("metadata") or {}).get("name", ""),
                *(v if isinstance(v, (str, int, float, bool)) or v is None else str(v) for v in values)]
    return TableConvertor((NAME, *(column(c.get("name") or "", c.get("type") or "string", c.get("description") or "",
                                          c.get("format") or "", c.get("priority") or 0) for c in columns)), cells)


def published_schema(crd: Obj, version: str) -> Obj:
    """A served version's schema as kube publishes it (OpenAPI): apiVersion, kind and metadata as every kind's."""
    ver = next(v for v in (crd.get("spec") or {}).get("versions") or [] if v.get("name") == version)
    schema = dict((ver.get("schema") or {}).get("openAPIV3Schema") or {})
    props = dict(schema.get("properties") or {})
    props["apiVersion"] = {"type": "string", "description": schemas.ALL[schemas.CORE + "ConfigMap"]["properties"]
                           ["apiVersion"].get("description", "")}
    props["kind"] = {"type": "string", "description": schemas.ALL[schemas.CORE + "ConfigMap"]["properties"]
                     ["kind"].get("description", "")}
    props["metadata"] = {"allOf": [{"$ref": schemas.REF_PREFIX + schemas.META + "ObjectMeta"}],
                         "description": "Standard object's metadata. More info: https://git.k8s.io/community/"
                                        "contributors/devel/sig-architecture/api-conventions.md#metadata"}
    schema["properties"] = props
    schema.setdefault("type", "object")
    return schema
