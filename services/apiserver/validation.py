"""Name, label, annotation and ObjectMeta rules with kube-apiserver's exact messages.

A cause is {"reason", "message", "field"} as it appears in Status.details.causes.
"""
from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from services.apiserver.fielderrors import (
    Cause,
    duplicate,
    forbidden,
    immutable,
    invalid,
    invalid_go,
    not_found,
    not_supported,
    quote,
    required,
    too_long,
)

NameValidator = Callable[[str], list[str]]

DNS1123_LABEL_MAX = 63
DNS1123_SUBDOMAIN_MAX = 253
DNS1035_LABEL_MAX = 63
QUALIFIED_NAME_MAX = 63
LABEL_VALUE_MAX = 63
TOTAL_ANNOTATION_SIZE = 256 * 1024

_DNS1123_LABEL = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS1123_SUBDOMAIN = _DNS1123_LABEL + r"(\." + _DNS1123_LABEL + ")*"
_DNS1035_LABEL = "[a-z]([-a-z0-9]*[a-z0-9])?"
_QUALIFIED_NAME = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
_LABEL_VALUE = "(" + _QUALIFIED_NAME + ")?"
_CONFIG_KEY = "[-._a-zA-Z0-9]+"

_RE = {k: re.compile("^" + v + "$") for k, v in (
    ("label", _DNS1123_LABEL), ("subdomain", _DNS1123_SUBDOMAIN), ("dns1035", _DNS1035_LABEL),
    ("qualified", _QUALIFIED_NAME), ("value", _LABEL_VALUE), ("config", _CONFIG_KEY),
)}


def _regex_error(msg: str, fmt: str, *examples: str) -> str:
    s = msg + " ("
    if examples:
        s += "e.g. " + ",  or ".join(f"'{e}'" for e in examples) + ", "
    return s + "regex used for validation is '" + fmt + "')"


def max_len_error(n: int) -> str:
    return f"must be no more than {n} characters"


def is_dns1123_label(value: str) -> list[str]:
    errs = []
    if len(value) > DNS1123_LABEL_MAX:
        errs.append(max_len_error(DNS1123_LABEL_MAX))
    if not _RE["label"].match(value):
        errs.append(_regex_error("a lowercase RFC 1123 label must consist of lower case alphanumeric characters "
                                 "or '-', and must start and end with an alphanumeric character",
                                 _DNS1123_LABEL, "my-name", "123-abc"))
    return errs


def is_dns1123_subdomain(value: str) -> list[str]:
    errs = []
    if len(value) > DNS1123_SUBDOMAIN_MAX:
        errs.append(max_len_error(DNS1123_SUBDOMAIN_MAX))
    if not _RE["subdomain"].match(value):
        errs.append(_regex_error("a lowercase RFC 1123 subdomain must consist of lower case alphanumeric "
                                 "characters, '-' or '.', and must start and end with an alphanumeric character",
                                 _DNS1123_SUBDOMAIN, "example.com"))
    return errs


def is_dns1035_label(value: str) -> list[str]:
    errs = []
    if len(value) > DNS1035_LABEL_MAX:
        errs.append(max_len_error(DNS1035_LABEL_MAX))
    if not _RE["dns1035"].match(value):
        errs.append(_regex_error("a DNS-1035 label must consist of lower case alphanumeric characters or '-', "
                                 "start with an alphabetic character, and end with an alphanumeric character",
                                 _DNS1035_LABEL, "my-name", "abc-123"))
    return errs


def is_qualified_name(value: str) -> list[str]:
    errs: list[str] = []
    parts = value.split("/")
    if len(parts) == 1:
        name = parts[0]
    elif len(parts) == 2:
        prefix, name = parts
        if not prefix:
            errs.append("prefix part " + "must be non-empty")
        else:
            errs.extend("prefix part " + m for m in is_dns1123_subdomain(prefix))
    else:
        return [_regex_error("a qualified name must consist of alphanumeric characters, '-', '_' or '.', and must "
                             "start and end with an alphanumeric character", _QUALIFIED_NAME,
                             "MyName", "my.name", "123-abc")
                + " with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"]
    if not name:
        errs.append("name part must be non-empty")
    elif len(name) > QUALIFIED_NAME_MAX:
        errs.append("name part " + max_len_error(QUALIFIED_NAME_MAX))
    if name and not _RE["qualified"].match(name):
        errs.append("name part " + _regex_error(
            "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an "
            "alphanumeric character", _QUALIFIED_NAME, "MyName", "my.name", "123-abc"))
    return errs


def is_valid_label_value(value: str) -> list[str]:
    errs = []
    if len(value) > LABEL_VALUE_MAX:
        errs.append(max_len_error(LABEL_VALUE_MAX))
    if not _RE["value"].match(value):
        errs.append(_regex_error("a valid label must be an empty string or consist of alphanumeric characters, "
                                 "'-', '_' or '.', and must start and end with an alphanumeric character",
                                 _LABEL_VALUE, "MyValue", "my_value", "12345"))
    return errs


def is_config_map_key(value: str) -> list[str]:
    errs = []
    if len(value) > DNS1123_SUBDOMAIN_MAX:
        errs.append(max_len_error(DNS1123_SUBDOMAIN_MAX))
    if not _RE["config"].match(value):
        errs.append(_regex_error("a valid config key must consist of alphanumeric characters, '-', '_' or '.'",
                                 _CONFIG_KEY, "key.name", "KEY_NAME", "key-name"))
    if value == ".":
        errs.append("must not be '.'")
    elif value == "..":
        errs.append("must not be '..'")
    elif value.startswith(".."):
        errs.append("must not start with '..'")
    return errs


