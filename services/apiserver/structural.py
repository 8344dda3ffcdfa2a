"""Structural schemas (apiextensions-apiserver's pkg/apiserver/schema): whether a CustomResourceDefinition's
openAPIV3Schema is structural, and what a custom object goes through with it -- pruning of unknown fields,
defaulting from `default`, and value validation with kube's field paths and messages.

A schema is the JSON form of JSONSchemaProps (a dict), as the CRD carries it; nothing here knows the CRD.
"""
from __future__ import annotations

import copy
import datetime
import ipaddress
import re
import uuid
from typing import Any

from .fielderrors import Cause, forbidden, invalid, not_supported, required, too_long, too_many

Schema = dict[str, Any]

PRESERVE = "x-kubernetes-preserve-unknown-fields"
INT_OR_STRING = "x-kubernetes-int-or-string"
EMBEDDED = "x-kubernetes-embedded-resource"
_TYPE_META = ("apiVersion", "kind", "metadata")


# Is a schema structural? -------------------------------------------------------------------------

def _child(path: str, key: str) -> str:
    return f"{path}.properties[{key}]"


def structural_errors(schema: Schema, path: str) -> list[Cause]:
    """kube's validateStructuralInvariants and the CRD validation's checks of a schema (the main rules):
    every type specified except under int-or-string or preserve-unknown-fields, object at the root,
    additionalProperties exclusive with properties, metadata restricted to name and generateName."""
    return _structural(schema, path, "root")


def _structural(s: Schema, path: str, level: str) -> list[Cause]:
    errs: list[Cause] = []
    if not isinstance(s, dict):
        return [invalid(path, str(s), "must be a schema object")]
    if "$ref" in s:
        errs.append(forbidden(f"{path}.$ref", "$ref is not supported"))
    if s.get("uniqueItems") is True:
        errs.append(forbidden(f"{path}.uniqueItems",
                              "uniqueItems cannot be set to true since the runtime complexity becomes quadratic"))
    props = s.get("properties") or {}
    extra = s.get("additionalProperties")
    if props and extra is not None and (extra is False or isinstance(extra, dict)):
        errs.append(forbidden(f"{path}.additionalProperties", "additionalProperties and properties are mutual exclusive"))
    if extra is not None and level == "root":
        errs.append(forbidden(f"{path}.additionalProperties", "must not be used at the root"))
    if s.get(INT_OR_STRING) and s.get(PRESERVE):
        errs.append(invalid(f"{path}.{PRESERVE}", True, "must be false if x-kubernetes-int-or-string is true"))
    typ = s.get("type") or ""
    embedded = bool(s.get(EMBEDDED))
    if embedded and typ != "object":
        msg = "must be object if x-kubernetes-embedded-resource is true"
        errs.append(required(f"{path}.type", msg) if not typ else invalid(f"{path}.type", typ, msg))
    elif not typ and not s.get(INT_OR_STRING) and not s.get(PRESERVE):
        errs.append(required(f"{path}.type", {"root": "must not be empty at the root",
                                              "item": "must not be empty for specified array items",
                                              "field": "must not be empty for specified object fields"}[level]))
    if level == "root" and typ and typ != "object":
        errs.append(invalid(f"{path}.type", typ, "must be object at the root"))
    check_meta = level == "root" or embedded
    for key, want in (("kind", "string"), ("apiVersion", "string"), ("metadata", "object")):
        sub = props.get(key)
        if check_meta and isinstance(sub, dict) and (sub.get("type") or "") != want:
            errs.append(invalid(f"{_child(path, key)}.type", sub.get("type") or "", f"must be {want}"))
    meta = props.get("metadata")
    if level == "root" and isinstance(meta, dict):
        rest = {k: v for k, v in meta.items() if k not in ("type", "default", "description")}
        names = set(rest.pop("properties", None) or {})
        if rest or not names <= {"name", "generateName"}:
            errs.append(forbidden(_child(path, "metadata"), "must not specify anything other than name and "
                                                            "generateName, but metadata is implicitly specified"))
    pattern = s.get("pattern")
    if isinstance(pattern, str):
        try:
            re.compile(pattern)
        except re.error as e:
            errs.append(invalid(f"{path}.pattern", pattern,
                                f"must be a valid regular expression, but isn't: {e}"))
    for key in sorted(props):
        errs += _structural(props[key], _child(path, key), "field")
    if isinstance(extra, dict):
        errs += _structural(extra, f"{path}.additionalProperties", "field")
    items = s.get("items")
    if isinstance(items, dict):
        errs += _structural(items, f"{path}.items", "item")
    elif typ == "array":
        errs.append(required(f"{path}.items", "must be specified"))
    return errs


# Pruning and defaulting -----------------------------------------------------------------------------

