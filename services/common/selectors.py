"""Label and field selectors with kube-apiserver's syntax and matching rules.

Label selectors follow k8s.io/apimachinery/pkg/labels (`a=b`, `a==b`, `a!=b`, `a`, `!a`,
`a in (b,c)`, `a notin (b)`, `a>1`, `a<1`); field selectors follow pkg/fields (`a=b`,
`a==b`, `a!=b`, with `\\`, `\\,` and `\\=` escapes in values). Parse errors are BadRequest.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from apiary_pb import envelope_pb2 as pb

from .errors import BadRequest

# Operators, as kube's selection.Operator names them.
EXISTS, DOES_NOT_EXIST = "exists", "!"
EQUALS, DOUBLE_EQUALS, NOT_EQUALS = "=", "==", "!="
IN, NOT_IN, GT, LT = "in", "notin", "gt", "lt"

_NAME_RE = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_DNS1123_SUBDOMAIN_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_INT_RE = re.compile(r"^-?[0-9]+$")


def _check_key(key: str) -> None:
    prefix, _, name = key.rpartition("/")
    if "/" in key and (not prefix or len(prefix) > 253 or not _DNS1123_SUBDOMAIN_RE.match(prefix)):
        raise BadRequest(
            f'unable to parse requirement: key: Invalid value: "{key}": prefix part must be '
            "a lowercase RFC 1123 subdomain"
        )
    if not name or len(name) > 63 or not _NAME_RE.match(name):
        raise BadRequest(
            f'unable to parse requirement: key: Invalid value: "{key}": name part must consist of '
            "alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric "
            "character, at most 63 characters"
        )


def _check_value(value: str) -> None:
    if value and (len(value) > 63 or not _NAME_RE.match(value)):
        raise BadRequest(
            f'unable to parse requirement: values[0]: Invalid value: "{value}": a valid label must be '
            "an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start "
            "and end with an alphanumeric character, at most 63 characters"
        )


@dataclass(frozen=True)
class Requirement:
    key: str
    op: str
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        op = self.op
        if op == EXISTS:
            return self.key in labels
        if op == DOES_NOT_EXIST:
            return self.key not in labels
        if op in (EQUALS, DOUBLE_EQUALS, IN):
            return self.key in labels and labels[self.key] in self.values
        if op in (NOT_EQUALS, NOT_IN):
            return self.key not in labels or labels[self.key] not in self.values
        value = labels.get(self.key)
        if value is None or not _INT_RE.match(value):
            return False
        return int(value) > int(self.values[0]) if op == GT else int(value) < int(self.values[0])

    def __str__(self) -> str:
        if self.op == EXISTS:
            return self.key
        if self.op == DOES_NOT_EXIST:
            return f"!{self.key}"
        if self.op in (IN, NOT_IN):
            return f"{self.key} {self.op} ({','.join(self.values)})"
        sign = {GT: ">", LT: "<"}.get(self.op, self.op)
        return f"{self.key}{sign}{self.values[0]}"


_LABEL_TOKEN_RE = re.compile(r"\s*(?:(?P<op>==|!=|=|!|>|<|\(|\)|,)|(?P<word>[^\s(),=!<>]+))")


def _label_tokens(text: str) -> list[str]:
    tokens, pos = [], 0
    while pos < len(text):
        m = _LABEL_TOKEN_RE.match(text, pos)
        if not m or m.end() == pos:
            if text[pos:].strip() == "":
                break
            raise BadRequest(f"unable to parse requirement: invalid selector: {text!r}")
        tokens.append(m.group("op") or m.group("word"))
        pos = m.end()
    return tokens


class LabelSelector:
    """A parsed label selector: every requirement must match."""

    def __init__(self, requirements: tuple[Requirement, ...] = ()) -> None:
        self.requirements = requirements

    @classmethod
    def parse(cls, text: str) -> LabelSelector:
        toks = _label_tokens(text)
        reqs: list[Requirement] = []
        i = 0

        def err(why: str) -> BadRequest:
            return BadRequest(f"unable to parse requirement: {why}: {text!r}")

        while i < len(toks):
            if toks[i] == "!":
                if i + 1 >= len(toks) or not _is_word(toks[i + 1]):
                    raise err("found '!', expected: identifier")
                _check_key(toks[i + 1])
                reqs.append(Requirement(toks[i + 1], DOES_NOT_EXIST))
                i += 2
            elif _is_word(toks[i]):
                key = toks[i]
                _check_key(key)
                i += 1
                op = toks[i] if i < len(toks) else ","
                if op == ",":
                    reqs.append(Requirement(key, EXISTS))
                elif op in ("=", "==", "!=", ">", "<"):
                    i += 1
                    value = toks[i] if i < len(toks) and _is_word(toks[i]) else ""
                    if value:
                        i += 1
                    if op in (">", "<"):
                        if not _INT_RE.match(value):
                            raise err(
                                f"for 'Gt', 'Lt' operators, the value must be an integer, got {value!r}"
                            )
                        reqs.append(Requirement(key, GT if op == ">" else LT, (value,)))
                    else:
                        _check_value(value)
                        reqs.append(Requirement(key, op, (value,)))
                elif op in ("in", "notin"):
                    i += 1
                    if i >= len(toks) or toks[i] != "(":
                        raise err("expected '(' after 'in'/'notin'")
                    i += 1
                    values: list[str] = []
                    expect_value = True
                    while i < len(toks) and toks[i] != ")":
                        t = toks[i]
                        if t == ",":
                            if expect_value:
                                values.append("")
                            expect_value = True
                        elif _is_word(t) and expect_value:
                            _check_value(t)
                            values.append(t)
                            expect_value = False
                        else:
                            raise err(f"unexpected {t!r} in value list")
                        i += 1
                    if i >= len(toks):
                        raise err("found end of string, expected ')'")
                    if expect_value and values:
                        values.append("")
                    if not values:
                        raise err("for 'in', 'notin' operators, values set can't be empty")
                    i += 1
                    reqs.append(Requirement(key, op, tuple(sorted(set(values)))))
                else:
                    raise err(f"found {op!r}, expected: '=', '!=', '==', 'in', notin'")
            else:
                raise err(f"found {toks[i]!r}, expected: !, identifier, or 'end of string'")
            if i < len(toks):
                if toks[i] != ",":
                    raise err(f"found {toks[i]!r}, expected: ',' or 'end of string'")
                i += 1
                if i >= len(toks):
                    raise err("found end of string, expected: identifier")
        return cls(tuple(reqs))

    @property
    def empty(self) -> bool:
        return not self.requirements

    def matches(self, labels: Mapping[str, str]) -> bool:
        return all(r.matches(labels) for r in self.requirements)

    def __str__(self) -> str:
        return ",".join(str(r) for r in self.requirements)


def _is_word(tok: str) -> bool:
    return tok not in ("==", "!=", "=", "!", ">", "<", "(", ")", ",")


@dataclass(frozen=True)
class FieldRequirement:
    field: str
    op: str  # "=" (also for "==") or "!="
    value: str

    def matches(self, fields: Mapping[str, str]) -> bool:
        equal = fields.get(self.field, "") == self.value
        return equal if self.op == EQUALS else not equal

    def __str__(self) -> str:
        return f"{self.field}{self.op}{escape_field_value(self.value)}"


def escape_field_value(value: str) -> str:
    return value.replace("\\", "\\\\").replace(",", "\\,").replace("=", "\\=")


def _split_unescaped(text: str, sep: str) -> list[str]:
    parts, cur, escaped = [], [], False
    for ch in text:
        if escaped:
            cur.append(ch)
            escaped = False
        elif ch == "\\":
            cur.append(ch)
            escaped = True
        elif ch == sep:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    parts.append("".join(cur))
    return parts


def _unescape(value: str, text: str) -> str:
    out, escaped = [], False
    for ch in value:
        if escaped:
            if ch not in "\\,=":
                raise BadRequest(f"invalid field selector: invalid escape sequence: {text!r}")
            out.append(ch)
            escaped = False
        elif ch == "\\":
            escaped = True
        elif ch in ",=":
            raise BadRequest(f"invalid field selector: unescaped {ch!r} in value: {text!r}")
        else:
            out.append(ch)
    if escaped:
        raise BadRequest(f"invalid field selector: invalid escape sequence: {text!r}")
    return "".join(out)


class FieldSelector:
    """A parsed field selector over an object's selectable fields."""

    def __init__(self, requirements: tuple[FieldRequirement, ...] = ()) -> None:
        self.requirements = requirements

    @classmethod
    def parse(cls, text: str) -> FieldSelector:
        if not text.strip():
            return cls()
        reqs = []
        for term in _split_unescaped(text, ","):
            if not term:
                continue
            for i in range(len(term)):
                rest = term[i:]
                op = next((o for o in ("!=", "==", "=") if rest.startswith(o)), None)
                if op:
                    field = term[:i].strip()
                    if not field:
                        raise BadRequest(f"invalid selector: '{text}'; can't understand '{term}'")
                    reqs.append(
                        FieldRequirement(
                            field, "!=" if op == "!=" else "=", _unescape(term[i + len(op) :], text)
                        )
                    )
                    break
            else:
                raise BadRequest(f"invalid selector: '{text}'; can't understand '{term}'")
        return cls(tuple(reqs))

    @property
    def empty(self) -> bool:
        return not self.requirements

    def matches(self, fields: Mapping[str, str]) -> bool:
        return all(r.matches(fields) for r in self.requirements)

    def exact(self, field: str) -> str | None:
        """The value an `=` requirement pins `field` to, if any (e.g. metadata.name)."""
        for r in self.requirements:
            if r.field == field and r.op == EQUALS:
                return r.value
        return None

    def __str__(self) -> str:
        return ",".join(str(r) for r in self.requirements)