def is_valid_path_segment_name(value: str) -> list[str]:
    if value in (".", ".."):
        return [f"may not be '{value}'"]
    errs = []
    for bad in ("/", "%"):
        if bad in value:
            errs.append(f"may not contain '{bad}'")
    return errs


# Causes ------------------------------------------------------------------------


def int_or_string_go(value: Any) -> str:
    """intstr.IntOrString as Go's %#v prints it in kube's messages."""
    if isinstance(value, int) and not isinstance(value, bool):
        return f'intstr.IntOrString{{Type:0, IntVal:{value}, StrVal:""}}'
    return f"intstr.IntOrString{{Type:1, IntVal:0, StrVal:{quote(str(value))}}}"


def one_of(field: str, value: Any, allowed: list[str]) -> list[Cause]:
    """An enum field kube requires: Required when empty, NotSupported when not one of allowed."""
    if not value:
        return [required(field)]
    return [] if value in allowed else [not_supported(field, value, allowed)]


def unique_name(field: str, name: str, seen: set[str], rules: NameValidator) -> list[Cause]:
    """A list item's name: required, valid by rules (is_dns1123_label...), and not one seen earlier in the list;
    seen takes it."""
    if not name:
        return [required(field)]
    causes = [invalid(field, name, m) for m in rules(name)]
    if name in seen:
        causes.append(duplicate(field, name))
    seen.add(name)
    return causes


# ObjectMeta --------------------------------------------------------------------


def validate_labels(labels: dict[str, str], field: str = "metadata.labels") -> list[Cause]:
    causes = []
    for k, v in labels.items():
        causes.extend(invalid(field, k, m) for m in is_qualified_name(k))
        causes.extend(invalid(field, v, m) for m in is_valid_label_value(v))
    return causes


def validate_annotations(annotations: dict[str, str], field: str = "metadata.annotations") -> list[Cause]:
    causes = []
    total = 0
    for k, v in annotations.items():
        causes.extend(invalid(field, k, m) for m in is_qualified_name(k.lower()))
        total += len(k) + len(v)
    if total > TOTAL_ANNOTATION_SIZE:
        causes.append(too_long(field, TOTAL_ANNOTATION_SIZE))
    return causes


STANDARD_FINALIZERS = {"kubernetes", "orphan", "foregroundDeletion"}


def validate_finalizer_name(name: str, field: str) -> list[Cause]:
    causes = [invalid(field, name, m) for m in is_qualified_name(name)]
    if not causes and name not in STANDARD_FINALIZERS and "/" not in name:
        causes.append(invalid(field, name, "name is neither a standard finalizer name nor is it fully qualified"))
    return causes


def validate_object_meta(meta: dict[str, Any], namespaced: bool, name_validator: NameValidator) -> list[Cause]:
    causes: list[Cause] = []
    name = meta.get("name") or ""
    generate_name = meta.get("generateName") or ""
    if generate_name:
        # validated as a prefix (kube's nameFn(generateName, true): a trailing dash masked), length included
        prefix = generate_name[:-1] + "a" if generate_name.endswith("-") else generate_name
        causes.extend(invalid("metadata.generateName", generate_name, m) for m in name_validator(prefix))
    if not name:
        causes.append(required("metadata.name", "name or generateName is required"))
    else:
        causes.extend(invalid("metadata.name", name, m) for m in name_validator(name))
    ns = meta.get("namespace") or ""
    if namespaced:
        if not ns:
            causes.append(required("metadata.namespace"))
        else:
            causes.extend(invalid("metadata.namespace", ns, m) for m in is_dns1123_label(ns))
    elif ns:
        causes.append(forbidden("metadata.namespace", "not allowed on this type"))
    gen = meta.get("generation")
    if isinstance(gen, int) and gen < 0:
        causes.append(invalid("metadata.generation", gen, "must be greater than or equal to 0"))
    causes.extend(validate_labels(meta.get("labels") or {}))
    causes.extend(validate_annotations(meta.get("annotations") or {}))
    for i, f in enumerate(meta.get("finalizers") or []):
        causes.extend(validate_finalizer_name(f, f"metadata.finalizers[{i}]"))
    for i, ref in enumerate(meta.get("ownerReferences") or []):
        base = f"metadata.ownerReferences[{i}]"
        for key, what in (("apiVersion", "version"), ("kind", "kind"), ("name", "name"), ("uid", "uid")):
            if not ref.get(key):
                causes.append(invalid(f"{base}.{key}", ref.get(key) or "", f"{what} must not be empty"))
    return causes


def validate_object_meta_update(meta: dict[str, Any], old: dict[str, Any]) -> list[Cause]:
    causes: list[Cause] = []
    for key in ("name", "namespace", "uid", "creationTimestamp"):
        if (meta.get(key) or "") != (old.get(key) or ""):
            causes.append(immutable(f"metadata.{key}", meta.get(key) or ""))
    if old.get("deletionTimestamp"):
        # ValidateNoNewFinalizers: an object being deleted only loses finalizers
        extra = sorted(set(meta.get("finalizers") or ()) - set(old.get("finalizers") or ()))
        if extra:
            found = "[]string{" + ", ".join(quote(f) for f in extra) + "}"
            causes.append(forbidden("metadata.finalizers", "no new finalizers can be added if the object is being "
                                                           f"deleted, found new finalizers {found}"))
    return causes