def prune(obj: Any, schema: Schema, root: bool = True) -> list[str]:
    """Drop the fields the schema does not specify (kube's structural pruning), in place; the paths dropped.
    apiVersion, kind and metadata stay at the root and in embedded resources."""
    dropped: list[str] = []
    _prune(obj, schema, "", root, dropped)
    return dropped


def _prune(value: Any, s: Schema, path: str, keep_meta: bool, dropped: list[str]) -> None:
    if isinstance(value, dict):
        props = s.get("properties")
        extra = s.get("additionalProperties")
        if props is None and isinstance(extra, dict):
            for k, v in value.items():
                _prune(v, extra, f"{path}.{k}" if path else k, False, dropped)
            return
        if props is None and (s.get(PRESERVE) or extra is True):
            return
        props = props or {}
        keep_meta = keep_meta or bool(s.get(EMBEDDED))
        for k in list(value):
            sub = f"{path}.{k}" if path else k
            if k in props:
                _prune(value[k], props[k], sub, False, dropped)
            elif keep_meta and k in _TYPE_META:
                continue
            elif not s.get(PRESERVE):
                del value[k]
                dropped.append(sub)
    elif isinstance(value, list) and isinstance(s.get("items"), dict):
        for i, v in enumerate(value):
            _prune(v, s["items"], f"{path}[{i}]", False, dropped)


def apply_defaults(value: Any, s: Schema) -> None:
    """Fill in `default` of every specified field missing from value, in place (kube's structural defaulting,
    after pruning; a default is itself pruned by the schema when the CRD is validated)."""
    if isinstance(value, dict):
        props = s.get("properties")
        if props is None:
            extra = s.get("additionalProperties")
            if isinstance(extra, dict):
                for v in value.values():
                    apply_defaults(v, extra)
            return
        for k, sub in props.items():
            if k not in value and "default" in sub:
                value[k] = copy.deepcopy(sub["default"])
            if k in value:
                apply_defaults(value[k], sub)
    elif isinstance(value, list) and isinstance(s.get("items"), dict):
        for v in value:
            apply_defaults(v, s["items"])


# Value validation -----------------------------------------------------------------------------------

_TYPE_NAMES = {bool: "boolean", str: "string", int: "integer", float: "number", dict: "object", list: "array"}


def _type_of(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, float) and value.is_integer():
        return "integer"
    return _TYPE_NAMES.get(type(value), "object")


def _has_type(typ: str, value: Any) -> bool:
    if typ == "string":
        return isinstance(value, str)
    if typ == "boolean":
        return isinstance(value, bool)
    if typ == "integer":
        return not isinstance(value, bool) and (isinstance(value, int) or isinstance(value, float)
                                                and value.is_integer())
    if typ == "number":
        return not isinstance(value, bool) and isinstance(value, (int, float))
    if typ == "object":
        return isinstance(value, dict)
    if typ == "array":
        return isinstance(value, list)
    return True


def _num(n: Any) -> str:
    """A bound as kube's messages print it (Go's %v of a float64: 1, 1.5, 1e+21)."""
    f = float(n)
    if f.is_integer() and abs(f) < 1e21:
        return str(int(f))
    return repr(f)


def _date_time(s: str) -> bool:
    try:
        datetime.datetime.fromisoformat(s)
    except ValueError:
        return False
    return "T" in s or "t" in s or " " in s


def _ip(version: int) -> Any:
    def check(s: str) -> bool:
        try:
            return ipaddress.ip_address(s).version == version
        except ValueError:
            return False
    return check


def _cidr(s: str) -> bool:
    try:
        ipaddress.ip_network(s, strict=False)
    except ValueError:
        return False
    return "/" in s


def _uuid(s: str) -> bool:
    try:
        uuid.UUID(s)
    except ValueError:
        return False
    return len(s) == 36


_FORMATS = {
    "date-time": _date_time,
    "datetime": _date_time,
    "date": lambda s: re.fullmatch(r"\d{4}-\d{2}-\d{2}", s) is not None and _date_time(s + "T00:00:00Z"),
    "uuid": _uuid,
    "ipv4": _ip(4),
    "ipv6": _ip(6),
    "cidr": _cidr,
    "email": lambda s: re.fullmatch(r"[^@\s]+@[^@\s]+\.[^@\s]+", s) is not None,
    "hostname": lambda s: re.fullmatch(r"(?=.{1,253}$)[A-Za-z0-9]([-A-Za-z0-9]{0,61}[A-Za-z0-9])?"
                                       r"(\.[A-Za-z0-9]([-A-Za-z0-9]{0,61}[A-Za-z0-9])?)*", s) is not None,
    "byte": lambda s: re.fullmatch(r"[A-Za-z0-9+/]*={0,2}", s) is not None and len(s) % 4 == 0,
    "mac": lambda s: re.fullmatch(r"([0-9A-Fa-f]{2}[:-]){5}[0-9A-Fa-f]{2}", s) is not None,
}


