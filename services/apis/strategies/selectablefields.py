"""A CustomResourceDefinition version's selectableFields (apiextensions-apiserver's
ValidateCustomResourceSelectableFields and the custom resource strategy's field set): each jsonPath is a simple
path through the version's schema (.field, and .key of a map; no [...] notation) to a string, integer or
boolean; a custom object's value at it is what a field selector compares (absent: "")."""
from __future__ import annotations

import re
from typing import Any

from services.apiserver import fielderrors
from services.apiserver import validation as v

Obj = dict[str, Any]
MAX_SELECTABLE_FIELDS = 8
ALLOWED_TYPES = ("string", "boolean", "integer")
# kube's scanner: the delimiters '.', '[' and ']' are tokens; a single-quoted string is one token
_TOKEN = re.compile(r"'(?:[^'\\]|\\.)*'?|[.\[\]]|[^.\[\]']+")


class PathError(ValueError):
    pass


def field_path(json_path: str, schema: Obj) -> tuple[str, Obj | None]:
    """kube's cel.ValidFieldPath without array notation: the field path (spec.labels[key]) and the schema the
    path reaches (None past an additionalProperties without a schema). PathError says why a path is invalid."""
    tokens = _TOKEN.findall(json_path)
    path, node, i = "", schema, 0

    def step(name: str) -> None:
        nonlocal path, node
        if node is not None and node.get("properties") is not None:
            if name not in node["properties"]:
                raise PathError("does not refer to a valid field")
            path, node = (f"{path}.{name}" if path else name), node["properties"][name]
        elif node is not None and node.get("additionalProperties") not in (None, False):
            extra = node["additionalProperties"]
            path, node = f"{path}[{name}]", extra if isinstance(extra, dict) else None
        else:
            raise PathError("does not refer to a valid field")

    while i < len(tokens):
        tok = tokens[i]
        if tok == "[":
            raise PathError("array notation is not allowed")
        if tok != ".":
            raise PathError(f"expected [ or . but got: {tok}")
        if i + 1 >= len(tokens):
            raise PathError("unexpected end of JSON path")
        step(tokens[i + 1])
        i += 2
    return path, node


def validate(fields: list[Any], schema: Obj, at: str) -> list[v.Cause]:
    """ValidateCustomResourceSelectableFields, at `at` (spec.versions[i].selectableFields)."""
    causes: list[v.Cause] = []
    unique: set[str] = set()
    for i, sf in enumerate(fields):
        json_path = (sf.get("jsonPath") or "") if isinstance(sf, dict) else ""
        where = f"{at}[{i}].jsonPath"
        if not json_path:
            causes.append(v.required(where))
            continue
        try:
            path, found = field_path(json_path, schema)
        except PathError as e:
            causes.append(v.invalid(where, json_path, f"is an invalid path: {e}"))
            continue
        if path.split(".", 1)[0].split("[", 1)[0] == "metadata":
            causes.append(v.invalid(where, json_path, "must not point to fields in metadata"))
        if found is None or found.get("type") not in ALLOWED_TYPES:
            causes.append(v.invalid(where, json_path, "must point to a field of type string, boolean or integer. "
                                                      "Enum string fields and strings with formats are allowed."))
        if path in unique:
            causes.append(v.duplicate(where, json_path))
        unique.add(path)
    if len(unique) > MAX_SELECTABLE_FIELDS:
        causes.append(fielderrors.too_many(at, len(unique), MAX_SELECTABLE_FIELDS))
    return causes


def names(fields: list[Any]) -> tuple[str, ...]:
    """The field selector names of a version's selectableFields (the jsonPath without its leading dot)."""
    return tuple(sf["jsonPath"].lstrip(".") for sf in fields if isinstance(sf, dict) and sf.get("jsonPath"))


def value(obj: Obj, name: str) -> str:
    """The selectable value of a custom object at a field named by names(): a string as is, an integer in
    decimal, a boolean as true/false; "" when absent."""
    node: Any = obj
    for key in name.split("."):
        node = node.get(key) if isinstance(node, dict) else None
    if isinstance(node, bool):
        return "true" if node else "false"
    if isinstance(node, (str, int)):
        return str(node)
    return ""
