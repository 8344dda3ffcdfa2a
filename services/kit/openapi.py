"""OpenAPI of the server's kinds: their schemas (named as kube names Go types: the reversed group, the
version, the kind), v3 documents built by the library's builder (an index and one document per
group-version, what `kubectl explain` and `kubectl create --validate=strict` read) and v2 (one document,
JSON or gnostic protobuf, converted from the v3 documents, as kube-openapi does)."""
from __future__ import annotations

import copy
import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from services.apis import schemas
from services.apiserver import openapi, openapi_v2
from services.apiserver.catalogue import Catalogue

from .api import Kind, Obj
from .kinds import catalogue

META = "io.k8s.apimachinery.pkg.apis.meta.v1."
_S = {"type": "string"}
_DESC = {
    "apiVersion": "APIVersion defines the versioned schema of this representation of an object. Servers should "
                  "convert recognized schemas to the latest internal value, and may reject unrecognized values. "
                  "More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md"
                  "#resources",
    "kind": "Kind is a string value representing the REST resource this object represents. Servers may infer "
            "this from the endpoint the client submits requests to. Cannot be updated. In CamelCase. More info: "
            "https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#types-kinds",
    "metadata": "Standard object's metadata. More info: "
                "https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata",
}


def _reverse(group: str) -> str:
    return ".".join(reversed(group.split(".")))


def schema_name(group: str, version: str, kind: str) -> str:
    return f"{_reverse(group)}.{version}.{kind}"


def _ref(name: str) -> Obj:
    return {"$ref": "#/components/schemas/" + name}


def _kind_schema(group: str, version: str, k: Kind) -> Obj:
    s = copy.deepcopy(k.versions[version].schema)
    s.setdefault("type", "object")
    props = {
        "apiVersion": {"type": "string", "description": _DESC["apiVersion"]},
        "kind": {"type": "string", "description": _DESC["kind"]},
        "metadata": {"allOf": [_ref(META + "ObjectMeta")], "default": {}, "description": _DESC["metadata"]},
    }
    props.update(s.get("properties") or {})
    s["properties"] = props
    s["x-kubernetes-group-version-kind"] = [{"group": group, "version": version, "kind": k.kind}]
    return s


def _list_schema(group: str, version: str, k: Kind) -> Obj:
    return {
        "description": f"{k.kind}List is a list of {k.kind} objects.", "type": "object", "required": ["items"],
        "properties": {
            "apiVersion": {"type": "string", "description": _DESC["apiVersion"]},
            "kind": {"type": "string", "description": _DESC["kind"]},
            "metadata": {"allOf": [_ref(META + "ListMeta")], "default": {}},
            "items": {"type": "array", "items": {"allOf": [_ref(schema_name(group, version, k.kind))], "default": {}}},
        },
        "x-kubernetes-group-version-kind": [{"group": group, "version": version, "kind": k.kind + "List"}],
    }


def kind_schemas(group: str, versions: Sequence[str], kinds: Sequence[Kind]) -> dict[str, Obj]:
    """Every kind's and list's schema in every version it is served in."""
    out: dict[str, Obj] = {}
    for version in versions:
        for k in kinds:
            if version in k.versions:
                out[schema_name(group, version, k.kind)] = _kind_schema(group, version, k)
                out[schema_name(group, version, k.kind + "List")] = _list_schema(group, version, k)
    return out


class Definitions:
    """The kinds' OpenAPI definitions (as the server publishes them) beside Kubernetes' own, which they
    reference (ObjectMeta): what the library's decoder and field manager read."""

    def __init__(self, group: str, kinds: Sequence[Kind], versions: Sequence[str]) -> None:
        self.ALL: Mapping[str, Obj] = {**schemas.ALL, **kind_schemas(group, versions, kinds)}
        self.KUBERNETES_VERSION = schemas.KUBERNETES_VERSION

    def definition_for(self, group: str, version: str, kind: str) -> str:
        return schema_name(group, version, kind)

    def refs_of(self, names: list[str]) -> dict[str, Obj]:
        return schemas.refs_of(names, self.ALL)

    def check(self, obj: dict[str, Any], name: str, kind: str) -> tuple[list[str], str | None]:
        return schemas.check(obj, name, kind, self.ALL)

    def merge_keys(self, name: str) -> dict[str, str]:
        """A kit kind declares no strategic merge keys: every list is replaced."""
        return {}

    def replaced_fields(self, name: str) -> frozenset[str]:
        return frozenset()


def v3_document(group: str, version: str, kinds: Sequence[Kind]) -> Obj:
    """The group-version's document, as the server serves it."""
    versions = sorted({v for k in kinds for v in k.versions})
    return openapi.document(catalogue(group, kinds, versions, "/"), Definitions(group, kinds, versions), group,
                            version)


class Documents:
    """The OpenAPI documents, serialized once; v3 documents are addressed with their hash."""

    def __init__(self, group: str, versions: Sequence[str], kinds: Catalogue, definitions: Definitions) -> None:
        self.v3: dict[str, bytes] = {}
        self.hashes: dict[str, str] = {}
        for v in versions:
            path = f"apis/{group}/{v}"
            body = orjson.dumps(openapi.document(kinds, definitions, group, v))
            self.v3[path] = body
            self.hashes[path] = hashlib.sha512(body).hexdigest()[:128].upper()
        self.index = orjson.dumps({"paths": {p: {"serverRelativeURL": f"/openapi/v3/{p}?hash={h}"}
                                             for p, h in self.hashes.items()}})
        self.v2 = openapi_v2.build(self.v3)
