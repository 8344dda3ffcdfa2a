"""x-kubernetes-validations compiled once per schema (a CRD version), and the CRD validation's causes for
them (apiextensions' validateSchema and schema/cel's Compile): the rule's own fields, compilation with
`self` and `oldSelf` declared, the estimated cost against kube's limits, transition rules where old and new
values cannot be correlated."""
from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from typing import Any

from services.common import cel

from ..fielderrors import Cause, forbidden, invalid, invalid_go, not_supported, quote, required
from . import cost as costs
from .parser import Node, parse

Schema = dict[str, Any]
XVALIDATIONS = "x-kubernetes-validations"
VARIABLES = ("self", "oldSelf")
REASONS = ("FieldValueDuplicate", "FieldValueForbidden", "FieldValueInvalid", "FieldValueRequired")
_NEWLINES = re.compile(r"[\n\r]+")


@dataclass
class Rule:
    """One compiled x-kubernetes-validations entry."""
    rule: str
    program: cel.Program
    ast: Node | None
    message: str = ""
    message_program: cel.Program | None = None
    reason: str = ""
    field_path: str = ""
    transition: bool = False
    optional_old_self: bool = False
    cost: int = 0  # the estimated cost of one evaluation, from the schema's bounds
    message_cost: int = 0  # the same for messageExpression
    # the fields of self and oldSelf the rule and its messageExpression select (None: the values themselves)
    fields: frozenset[str] | None = None


@dataclass
class CompiledSchema:
    """A schema node with its compiled rules and the compiled nodes below it that carry any."""
    schema: Schema
    rules: list[Rule] = field(default_factory=list)
    properties: dict[str, CompiledSchema] = field(default_factory=dict)
    additional: CompiledSchema | None = None
    items: CompiledSchema | None = None

    @property
    def empty(self) -> bool:
        return not (self.rules or self.properties or self.additional or self.items)

    @functools.cached_property
    def functions(self) -> dict[str, Any]:
        """The functions of kube's library (cel.KUBE_LIBRARY) the node's rules call: only these are given to
        each evaluation's activation."""
        names = {f for rule in self.rules for p in (rule.program, rule.message_program) if p is not None
                 for f in p.functions()}
        return {name: fn for name, fn in cel.KUBE_LIBRARY.items() if name in names}

    @functools.cached_property
    def fields(self) -> frozenset[str] | None:
        """The fields of self and oldSelf the node's rules select (None: some rule needs the whole value)."""
        out: frozenset[str] = frozenset()
        for rule in self.rules:
            if rule.fields is None:
                return None
            out |= rule.fields
        return out


def selected_fields(node: Node | None) -> frozenset[str] | None:
    """The fields an expression selects from self and oldSelf (`self.a`, `has(oldSelf.b)`), or None when it
    uses them otherwise (whole, indexed, as a comprehension's range) or could not be parsed."""
    out: set[str] = set()

    def walk(n: Node) -> bool:
        if n.kind == "select" and n.args[0].kind == "ident" and n.args[0].name in VARIABLES:
            out.add(n.name)
            return True
        if n.kind == "ident" and n.name in VARIABLES:
            return False
        return all(walk(a) for a in n.args)
    return frozenset(out) if node is not None and walk(node) else None


def _go_rule(r: Schema) -> str:
    """An apiextensions.ValidationRule as Go's %#v prints it (pointers shown as set or nil)."""
    def ptr(typ: str, key: str) -> str:
        return f"(*{typ})(0xc000000000)" if r.get(key) is not None else f"(*{typ})(nil)"
    return (f"apiextensions.ValidationRule{{Rule:{quote(str(r.get('rule') or ''))}, "
            f"Message:{quote(str(r.get('message') or ''))}, "
            f"MessageExpression:{quote(str(r.get('messageExpression') or ''))}, "
            f"Reason:{ptr('apiextensions.FieldValueErrorReason', 'reason')}, "
            f"FieldPath:{quote(str(r.get('fieldPath') or ''))}, OptionalOldSelf:{ptr('bool', 'optionalOldSelf')}}}")


