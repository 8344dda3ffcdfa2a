"""Objects read through their kind's schema, as sigs.k8s.io/structured-merge-diff's `typed` package reads them:
field sets (the paths an object sets), comparison, merge and removal, each following the list and map
semantics the schema declares (x-kubernetes-list-type atomic/set/map with x-kubernetes-list-map-keys,
x-kubernetes-map-type atomic/granular; lists that declare nothing are atomic; under
x-kubernetes-preserve-unknown-fields, a field without a schema is typed by its value, as smd's deduced type).

The schemas come from a Parser (smd's typed.Parser) over one set of OpenAPI definitions, given by whoever
serves the kinds: Kubernetes' own for the core, an aggregated server's own for its kinds.

A path is a tuple of path elements written as FieldsV1 writes them: `f:<field>`, `k:<json of the key
fields>` (an item of a map-list), `v:<json value>` (an item of a set-list).
"""
from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import orjson

Path = tuple[str, ...]
Schema = dict[str, Any]
Shape = tuple[str, Any, Any, bool]
_LEAF = object()  # a member of a set with no value of its own (a list item: its children carry the values)

# what the schema says a node is
STRUCT, MAP, LIST, SCALAR = "struct", "map", "list", "scalar"
REF_PREFIX = "#/components/schemas/"

# Key fields kube's published schemas default (protocol: TCP) though the definitions here carry no default.
_KEY_DEFAULTS = {"protocol": "TCP"}
# What smd calls "deduced": a field x-kubernetes-preserve-unknown-fields keeps without a schema of its own is
# typed by its value: an object a granular map of deduced fields, a list atomic, anything else a scalar.
_DEDUCED: Schema = {"x-kubernetes-preserve-unknown-fields": True}


class _WithDeduced(dict):  # type: ignore[type-arg]
    """The properties of an object that preserves unknown fields: a field without a schema is deduced."""

    def get(self, key: Any, default: Any = None) -> Any:
        return super().get(key, _DEDUCED)


def resolve(schema: Schema, definitions: Mapping[str, Schema]) -> Schema:
    """Follow $ref (bare or wrapped in allOf, as kube's v3 documents wrap them) among the definitions."""
    while True:
        if "$ref" in schema:
            schema = definitions[schema["$ref"][len(REF_PREFIX):]]
        elif "allOf" in schema and len(schema["allOf"]) == 1 and "properties" not in schema:
            schema = schema["allOf"][0]
        else:
            return schema


def _json(value: Any) -> str:
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode()


