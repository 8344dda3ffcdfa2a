"""Kubernetes' own OpenAPI definitions of the served kinds (1.33), named as kube-apiserver names them.

schemas.json is generated at setup by tools/kube_definitions.py from the kubernetes-validate package
and read once at import. The same definitions drive four things: the OpenAPI documents (kubectl
explain and client-side validation), unknown-field detection (fieldValidation), the type checks of
decoding (kube's "cannot unmarshal" errors), and the list semantics of strategic merge patch
(x-kubernetes-patch-strategy / -patch-merge-key).
"""
from __future__ import annotations

import functools
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import orjson

from services.apiserver import typed

Schema = dict[str, Any]

META = "io.k8s.apimachinery.pkg.apis.meta.v1."
CORE = "io.k8s.api.core.v1."
AGG = "io.k8s.kube-aggregator.pkg.apis.apiregistration.v1."
RBAC = "io.k8s.api.rbac.v1."
AUTHN = "io.k8s.api.authentication.v1."
AUTHZ = "io.k8s.api.authorization.v1."
REF_PREFIX = typed.REF_PREFIX
GVK = "x-kubernetes-group-version-kind"

_SOURCE = Path(__file__).with_name("schemas.json")


def _load() -> tuple[str, dict[str, Schema]]:
    try:
        doc = orjson.loads(_SOURCE.read_bytes())
    except FileNotFoundError:
        raise SystemExit(f"{_SOURCE} is missing: run `make setup` (tools/kube_definitions.py generates it)") \
            from None
    return doc["kubernetesVersion"], doc["definitions"]


KUBERNETES_VERSION, ALL = _load()


def _by_gvk() -> dict[tuple[str, str, str], str]:
    """(group, version, kind) -> definition name. A kind's own definition ends in its kind; the meta types
    (DeleteOptions, WatchEvent, ...) that list every group only count for the kinds they name."""
    out: dict[tuple[str, str, str], str] = {}
    for name, schema in ALL.items():
        for gvk in schema.get(GVK) or ():
            key = (gvk.get("group", ""), gvk.get("version", ""), gvk.get("kind", ""))
            if name.rsplit(".", 1)[-1] == key[2]:
                out.setdefault(key, name)
    return out


_BY_GVK = _by_gvk()


# The definitions of custom resources (registered by the registry's CRD controller as it serves them).
_CUSTOM: set[str] = set()


def custom_definition_name(group: str, version: str, kind: str) -> str:
    """How kube names a custom resource's definition: com.example.stable.v1.CronTab."""
    return ".".join([*reversed(group.split(".")), version, kind])


def register_custom(group: str, version: str, kind: str, schema: Schema) -> None:
    """Publish a custom resource's schema (and its List's) as kube-apiserver does for a served CRD version."""
    name = custom_definition_name(group, version, kind)
    list_name = name + "List"
    ALL[name] = {**schema, GVK: [{"group": group, "kind": kind, "version": version}]}
    ALL[list_name] = {
        "description": f"{kind}List is a list of {kind}", "type": "object", "required": ["items"],
        "properties": {
            "apiVersion": ALL[name]["properties"]["apiVersion"],
            "items": {"description": f"List of {kind.lower()}s.", "type": "array", "items": {"$ref": REF_PREFIX + name}},
            "kind": ALL[name]["properties"]["kind"],
            "metadata": {"allOf": [{"$ref": REF_PREFIX + META + "ListMeta"}]},
        },
        GVK: [{"group": group, "kind": kind + "List", "version": version}],
    }
    _BY_GVK[(group, version, kind)] = name
    _BY_GVK[(group, version, kind + "List")] = list_name
    _CUSTOM.update((name, list_name))
    merge_keys.cache_clear()
    replaced_fields.cache_clear()


def unregister_custom(group: str, version: str, kind: str) -> None:
    name = custom_definition_name(group, version, kind)
    for n, k in ((name, kind), (name + "List", kind + "List")):
        ALL.pop(n, None)
        _BY_GVK.pop((group, version, k), None)
        _CUSTOM.discard(n)


def definition_for(group: str, version: str, kind: str) -> str:
    """The name of a kind's definition, by its group, version and kind (KeyError when kube has none)."""
    return _BY_GVK[(group, version, kind)]


def resolve(schema: Schema) -> Schema:
    """Follow $ref (bare or wrapped in allOf, as kube's v3 documents wrap them)."""
    return typed.resolve(schema, ALL)


def refs_of(names: list[str], definitions: Mapping[str, Schema] = ALL) -> dict[str, Schema]:
    """The named schemas and everything they reference, for one OpenAPI document (among the definitions:
    Kubernetes' own unless given)."""
    out: dict[str, Schema] = {}
    todo = list(names)
    while todo:
        name = todo.pop()
        if name in out:
            continue
        out[name] = definitions[name]
        todo.extend(_refs(definitions[name]))
    return dict(sorted(out.items()))


def _refs(node: Any) -> list[str]:
    found: list[str] = []
    if isinstance(node, dict):
        for k, v in node.items():
            if k == "$ref" and isinstance(v, str):
                found.append(v[len(REF_PREFIX):])
            else:
                found.extend(_refs(v))
    elif isinstance(node, list):
        for v in node:
            found.extend(_refs(v))
    return found