_BOOL_OPS = frozenset({"==", "!=", "<", "<=", ">", ">=", "in", "&&", "||", "!_", "matches", "contains",
                       "startsWith", "endsWith", "has", "isSorted", "hasValue", "isQuantity", "isIP", "isCIDR",
                       "isURL"})


def _result_kind(n: Node | None) -> str:
    """What cel-go's checker would say the expression returns, where the AST alone tells: "bool", "string",
    "other", or "" (unknown: cel-rust has no type checker, so only these are refused at compile time)."""
    if n is None:
        return ""
    if n.kind == "lit":
        return "bool" if isinstance(n.value, bool) else "string" if isinstance(n.value, str) else "other"
    if n.kind in ("list", "map"):
        return "other"
    if n.kind == "has" or (n.kind == "comp" and n.name in ("all", "exists", "exists_one")):
        return "bool"
    if n.kind == "comp":
        return "other"
    if n.kind == "call":
        if n.name in _BOOL_OPS:
            return "bool"
        if n.name in ("*", "/", "%", "-_", "size", "int", "double", "uint"):
            return "other"
        if n.name in ("string", "lowerAscii", "upperAscii", "trim", "join", "substring", "replace"):
            return "string"
        if n.name == "+":
            kinds = {_result_kind(a) for a in n.args}
            return "string" if "string" in kinds else "other" if "other" in kinds else ""
    if n.kind == "cond":
        a, b = _result_kind(n.args[1]), _result_kind(n.args[2])
        return a if a == b else ""
    return ""


def _compile(expression: str) -> tuple[cel.Program | None, Node | None, str]:
    try:
        program = cel.compile_expression(expression, VARIABLES)
    except cel.CELCompileError as e:
        return None, None, str(e)
    try:
        ast = parse(expression)
    except (ValueError, IndexError):
        ast = None
    return program, ast, ""


_SEGMENT = re.compile(r"\.([A-Za-z_][A-Za-z0-9_]*)|\['((?:[^'\\]|\\.)*)'\]|\[(\d+)\]")


def valid_field_path(path: str, schema: Schema) -> str | None:
    """ValidFieldPath: a rule's fieldPath (`.spec.x`, `['a.b']`, `[0]`) resolved in the schema, as the
    field path it names relative to the rule's node ("spec.x", "[a.b]"); None when it does not resolve."""
    pos, out, s = 0, "", schema
    if not path.startswith((".", "[")):
        return None
    while pos < len(path):
        m = _SEGMENT.match(path, pos)
        if not m:
            return None
        pos = m.end()
        name, key, index = m.group(1), m.group(2), m.group(3)
        if index is not None:
            if s.get("type") != "array" or not isinstance(s.get("items"), dict):
                return None
            s, out = s["items"], f"{out}[{index}]"
            continue
        key = name if name is not None else key.replace("\\'", "'")
        props = s.get("properties")
        if props is not None and key in props:
            s, out = props[key], f"{out}.{key}" if out else key
        elif isinstance(s.get("additionalProperties"), dict):
            s, out = s["additionalProperties"], f"{out}[{key}]"
        else:
            return None
    return out


class TotalCost:
    """The CRD's summed estimated cost, and its most expensive expressions (kube's TotalCost)."""

    def __init__(self) -> None:
        self.total = 0
        self.most_expensive: list[tuple[int, str]] = []

    def observe(self, path: str, cost: int) -> None:
        self.total = min(self.total + cost, costs.MAX_UINT64)
        if cost < costs.STATIC_ESTIMATED_CRD_COST_LIMIT // 100:
            return
        self.most_expensive.append((cost, path))
        self.most_expensive.sort(key=lambda e: -e[0])
        del self.most_expensive[4:]


