"""Field errors as k8s.io/apimachinery's util/validation/field makes and prints them.

One vocabulary for the causes of an API's 422 (the built-in kinds' strategies, the kit's kinds) and for
the messages of configuration files (authentication, authorization, audit webhooks), so that Go's %q
and kube's "<field>: <Type>: <value>: <detail>" are written once.
"""
from __future__ import annotations

from collections.abc import Iterable
from typing import Any

# metav1.StatusCause, as it appears in Status.details.causes: {"reason", "message", "field"}.
Cause = dict[str, str]

_ESCAPES = {"\a": "\\a", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\v": "\\v",
            '"': '\\"', "\\": "\\\\"}


def quote(s: str) -> str:
    """Go's %q of a string (strconv.Quote): printable characters as they are (Python's isprintable is
    Go's unicode.IsPrint), the rest escaped as Go escapes them."""
    if s.isascii() and s.isprintable() and '"' not in s and "\\" not in s:
        return f'"{s}"'
    out = []
    for c in s:
        if c in _ESCAPES:
            out.append(_ESCAPES[c])
        elif c.isprintable():
            out.append(c)
        elif ord(c) < 0x80:
            out.append(f"\\x{ord(c):02x}")
        elif ord(c) < 0x10000:
            out.append(f"\\u{ord(c):04x}")
        else:
            out.append(f"\\U{ord(c):08x}")
    return '"' + "".join(out) + '"'


def quote_list(values: Iterable[str]) -> str:
    """Go's %q of a []string: ["a" "b"]."""
    return "[" + " ".join(quote(v) for v in values) + "]"


def show(value: Any) -> str:
    """A bad value as field.Error prints it: a string quoted, a bool and a nil as Go writes them."""
    if isinstance(value, str):
        return quote(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    return str(value)


def invalid(field: str, value: Any, detail: str) -> Cause:
    msg = f"Invalid value: {show(value)}"
    return {"reason": "FieldValueInvalid", "message": f"{msg}: {detail}" if detail else msg, "field": field}


def invalid_go(field: str, rendered: str, detail: str) -> Cause:
    """field.Invalid for a value kube prints with Go's %#v (a struct, a nil slice), `rendered`."""
    return {"reason": "FieldValueInvalid", "message": f"Invalid value: {rendered}: {detail}", "field": field}


def required(field: str, detail: str = "") -> Cause:
    return {"reason": "FieldValueRequired",
            "message": f"Required value: {detail}" if detail else "Required value", "field": field}


def forbidden(field: str, detail: str) -> Cause:
    return {"reason": "FieldValueForbidden", "message": f"Forbidden: {detail}", "field": field}


def too_long(field: str, limit: int) -> Cause:
    return {"reason": "FieldValueTooLong", "message": f"Too long: must have at most {limit} bytes",
            "field": field}


def too_many(field: str, actual: int, limit: int) -> Cause:
    return {"reason": "FieldValueTooMany", "message": f"Too many: {actual}: must have at most {limit} items",
            "field": field}


def not_supported(field: str, value: Any, allowed: Iterable[str]) -> Cause:
    opts = ", ".join(show(a) for a in allowed)
    return {"reason": "FieldValueNotSupported",
            "message": f"Unsupported value: {show(value)}: supported values: {opts}", "field": field}


def duplicate(field: str, value: Any) -> Cause:
    return {"reason": "FieldValueDuplicate", "message": f"Duplicate value: {show(value)}", "field": field}


def not_found(field: str, value: Any) -> Cause:
    return {"reason": "FieldValueNotFound", "message": f"Not found: {show(value)}", "field": field}


def immutable(field: str, value: Any) -> Cause:
    return invalid(field, value, "field is immutable")


def error_text(cause: Cause) -> str:
    """field.Error's Error(): the field, then the message."""
    return f"{cause['field']}: {cause['message']}"


class FieldErrors(list[Cause]):
    """A field.ErrorList being collected; str() is utilerrors.NewAggregate's text of it."""

    def invalid(self, field: str, value: Any, detail: str) -> None:
        self.append(invalid(field, value, detail))

    def required(self, field: str, detail: str = "") -> None:
        self.append(required(field, detail))

    def duplicate(self, field: str, value: Any) -> None:
        self.append(duplicate(field, value))

    def not_supported(self, field: str, value: Any, supported: list[str]) -> None:
        self.append(not_supported(field, value, supported))

    def forbidden(self, field: str, detail: str) -> None:
        self.append(forbidden(field, detail))

    def too_many(self, field: str, actual: int, limit: int) -> None:
        self.append(too_many(field, actual, limit))

    def __str__(self) -> str:
        if len(self) == 1:
            return error_text(self[0])
        return "[" + ", ".join(error_text(c) for c in self) + "]"


class ConfigError(ValueError):
    """A configuration file that cannot be used; str() is the message kube would print."""


def field_path(loc: Iterable[str | int]) -> str:
    """A pydantic error location as kube writes a field path: authorizers[1].webhook.timeout."""
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else f".{part}" if out else str(part)
    return out


# pydantic's error types, as the Go type encoding/json names in "cannot unmarshal X into ... of type T".
_GO_TYPES = {"string_type": "string", "bool_type": "bool", "int_type": "int", "int_from_float": "int",
             "float_type": "float64", "list_type": "slice", "dict_type": "map", "model_type": "struct",
             "model_attributes_type": "struct"}


def _json_type(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, (list, tuple)):
        return "array"
    return "object" if isinstance(value, dict) else "null"


def decoding_error(errors: list[dict[str, Any]]) -> str:
    """pydantic's errors (ValidationError.errors()) as kube's decoder words them: a value of the wrong
    type as encoding/json's first one, otherwise the unknown fields as its strict decoding error."""
    for e in errors:
        if e["type"] in _GO_TYPES:
            return (f"json: cannot unmarshal {_json_type(e['input'])} into Go struct field "
                    f"{field_path(e['loc'])} of type {_GO_TYPES[e['type']]}")
    unknown = [f"unknown field {quote(field_path(e['loc']))}" for e in errors if e["type"] == "extra_forbidden"]
    if unknown:
        return "strict decoding error: " + ", ".join(unknown)
    return "; ".join(f"{field_path(e['loc'])}: {e['msg']}" for e in errors)