class Parser:
    """The typed operations over one set of OpenAPI definitions (name -> schema)."""

    def __init__(self, definitions: Mapping[str, Schema]) -> None:
        self.definitions = definitions
        self._shapes: dict[int, tuple[Schema, Shape]] = {}

    def root(self, schema_name: str) -> Schema:
        return self.definitions[schema_name]

    def shape(self, raw: Schema | None) -> Shape:
        """(kind, element or properties, list-type details, atomic) of a property's schema, x- extensions
        read on the property and on the definition it names."""
        if raw is None:
            return SCALAR, None, None, True
        cached = self._shapes.get(id(raw))
        if cached is not None and cached[0] is raw:
            return cached[1]
        target = resolve(raw, self.definitions)
        ext = {**{k: v for k, v in target.items() if k.startswith("x-kubernetes")},
               **{k: v for k, v in raw.items() if k.startswith("x-kubernetes")}}
        out: Shape
        if target.get("x-kubernetes-int-or-string"):
            out = (SCALAR, None, None, True)
        elif target.get("x-kubernetes-preserve-unknown-fields"):
            out = (STRUCT, _WithDeduced(target.get("properties") or {}), None,
                   ext.get("x-kubernetes-map-type") == "atomic")
        elif target.get("properties"):
            out = (STRUCT, target["properties"], None, ext.get("x-kubernetes-map-type") == "atomic")
        elif target.get("type") == "object" and isinstance(target.get("additionalProperties"), dict):
            out = (MAP, target["additionalProperties"], None, ext.get("x-kubernetes-map-type") == "atomic")
        elif target.get("type") == "array":
            kind = ext.get("x-kubernetes-list-type") or "atomic"
            keys = tuple(ext.get("x-kubernetes-list-map-keys") or ()) if kind == "map" else ()
            out = (LIST, target.get("items") or {}, (kind, keys), kind == "atomic")
        else:
            out = (SCALAR, None, None, True)
        self._shapes[id(raw)] = (raw, out)
        return out

    def item_element(self, item: Any, details: tuple[str, tuple[str, ...]], item_schema: Schema) -> str | None:
        """The path element of a list item: k:{keys} for a map-list, v:value for a set-list."""
        kind, keys = details
        if kind == "set":
            return "v:" + _json(item)
        if kind == "map" and isinstance(item, dict):
            props = (resolve(item_schema, self.definitions).get("properties") or {})
            key: dict[str, Any] = {}
            for k in keys:
                if k in item:
                    key[k] = item[k]
                else:
                    default = (props.get(k) or {}).get("default", _KEY_DEFAULTS.get(k))
                    if default is not None:
                        key[k] = default
            return "k:" + _json(key)
        return None

    # Field sets --------------------------------------------------------------------------------------

    def leaves(self, value: Any, schema: Schema) -> dict[Path, Any]:
        """The object's field set (smd ToFieldSet), each member with its value (_LEAF for list items)."""
        out: dict[Path, Any] = {}
        self._walk(value, schema, (), out)
        return out

    def field_set(self, value: Any, schema: Schema) -> set[Path]:
        return set(self.leaves(value, schema))

    def _walk(self, value: Any, schema: Schema | None, path: Path, out: dict[Path, Any]) -> None:
        kind, sub, details, atomic = self.shape(schema)
        if value is None or kind == SCALAR or atomic:
            out[path] = value
            return
        if kind in (STRUCT, MAP) and isinstance(value, dict):
            for k, v in value.items():
                p = path + ("f:" + k,)
                if not v or not isinstance(v, (dict, list)):
                    # a scalar is a leaf whatever its schema says (the walk's every branch ends so); an empty
                    # map or list is owned as a field of its own (smd records f:env: {})
                    out[p] = v
                    continue
                self._walk(v, sub.get(k) if kind == STRUCT else sub, p, out)
                if kind == MAP and p not in out:
                    out[p] = _LEAF
            return
        if kind == LIST and isinstance(value, list):
            for item in value:
                pe = self.item_element(item, details, sub)
                if pe is None:
                    out[path] = value
                    return
                p = path + (pe,)
                if details[0] == "set":
                    out[p] = item
                    continue
                self._walk(item, sub, p, out)
                out[p] = _LEAF
            return
        out[path] = value

    def compare(self, old: Any, new: Any, schema: Schema) -> tuple[set[Path], set[Path], set[Path]]:
        """(added, removed, modified) from old to new (smd Compare)."""
        a, b = self.leaves(old, schema) if old is not None else {}, self.leaves(new, schema)
        added = b.keys() - a.keys()
        removed = a.keys() - b.keys()
        modified = {p for p in a.keys() & b.keys() if a[p] is not _LEAF and a[p] != b[p]}
        return set(added), set(removed), modified

    # Merge and removal ---------------------------------------------------------------------------------

    def merge(self, lhs: Any, rhs: Any, schema: Schema | None) -> Any:
        """rhs merged onto lhs: granular maps field by field, map- and set-lists item by item (shared items in
        rhs's order, lhs's own items kept in place), anything atomic replaced."""
        if rhs is None:
            return None
        kind, sub, details, atomic = self.shape(schema)
        if atomic or kind == SCALAR or lhs is None:
            return copy.deepcopy(rhs)
        if kind in (STRUCT, MAP):
            if not isinstance(lhs, dict) or not isinstance(rhs, dict):
                return copy.deepcopy(rhs)
            out = dict(lhs)
            for k, v in rhs.items():
                child = sub.get(k) if kind == STRUCT else sub
                if v is None:
                    out.pop(k, None)
                else:
                    out[k] = self.merge(lhs.get(k), v, child)
            return out
        if not isinstance(lhs, list) or not isinstance(rhs, list):
            return copy.deepcopy(rhs)
        lkeys = [self.item_element(x, details, sub) for x in lhs]
        rkeys = [self.item_element(x, details, sub) for x in rhs]
        if None in lkeys or None in rkeys:
            return copy.deepcopy(rhs)
        rindex = {k: i for i, k in enumerate(rkeys)}
        lindex = {k: i for i, k in enumerate(lkeys)}
        out_list: list[Any] = []
        done: set[str] = set()
        ri = 0

        def emit(i: int) -> None:
            k = rkeys[i]
            if k in done:
                return
            done.add(k)
            li = lindex.get(k)
            out_list.append(self.merge(lhs[li] if li is not None else None, rhs[i], sub))

        for li, k in enumerate(lkeys):
            if k in done:
                continue
            if k not in rindex:
                done.add(k)
                out_list.append(lhs[li])
                continue
            while ri < len(rkeys):
                emit(ri)
                ri += 1
                if rkeys[ri - 1] == k:
                    break
        while ri < len(rkeys):
            emit(ri)
            ri += 1
        return out_list

    def remove(self, value: Any, schema: Schema | None, paths: set[Path], path: Path = ()) -> Any:
        """value without the members at these paths (smd RemoveItems)."""
        if not paths:
            return value
        kind, sub, details, atomic = self.shape(schema)
        if atomic or kind == SCALAR:
            return value
        if kind in (STRUCT, MAP) and isinstance(value, dict):
            out = {}
            for k, v in value.items():
                p = path + ("f:" + k,)
                if p in paths:
                    continue
                out[k] = self.remove(v, sub.get(k) if kind == STRUCT else sub, paths, p)
            return out
        if kind == LIST and isinstance(value, list):
            items = []
            for item in value:
                pe = self.item_element(item, details, sub)
                if pe is None:
                    return value
                p = path + (pe,)
                if p in paths:
                    continue
                items.append(self.remove(item, sub, paths, p))
            return items
        return value