@dataclass
class _Walk:
    """What a walk over one schema collects: the CRD validation's causes and the summed cost."""
    causes: list[Cause]
    total: TotalCost


def _compile_node(s: Schema, path: str, cardinality: int | None, uncorrelatable: str | None,
                  w: _Walk) -> CompiledSchema:
    node = CompiledSchema(s)
    for i, r in enumerate(s.get(XVALIDATIONS) or []):
        compiled = _compile_rule(r if isinstance(r, dict) else {}, s, f"{path}.{XVALIDATIONS}[{i}]",
                                 cardinality, uncorrelatable, w)
        if compiled is not None:
            node.rules.append(compiled)
    for key, sub in sorted((s.get("properties") or {}).items()):
        if isinstance(sub, dict):
            child = _compile_node(sub, f"{path}.properties[{key}]", cardinality, uncorrelatable, w)
            if not child.empty:
                node.properties[key] = child
    extra = s.get("additionalProperties")
    if isinstance(extra, dict):
        bound = s.get("maxProperties")
        child = _compile_node(extra, f"{path}.additionalProperties",
                              cardinality * bound if cardinality is not None and bound is not None else None,
                              uncorrelatable, w)
        node.additional = None if child.empty else child
    items = s.get("items")
    if isinstance(items, dict):
        bound = s.get("maxItems")
        items_path = f"{path}.items"
        if s.get("x-kubernetes-list-type") != "map" and uncorrelatable is None:
            uncorrelatable = items_path
        child = _compile_node(items, items_path,
                              cardinality * bound if cardinality is not None and bound is not None else None,
                              uncorrelatable, w)
        node.items = None if child.empty else child
    return node