@functools.cache
def merge_keys(schema_name: str) -> dict[str, str]:
    """Strategic merge patch's list semantics of a kind, read from its definition.

    path -> merge key for every list whose x-kubernetes-patch-strategy includes "merge" ("" for lists of
    primitives, merged by value). Paths name fields by dots; a list item's fields continue the list's
    path (`subsets.addresses`), as patch.py walks them.
    """
    return {path: prop.get("x-kubernetes-patch-merge-key") or ""
            for path, prop, target in _properties(schema_name)
            if target.get("type") == "array"
            and "merge" in (prop.get("x-kubernetes-patch-strategy") or "").split(",")}


@functools.cache
def replaced_fields(schema_name: str) -> frozenset[str]:
    """The maps strategic merge patch replaces whole (x-kubernetes-patch-strategy: replace, as
    PodDisruptionBudgetSpec.selector), by path as merge_keys names them."""
    return frozenset(path for path, prop, _ in _properties(schema_name)
                     if "replace" in (prop.get("x-kubernetes-patch-strategy") or "").split(","))


def _properties(schema_name: str) -> Iterator[tuple[str, Schema, Schema]]:
    """Every property reachable from a definition, by dotted path (a list item's fields continue the list's
    path): the path, the property, and what it resolves to ($ref followed)."""
    def walk(schema: Schema, path: str, seen: frozenset[str]) -> Iterator[tuple[str, Schema, Schema]]:
        for name, prop in (schema.get("properties") or {}).items():
            sub = f"{path}.{name}" if path else name
            target, ref = _target(prop)
            yield sub, prop, target
            if target.get("type") == "array":
                target, ref = _target(target.get("items") or {})
            if ref in seen:
                continue
            if target.get("properties"):
                yield from walk(target, sub, seen | {ref} if ref else seen)

    yield from walk(ALL[schema_name], "", frozenset({schema_name}))


def _target(schema: Schema) -> tuple[Schema, str]:
    """A property's schema with $ref followed, and the definition it names ("" when inline)."""
    ref = ""
    if "$ref" in schema:
        ref = schema["$ref"][len(REF_PREFIX):]
    elif len(schema.get("allOf") or ()) == 1 and "$ref" in schema["allOf"][0]:
        ref = schema["allOf"][0]["$ref"][len(REF_PREFIX):]
    return (ALL[ref], ref) if ref else (schema, "")


_JSON_TYPES = {dict: "object", list: "array", str: "string", bool: "bool", int: "number", float: "number"}
_GO_TYPES = {"string": "string", "boolean": "bool", "integer": "int64", "number": "float64", "array": "[]",
             "object": "map"}


def _is_a(want: str | None, value: Any) -> bool:
    """Whether value is of the schema's type (only that one test: check runs on every write)."""
    if want is None:
        return True
    if want == "string":
        return isinstance(value, str)
    if want == "object":
        return isinstance(value, dict)
    if want == "array":
        return isinstance(value, list)
    if want == "boolean":
        return isinstance(value, bool)
    if want == "integer":
        return (isinstance(value, int) and not isinstance(value, bool)
                or isinstance(value, float) and value.is_integer())
    if want == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    raise KeyError(want)


def check(obj: dict[str, Any], schema_name: str, kind: str,
          definitions: Mapping[str, Schema] = ALL) -> tuple[list[str], str | None]:
    """Walk obj against the schema among the definitions (Kubernetes' own unless given): (unknown field
    paths, first type error or None).

    Type errors follow encoding/json: `json: cannot unmarshal number into Go struct field
    ConfigMap.data of type string`.
    """
    unknown: list[str] = []
    type_error: list[str] = []
    _walk(obj, definitions[schema_name], "", definitions, kind, unknown, type_error)
    return unknown, (type_error[0] if type_error and schema_name not in _CUSTOM else None)


def _walk(value: Any, schema: Schema, path: str, definitions: Mapping[str, Schema], kind: str,
          unknown: list[str], type_error: list[str]) -> None:
    """check's walk, a function of the module rather than a closure: a closure that calls itself is a
    reference cycle, left to the cyclic collector after every request the registry decodes."""
    schema = typed.resolve(schema, definitions)
    if value is None:
        return
    want = schema.get("type")
    if schema.get("x-kubernetes-int-or-string") and type(value) is int:
        return
    if not _is_a(want, value):
        if not type_error:
            got = _JSON_TYPES.get(type(value), "value")
            go = _GO_TYPES.get(want or "", "value")
            if want == "integer":
                go = schema.get("format", "int64")
            type_error.append(f"json: cannot unmarshal {got} into Go struct field {kind}.{path} of type {go}")
        return
    if isinstance(value, dict):
        props = schema.get("properties")
        if props is not None:
            for k, v in value.items():
                sub = f"{path}.{k}" if path else k
                if k in props:
                    _walk(v, props[k], sub, definitions, kind, unknown, type_error)
                elif not schema.get("x-kubernetes-preserve-unknown-fields"):
                    unknown.append(sub)
        elif "additionalProperties" in schema:
            for k, v in value.items():
                _walk(v, schema["additionalProperties"], path, definitions, kind, unknown, type_error)
    elif isinstance(value, list) and "items" in schema:
        for i, v in enumerate(value):
            _walk(v, schema["items"], f"{path}[{i}]", definitions, kind, unknown, type_error)


def field_doc(definition: str, field: str) -> str:
    """A field's description in kube's definition (io.k8s.api.<group>.<version>.<Type>): what kube's printers take
    as a column's description (SwaggerDoc)."""
    return ALL[definition]["properties"][field].get("description", "")
