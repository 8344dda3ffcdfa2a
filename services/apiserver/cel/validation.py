"""x-kubernetes-validations evaluated against a custom object (schema/cel's Validator): at every node of the
schema that declares rules, `self` is the value there and `oldSelf` the correlated old value (object fields
by name, map values by key, items of x-kubernetes-list-type=map lists by their keys); a transition rule is
skipped where there is no old value unless it sets optionalOldSelf, which makes oldSelf an optional. Other
rules are not run on a value an update left unchanged (kube's CRD validation ratcheting). One request spends
at most kube's runtime cost budget."""
from __future__ import annotations

import re
from typing import Any

import cel as celrs

from services.common import cel

from ..fielderrors import Cause, duplicate, forbidden, invalid, required
from . import cost as costs
from .compilation import CompiledSchema, Rule

# apiserver's cel: property names a rule reaches escaped, reserved words wrapped in underscores
_RESERVED = frozenset({"true", "false", "null", "in", "as", "break", "const", "continue", "else", "for",
                       "function", "if", "import", "let", "loop", "package", "namespace", "return", "var",
                       "void", "while"})
_PLAIN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_ESCAPES = (("__", "__underscores__"), (".", "__dot__"), ("-", "__dash__"), ("/", "__slash__"))
# Per evaluation, a rule whose estimate from the schema is at most this is charged that estimate; a dearer
# one is estimated again with the value's actual sizes (what cel-go's runtime cost tracker counts).
_CHEAP = 1000
OUT_OF_BUDGET = "validation failed due to running out of cost budget, no further validation rules will be run"


def escape(name: str) -> str:
    if name in _RESERVED:
        return f"__{name}__"
    if "__" not in name and _PLAIN.fullmatch(name):
        return name
    for old, new in _ESCAPES:
        name = name.replace(old, new)
    return name


def to_cel(value: Any, schema: dict[str, Any]) -> Any:
    """The value as a rule sees it: object property names escaped as kube escapes them."""
    if isinstance(value, dict):
        props = schema.get("properties")
        extra = schema.get("additionalProperties")
        if props is not None:
            return {escape(k): to_cel(v, props.get(k) or {}) for k, v in value.items()}
        if isinstance(extra, dict):
            return {k: to_cel(v, extra) for k, v in value.items()}
        return value
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        return [to_cel(v, schema["items"]) for v in value]
    return value


def _projected(value: Any, schema: dict[str, Any], fields: frozenset[str] | None) -> Any:
    """The value as the node's rules see it, an object cut to the fields they select: cel-rust converts a
    value field by field, which costs more than the rules' evaluation."""
    if fields is None or not isinstance(value, dict) or schema.get("properties") is None:
        return to_cel(value, schema)
    props = schema["properties"]
    return {name: to_cel(v, props.get(k) or {}) for k, v in value.items() if (name := escape(k)) in fields}


class _Budget:
    __slots__ = ("remaining",)

    def __init__(self, remaining: int) -> None:
        self.remaining = remaining


class _OutOfBudget(Exception):
    pass


def _rule_error_string(rule: Rule) -> str:
    """ruleErrorString: how evaluation errors name the rule."""
    return rule.message or rule.rule.strip()


def _rule_message_or_default(rule: Rule) -> str:
    """ruleMessageOrDefault: the detail of a rule that evaluated to false."""
    return rule.message or f"failed rule: {rule.rule.strip()}"


def _cause(path: str, typ: str, detail: str, reason: str) -> Cause:
    """fieldErrorForReason."""
    if reason == "FieldValueForbidden":
        return forbidden(path, detail)
    if reason == "FieldValueRequired":
        return required(path, detail)
    if reason == "FieldValueDuplicate":
        return duplicate(path, typ)
    return invalid(path, typ, detail)


def _join(path: str, field_path: str) -> str:
    if not field_path:
        return path or "<nil>"
    if not path:
        return field_path
    return f"{path}{field_path}" if field_path.startswith("[") else f"{path}.{field_path}"