def object_fields(obj: pb.Object) -> Mapping[str, str]:
    """The selectable fields: the registry's map, plus metadata.name/namespace when it left them out."""
    fields = obj.fields
    if "metadata.name" in fields and "metadata.namespace" in fields:
        return fields
    out = dict(fields)
    out.setdefault("metadata.name", obj.metadata.name)
    out.setdefault("metadata.namespace", obj.metadata.namespace)
    return out


class SelectionPredicate:
    """A label selector and a field selector applied together, as kube's storage.SelectionPredicate."""

    __slots__ = ("label", "field")

    def __init__(self, label: LabelSelector | None = None, field: FieldSelector | None = None) -> None:
        self.label = label or LabelSelector()
        self.field = field or FieldSelector()

    @classmethod
    def parse(cls, label_selector: str, field_selector: str) -> SelectionPredicate:
        return cls(LabelSelector.parse(label_selector), FieldSelector.parse(field_selector))

    @property
    def empty(self) -> bool:
        return self.label.empty and self.field.empty

    def matches(self, obj: pb.Object) -> bool:
        if not self.label.empty and not self.label.matches(obj.metadata.labels):
            return False
        return self.field.empty or self.field.matches(object_fields(obj))


_SELECTOR_OPS = {"In": IN, "NotIn": NOT_IN, "Exists": EXISTS, "DoesNotExist": DOES_NOT_EXIST}