def _compile_rule(r: Schema, s: Schema, at: str, cardinality: int | None, uncorrelatable: str | None,
                  w: _Walk) -> Rule | None:
    causes: list[Cause] = []
    rule, message = str(r.get("rule") or ""), str(r.get("message") or "")
    msg_expr, field_path = str(r.get("messageExpression") or ""), str(r.get("fieldPath") or "")
    if not rule.strip():
        causes.append(required(f"{at}.rule", "rule is not specified"))
    elif message and not message.strip():
        causes.append(invalid(f"{at}.message", message, "message must be non-empty if specified"))
    elif _NEWLINES.search(message.strip()):
        causes.append(invalid(f"{at}.message", message, "message must not contain line breaks"))
    elif _NEWLINES.search(rule.strip()) and not message.strip():
        causes.append(required(f"{at}.message", "message must be specified if rule contains line breaks"))
    if msg_expr and not msg_expr.strip():
        causes.append(required(f"{at}.messageExpression", "messageExpression must be non-empty if specified"))
    reason = r.get("reason")
    if reason is not None and reason not in REASONS:
        causes.append(not_supported(f"{at}.reason", reason, REASONS))
    if field_path and not field_path.strip():
        causes.append(invalid(f"{at}.fieldPath", field_path, "fieldPath must be non-empty if specified"))
    if _NEWLINES.search(field_path):
        causes.append(invalid(f"{at}.fieldPath", field_path, "fieldPath must not contain line breaks"))
    resolved = valid_field_path(field_path.strip(), s) if field_path.strip() else ""
    if field_path.strip() and resolved is None:
        causes.append(invalid(f"{at}.fieldPath", field_path, "fieldPath must be a valid path"))
    if not rule.strip():
        w.causes += causes
        return None

    shape = costs.Shape.of(s)
    estimator = costs.Estimator({"self": shape, "oldSelf": shape})
    program, ast, error = _compile(rule)
    per_call = estimator.cost(ast) if ast is not None else 0
    expression_cost = costs.saturating_mul(
        per_call, cardinality if cardinality is not None else costs.max_cardinality(s))
    if expression_cost > costs.STATIC_ESTIMATED_COST_LIMIT:
        causes.append(forbidden(f"{at}.rule", costs.exceeds_message(
            "estimated rule cost", expression_cost, costs.STATIC_ESTIMATED_COST_LIMIT)))
    w.total.observe(f"{at}.rule", expression_cost)
    if program is not None and _result_kind(ast) not in ("bool", ""):
        program, error = None, "cel expression must evaluate to a bool"
    elif program is None:
        error = f"compilation failed: {error}"
    if program is None:
        causes.append(invalid_go(f"{at}.rule", _go_rule(r), error))

    message_program, msg_ast, message_cost = None, None, 0
    if msg_expr.strip():
        message_program, msg_ast, msg_error = _compile(msg_expr)
        if message_program is not None and _result_kind(msg_ast) not in ("string", ""):
            message_program, msg_error = None, "messageExpression must evaluate to a string"
        elif message_program is None:
            msg_error = f"messageExpression compilation failed: {msg_error}"
        if message_program is None:
            causes.append(invalid_go(f"{at}.messageExpression", _go_rule(r), msg_error))
        else:
            message_cost = estimator.cost(msg_ast) if msg_ast is not None else 0
            msg_cost = costs.saturating_mul(message_cost,
                                            cardinality if cardinality is not None else costs.max_cardinality(s))
            if msg_cost > costs.STATIC_ESTIMATED_COST_LIMIT:
                causes.append(forbidden(f"{at}.messageExpression", costs.exceeds_message(
                    "estimated messageExpression cost", msg_cost, costs.STATIC_ESTIMATED_COST_LIMIT)))
            w.total.observe(f"{at}.messageExpression", msg_cost)

    uses_old_self = program is not None and "oldSelf" in program.variables()
    if uses_old_self and uncorrelatable is not None:
        causes.append(invalid(f"{at}.rule", rule,
                              f"oldSelf cannot be used on the uncorrelatable portion of the schema within "
                              f"{uncorrelatable}"))
    elif program is not None and not uses_old_self and r.get("optionalOldSelf") is not None:
        causes.append(invalid(f"{at}.optionalOldSelf", r.get("optionalOldSelf"),
                              "may not be set if oldSelf is not used in rule"))
    w.causes += causes
    if program is None or causes:
        return None
    return Rule(rule=rule, program=program, ast=ast, message=message.strip(), message_program=message_program,
                reason=str(reason or ""), field_path=resolved or "", transition=uses_old_self,
                optional_old_self=bool(r.get("optionalOldSelf")), cost=per_call, message_cost=message_cost,
                fields=_union(selected_fields(ast), selected_fields(msg_ast) if message_program else frozenset()))


def _union(a: frozenset[str] | None, b: frozenset[str] | None) -> frozenset[str] | None:
    return None if a is None or b is None else a | b


def validate_rules(schema: Schema, path: str) -> list[Cause]:
    """The CRD validation's causes for the x-kubernetes-validations of one openAPIV3Schema at `path`
    (kube's field paths and messages), the per-schema cost total included."""
    w = _Walk([], TotalCost())
    _compile_node(schema, path, 1, None, w)
    if w.total.total > costs.STATIC_ESTIMATED_CRD_COST_LIMIT:
        for _, at in w.total.most_expensive:
            w.causes.append(forbidden(at, "contributed to estimated rule & messageExpression cost total "
                                          "exceeding cost limit for entire OpenAPIv3 schema"))
        w.causes.append(forbidden(path, costs.exceeds_message(
            "x-kubernetes-validations estimated rule & messageExpression cost total for entire OpenAPIv3 schema",
            w.total.total, costs.STATIC_ESTIMATED_CRD_COST_LIMIT)))
    return w.causes


def compile_schema(schema: Schema) -> CompiledSchema | None:
    """The rules of a served version's schema, compiled once when its definition is built; None when the
    schema carries none (rules refused at CRD validation are left out)."""
    node = _compile_node(schema, "", 1, None, _Walk([], TotalCost()))
    return None if node.empty else node