def validate(obj: Any, schema: Schema) -> list[Cause]:
    """kube's schema validation of a custom object (its openAPIV3Schema), with its field paths and messages.
    The root's apiVersion, kind and metadata are the generic validation's, not the schema's."""
    errs: list[Cause] = []
    if isinstance(obj, dict):
        props = schema.get("properties") or {}
        for k in schema.get("required") or ():
            if k not in obj and k not in _TYPE_META:
                errs.append(required(k))
        for k, v in obj.items():
            if k in props and k not in _TYPE_META:
                _validate(v, props[k], k, errs)
    return errs


def _validate(value: Any, s: Schema, path: str, errs: list[Cause]) -> None:
    typ = s.get("type") or ""
    if value is None:
        if not s.get("nullable") and typ:
            errs.append(invalid(path, "null", f'{path} in body must be of type {typ}: "null"'))
        return
    if s.get(INT_OR_STRING):
        if not (isinstance(value, str) or _has_type("integer", value)):
            got = _type_of(value)
            errs.append(invalid(path, got, f'{path} in body must be of type integer,string: "{got}"'))
            return
    elif typ and not _has_type(typ, value):
        got = _type_of(value)
        errs.append(invalid(path, got, f'{path} in body must be of type {typ}: "{got}"'))
        return
    enum = s.get("enum")
    if enum is not None and value not in enum:
        errs.append(not_supported(path, value, enum))
    if isinstance(value, str):
        _validate_string(value, s, path, errs)
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        _validate_number(value, s, path, errs)
    elif isinstance(value, list):
        if "maxItems" in s and len(value) > s["maxItems"]:
            errs.append(too_many(path, len(value), s["maxItems"]))
        if "minItems" in s and len(value) < s["minItems"]:
            errs.append(invalid(path, len(value), f"{path} in body should have at least {s['minItems']} items"))
        items = s.get("items")
        if isinstance(items, dict):
            for i, v in enumerate(value):
                _validate(v, items, f"{path}[{i}]", errs)
    elif isinstance(value, dict):
        if "maxProperties" in s and len(value) > s["maxProperties"]:
            errs.append(too_many(path, len(value), s["maxProperties"]))
        if "minProperties" in s and len(value) < s["minProperties"]:
            errs.append(invalid(path, len(value),
                                f"{path} in body should have at least {s['minProperties']} properties"))
        props = s.get("properties")
        for k in s.get("required") or ():
            if k not in value:
                errs.append(required(f"{path}.{k}"))
        if props is not None:
            for k, v in value.items():
                if k in props:
                    _validate(v, props[k], f"{path}.{k}", errs)
        elif isinstance(s.get("additionalProperties"), dict):
            for k, v in value.items():
                _validate(v, s["additionalProperties"], f"{path}[{k}]", errs)


def _validate_string(value: str, s: Schema, path: str, errs: list[Cause]) -> None:
    if "maxLength" in s and len(value) > s["maxLength"]:
        errs.append(too_long(path, s["maxLength"]))
    if "minLength" in s and len(value) < s["minLength"]:
        errs.append(invalid(path, value, f"{path} in body should be at least {s['minLength']} chars long"))
    pattern = s.get("pattern")
    if pattern and re.search(pattern, value) is None:
        errs.append(invalid(path, value, f"{path} in body should match '{pattern}'"))
    fmt = s.get("format")
    check = _FORMATS.get(fmt or "")
    if check is not None and not check(value):
        errs.append(invalid(path, value, f'{path} in body must be of type {fmt}: "{value}"'))


def _validate_number(value: float, s: Schema, path: str, errs: list[Cause]) -> None:
    if "minimum" in s:
        if s.get("exclusiveMinimum") and value <= s["minimum"]:
            errs.append(invalid(path, value, f"{path} in body should be greater than {_num(s['minimum'])}"))
        elif value < s["minimum"]:
            errs.append(invalid(path, value,
                                f"{path} in body should be greater than or equal to {_num(s['minimum'])}"))
    if "maximum" in s:
        if s.get("exclusiveMaximum") and value >= s["maximum"]:
            errs.append(invalid(path, value, f"{path} in body should be less than {_num(s['maximum'])}"))
        elif value > s["maximum"]:
            errs.append(invalid(path, value, f"{path} in body should be less than or equal to {_num(s['maximum'])}"))
    step = s.get("multipleOf")
    if step and (value / step) != int(value / step):
        errs.append(invalid(path, value, f"{path} in body should be a multiple of {_num(step)}"))
