"""OpenAPI of the server's kinds: v3 (an index and one document per group-version, what `kubectl
explain` and `kubectl create --validate=strict` read) and v2 (one document, JSON or gnostic
protobuf, converted from the v3 documents by the proxy's converter, as kube-openapi does). Kinds
are named as kube names Go types: the reversed group, the version, the kind."""
from __future__ import annotations

import copy
import hashlib
from collections.abc import Sequence

import orjson

from services.apiserver import openapi_v2

from .api import Kind, Obj

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


def _meta_schemas() -> dict[str, Obj]:
    str_map = {"type": "object", "additionalProperties": {"type": "string", "default": ""}}
    return {
        META + "ObjectMeta": {
            "description": "ObjectMeta is metadata that all persisted resources must have, which includes all "
                           "objects users must create.",
            "type": "object",
            "properties": {
                "name": {**_S, "description": "Name must be unique within a namespace."},
                "generateName": {**_S, "description": "GenerateName is an optional prefix, used by the server, "
                                 "to generate a unique name ONLY IF the Name field has not been provided."},
                "namespace": {**_S, "description": "Namespace defines the space within which each name must be "
                              "unique."},
                "uid": {**_S, "description": "UID is the unique in time and space value for this object."},
                "resourceVersion": {**_S, "description": "An opaque value that represents the internal version "
                                    "of this object."},
                "generation": {"type": "integer", "format": "int64", "description": "A sequence number "
                               "representing a specific generation of the desired state."},
                "creationTimestamp": {**_S, "format": "date-time", "description": "CreationTimestamp is a "
                                      "timestamp representing the server time when this object was created."},
                "labels": {**str_map, "description": "Map of string keys and values that can be used to organize "
                           "and categorize (scope and select) objects."},
                "annotations": {**str_map, "description": "Annotations is an unstructured key value map stored "
                                "with a resource that may be set by external tools."},
                "finalizers": {"type": "array", "items": {"type": "string", "default": ""}},
            },
        },
        META + "ListMeta": {
            "description": "ListMeta describes metadata that synthetic resources must have.",
            "type": "object",
            "properties": {"resourceVersion": _S, "continue": _S,
                           "remainingItemCount": {"type": "integer", "format": "int64"}},
        },
        META + "Status": {
            "description": "Status is a return value for calls that don't return other objects.",
            "type": "object",
            "properties": {"apiVersion": _S, "kind": _S, "status": _S, "message": _S, "reason": _S,
                           "code": {"type": "integer", "format": "int32"},
                           "details": {"type": "object"},
                           "metadata": {"allOf": [{"$ref": "#/components/schemas/" + META + "ListMeta"}]}},
        },
    }


def _reverse(group: str) -> str:
    return ".".join(reversed(group.split(".")))


def schema_name(group: str, version: str, kind: str) -> str:
    return f"{_reverse(group)}.{version}.{kind}"


def _q(name: str, kind: str = "string", desc: str = "") -> Obj:
    return {"name": name, "in": "query", "description": desc, "schema": {"type": kind, "uniqueItems": True}}


_WRITE_PARAMS = [
    _q("dryRun", desc="When present, indicates that modifications should not be persisted."),
    _q("fieldManager", desc="fieldManager is a name associated with the actor or entity that is making these "
       "changes."),
    _q("fieldValidation", desc="fieldValidation instructs the server on how to handle objects in the request "
       "(POST/PUT/PATCH) containing unknown or duplicate fields. Valid values are: Ignore, Warn, Strict."),
]
_LIST_PARAMS = [_q(n) for n in ("continue", "fieldSelector", "labelSelector", "resourceVersion",
                                 "resourceVersionMatch")] + [
    _q("limit", "integer"), _q("timeoutSeconds", "integer"), _q("watch", "boolean"),
    _q("allowWatchBookmarks", "boolean"), _q("sendInitialEvents", "boolean")]
_PATCH_MEDIA = ("application/json-patch+json", "application/merge-patch+json",
                "application/strategic-merge-patch+json")