# FieldsV1 --------------------------------------------------------------------------------------------


def encode(paths: set[Path]) -> dict[str, Any]:
    """A set as FieldsV1 JSON: nested elements, "." marking a member that also has children."""
    tree: dict[str, Any] = {}
    for p in paths:  # in any order: _tidy sorts every level
        node = tree
        for pe in p:
            node = node.setdefault(pe, {})
        node["."] = {}
    return _tidy(tree)


def _tidy(node: dict[str, Any]) -> dict[str, Any]:
    children = {k: _tidy(v) for k, v in sorted(node.items()) if k != "."}
    if "." in node and children:
        return {".": {}, **children}
    return children


def decode(fields: Any, prefix: Path = ()) -> set[Path]:
    out: set[Path] = set()
    if not isinstance(fields, dict):
        return out
    for k, v in fields.items():
        if k == ".":
            continue
        p = prefix + (k,)
        if not isinstance(v, dict) or not v or "." in v:
            out.add(p)
        out |= decode(v, p)
    return out


def path_string(p: Path) -> str:
    """fieldpath.Path.String(): .data.key, .spec.ports[port=80,protocol="TCP"], .finalizers[="x"]."""
    parts = []
    for pe in p:
        tag, body = pe[:2], pe[2:]
        if tag == "f:":
            parts.append("." + body)
        elif tag == "k:":
            key = orjson.loads(body)
            parts.append("[" + ",".join(f"{k}={_json(v)}" for k, v in sorted(key.items())) + "]")
        elif tag == "v:":
            parts.append("[=" + body + "]")
        else:
            parts.append("[" + body + "]")
    return "".join(parts)