def label_selector_from_dict(selector: Mapping[str, object] | None) -> LabelSelector:
    """A metav1.LabelSelector (matchLabels, matchExpressions) as a LabelSelector, like
    metav1.LabelSelectorAsSelector: an empty selector matches everything. Bad input is BadRequest."""
    if selector is None:
        return LabelSelector()
    if not isinstance(selector, Mapping):
        raise BadRequest("label selector: expected an object")
    reqs: list[Requirement] = []
    match_labels = selector.get("matchLabels") or {}
    if not isinstance(match_labels, Mapping):
        raise BadRequest("matchLabels: expected a map of strings")
    for key, value in match_labels.items():
        if not isinstance(value, str):
            raise BadRequest(f"matchLabels: value of {key!r}: expected a string")
        _check_key(str(key))
        _check_value(value)
        reqs.append(Requirement(str(key), EQUALS, (value,)))
    for expr in selector.get("matchExpressions") or []:  # type: ignore[union-attr]
        if not isinstance(expr, Mapping):
            raise BadRequest("matchExpressions: expected a list of objects")
        key, op = str(expr.get("key") or ""), str(expr.get("operator") or "")
        values = expr.get("values") or []
        if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
            raise BadRequest(f"matchExpressions: values of {key!r}: expected a list of strings")
        if op not in _SELECTOR_OPS:
            raise BadRequest(f'"{op}" is not a valid label selector operator')
        _check_key(key)
        if op in ("In", "NotIn") and not values:
            raise BadRequest("for 'in', 'notin' operators, values set can't be empty")
        if op in ("Exists", "DoesNotExist") and values:
            raise BadRequest("values set must be empty for exists and does not exist")
        for v in values:
            _check_value(v)
        reqs.append(Requirement(key, _SELECTOR_OPS[op], tuple(sorted(set(values)))))
    return LabelSelector(tuple(reqs))