_MEDIA = ("application/json", "application/yaml")


def _path_param(name: str) -> Obj:
    return {"name": name, "in": "path", "required": True, "schema": {"type": "string", "uniqueItems": True}}


def _ref(name: str) -> Obj:
    return {"$ref": "#/components/schemas/" + name}


def _paths(group: str, version: str, k: Kind) -> dict[str, Obj]:
    gvk = {"group": group, "version": version, "kind": k.kind}
    obj, lst = schema_name(group, version, k.kind), schema_name(group, version, k.kind + "List")
    tag = f"{_reverse(group).split('.')[-1]}_{version}"

    def op(action: str, verb: str, scope: str, schema: str, params: list[Obj], codes: Sequence[str] = ("200",),
           body: Sequence[str] = ()) -> Obj:
        out: Obj = {
            "tags": [tag], "operationId": f"{verb}{scope}{k.kind}",
            "parameters": params,
            "responses": {c: {"description": "OK", "content": {m: {"schema": _ref(schema)} for m in _MEDIA}}
                          for c in codes},
            "x-kubernetes-action": action, "x-kubernetes-group-version-kind": gvk,
        }
        if body:
            out["requestBody"] = {"content": {m: {"schema": _ref(obj) if m in _MEDIA else {"type": "object"}}
                                              for m in body}, "required": True}
        return out

    scope = "Namespaced" if k.namespaced else ""
    base = f"/apis/{group}/{version}/" + ("namespaces/{namespace}/" if k.namespaced else "") + k.plural
    ns_params = [_path_param("namespace")] if k.namespaced else []
    paths = {
        base: {"parameters": ns_params,
               "get": op("list", "list", scope, lst, _LIST_PARAMS),
               "post": op("post", "create", scope, obj, _WRITE_PARAMS, ("200", "201"), _MEDIA)},
        base + "/{name}": {"parameters": [_path_param("name"), *ns_params],
                           "get": op("get", "read", scope, obj, []),
                           "put": op("put", "replace", scope, obj, _WRITE_PARAMS, ("200", "201"), _MEDIA),
                           "patch": op("patch", "patch", scope, obj, _WRITE_PARAMS, ("200",), _PATCH_MEDIA),
                           "delete": op("delete", "delete", scope, obj, [_q("dryRun")])},
    }
    if k.namespaced:
        paths[f"/apis/{group}/{version}/{k.plural}"] = {
            "get": op("list", "list", "ForAllNamespaces", lst, _LIST_PARAMS)}
    return paths


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


def v3_document(group: str, version: str, kinds: Sequence[Kind]) -> Obj:
    schemas = _meta_schemas()
    paths: dict[str, Obj] = {}
    for k in kinds:
        if version not in k.versions:
            continue
        schemas[schema_name(group, version, k.kind)] = _kind_schema(group, version, k)
        schemas[schema_name(group, version, k.kind + "List")] = _list_schema(group, version, k)
        paths.update(_paths(group, version, k))
    return {"openapi": "3.0.0", "info": {"title": "Kubernetes", "version": "v1.32.0"}, "paths": paths,
            "components": {"schemas": schemas}}


class Documents:
    """The OpenAPI documents, serialized once; v3 documents are addressed with their hash."""

    def __init__(self, group: str, versions: Sequence[str], kinds: Sequence[Kind]) -> None:
        self.v3: dict[str, bytes] = {}
        self.hashes: dict[str, str] = {}
        for v in versions:
            path = f"apis/{group}/{v}"
            body = orjson.dumps(v3_document(group, v, kinds))
            self.v3[path] = body
            self.hashes[path] = hashlib.sha512(body).hexdigest()[:128].upper()
        self.index = orjson.dumps({"paths": {p: {"serverRelativeURL": f"/openapi/v3/{p}?hash={h}"}
                                             for p, h in self.hashes.items()}})
        self.v2 = openapi_v2.build(self.v3)