class Validator:
    """The compiled rules of one served version, evaluated per request."""

    def __init__(self, compiled: CompiledSchema) -> None:
        self.compiled = compiled

    def validate(self, obj: Any, old: Any = None, budget: int = costs.RUNTIME_CEL_COST_BUDGET) -> list[Cause]:
        causes: list[Cause] = []
        try:
            self._walk(self.compiled, "", obj, old, old is not None, _Budget(budget), causes)
        except _OutOfBudget:
            pass
        return causes

    def _walk(self, node: CompiledSchema, path: str, value: Any, old: Any, has_old: bool, budget: _Budget,
              causes: list[Cause]) -> None:
        if value is None:
            return
        if node.rules:
            self._evaluate(node, path, value, old, has_old, budget, causes)
        if isinstance(value, dict):
            old_map = old if has_old and isinstance(old, dict) else None
            for key, child in node.properties.items():
                if key in value:
                    self._walk(child, f"{path}.{key}" if path else key, value[key],
                               old_map.get(key) if old_map else None, bool(old_map) and key in old_map,
                               budget, causes)
            if node.additional is not None and not node.properties:
                for key, v in value.items():
                    self._walk(node.additional, f"{path}[{key}]", v, old_map.get(key) if old_map else None,
                               bool(old_map) and key in old_map, budget, causes)
        elif isinstance(value, list) and node.items is not None:
            olds = self._correlate(node.schema, value, old if has_old and isinstance(old, list) else None)
            for i, v in enumerate(value):
                prior = olds.get(i, _MISSING)
                self._walk(node.items, f"{path}[{i}]", v, None if prior is _MISSING else prior,
                           prior is not _MISSING, budget, causes)

    @staticmethod
    def _correlate(schema: dict[str, Any], value: list[Any], old: list[Any] | None) -> dict[int, Any]:
        """Old items of an x-kubernetes-list-type=map list by the new items' keys; none for other lists."""
        keys = schema.get("x-kubernetes-list-map-keys") or []
        if old is None or schema.get("x-kubernetes-list-type") != "map" or not keys:
            return {}

        def key(item: Any) -> Any:
            return tuple(repr(item.get(k)) for k in keys) if isinstance(item, dict) else None
        by_key = {key(o): o for o in old}
        return {i: by_key[key(v)] for i, v in enumerate(value) if key(v) in by_key}

    def _evaluate(self, node: CompiledSchema, path: str, value: Any, old: Any, has_old: bool, budget: _Budget,
                  causes: list[Cause]) -> None:
        typ = str(node.schema.get("type") or "")
        field = path or "<nil>"
        if budget.remaining <= 0:
            causes.append(invalid(field, typ, OUT_OF_BUDGET))
            raise _OutOfBudget
        activations: dict[bool, Any] = {}
        fields = node.fields
        for rule in node.rules:
            if rule.transition and not has_old and not rule.optional_old_self:
                continue
            if not rule.transition and has_old and value == old:
                continue  # validation ratcheting: an unchanged value keeps passing the rules it passed
            optional = rule.optional_old_self
            if optional not in activations:
                self_value = _projected(value, node.schema, fields)
                old_value: Any = _projected(old, node.schema, fields) if has_old else None
                if optional:
                    old_value = celrs.OptionalValue.of(old_value) if has_old else celrs.OptionalValue.none()
                activations[optional] = cel.activation({"self": self_value, "oldSelf": old_value},
                                                       node.functions)
            act = activations[optional]
            spent = rule.cost
            if spent > _CHEAP and rule.ast is not None:
                shape = costs.Shape.of(node.schema, value)
                spent = costs.Estimator({"self": shape, "oldSelf": costs.Shape.of(node.schema, old)}).cost(rule.ast)
            if spent > costs.PER_CALL_LIMIT:
                causes.append(invalid(field, typ, "'operation cancelled: actual cost limit exceeded': no further "
                                                  "validation rules will be run due to call cost exceeds limit "
                                                  f"for rule: {_rule_error_string(rule)}"))
                raise _OutOfBudget
            if spent > budget.remaining:
                causes.append(invalid(field, typ, OUT_OF_BUDGET))
                raise _OutOfBudget
            budget.remaining -= spent
            try:
                result = rule.program.evaluate(act)
            except cel.CELEvalError as e:
                text = str(e)
                if text.startswith("no such overload"):
                    detail = (f"'{text}': call arguments did not match a supported operator, function or macro "
                              f"signature for rule: {_rule_error_string(rule)}")
                else:
                    detail = f"{text} evaluating rule: {_rule_error_string(rule)}"
                causes.append(invalid(field, typ, detail))
                continue
            if result is True:
                continue
            if result is not False:
                causes.append(invalid(field, typ, f"rule did not evaluate to a bool: {_rule_message_or_default(rule)}"))
                continue
            if rule.message_program is not None:
                if rule.message_cost > budget.remaining:
                    causes.append(invalid(field, typ, "messageExpression evaluation failed due to running out of "
                                                      "cost budget, no further validation rules will be run"))
                    raise _OutOfBudget
                budget.remaining -= rule.message_cost
            causes.append(_cause(_join(path, rule.field_path), typ, self._message(rule, act), rule.reason))

    @staticmethod
    def _message(rule: Rule, act: Any) -> str:
        """messageExpression's result when it gives a non-empty single line, else message, else the rule."""
        if rule.message_program is not None:
            try:
                text = rule.message_program.evaluate(act)
            except cel.CELEvalError:
                text = None
            if isinstance(text, str) and text.strip() and "\n" not in text and "\r" not in text:
                return text.strip()
        return _rule_message_or_default(rule)


_MISSING = object()
