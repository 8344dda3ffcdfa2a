"""The worst-case cost of a CEL rule, estimated over its AST from the schema's bounds as cel-go's checker
estimates it for kube (k8s.io/apiserver/pkg/cel: maxItems, maxLength, maxProperties, and for unbounded
lists, strings and maps a size derived from the largest request), and kube's limits.

Checked against the expectations of kube's TestCostEstimation (schema/cel/compilation_test.go), which this
reproduces for comprehensions (`all` over lists and maps, nested ones multiplying), string sizes (maxLength
counts code points, 4 bytes each; unbounded strings, lists and maps sized from the 3 MiB request; enum
strings by their longest value), contains, startsWith, concatenation, lowerAscii, join, matches and string
equality. Where it approximates cel-go's checker (whose per-overload table is not reproduced):
- identifiers, field selections, indexes and functions not named here cost 1 plus their arguments, literals
  0, list and map literals 10 and 30 plus their elements; `&&`, `||` cost their operands, `?:` its condition
  and its dearer branch; equality of scalars costs 1, 0 against a number, bool or null literal;
- matches/find cost (1 + 0.1 per byte of the string) x 0.25 per byte of the regex (off by one or two from
  cel-go for unbounded strings); replace, split, isSorted, sum/min/max are linear in the receiver;
- equality of lists and maps costs each element's comparison (cel-go's traversal of both);
- values whose size nothing bounds (results of most functions, map keys) count as size 0, as cel-go's
  estimator does for unsized types.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from .parser import Node

# k8s.io/apiserver/pkg/apis/cel (celconfig) and apiextensions validation
PER_CALL_LIMIT = 1_000_000
RUNTIME_CEL_COST_BUDGET = 10_000_000
STATIC_ESTIMATED_COST_LIMIT = 10_000_000
STATIC_ESTIMATED_CRD_COST_LIMIT = 100_000_000
MAX_REQUEST_SIZE_BYTES = 3 * 1024 * 1024
# apiserver's cel: the largest and smallest JSON forms of formatted strings
_FORMAT_SIZES = {"duration": 32, "date": 12, "date-time": 64}
_FORMAT_MIN_SIZES = {"duration": 3, "date": 12, "date-time": 21}
_STRING_FACTOR = 0.1
_REGEX_FACTOR = 0.25
MAX_UINT64 = 2**64 - 1

Schema = dict[str, Any]


def _type(s: Schema | None) -> str:
    if not s:
        return ""
    if s.get("x-kubernetes-int-or-string"):
        return "int-or-string"
    typ = s.get("type") or ""
    if typ == "object" and s.get("properties") is None and isinstance(s.get("additionalProperties"), dict):
        return "map"
    return typ


def min_serialized_size(s: Schema | None) -> int:
    """estimateMinSizeJSON: the smallest JSON a value of the schema can take."""
    typ = _type(s)
    if typ == "boolean":
        return 4
    if typ in ("number", "integer", "int-or-string"):
        return 1
    if typ == "string" and s is not None:
        return _FORMAT_MIN_SIZES.get(s.get("format") or "", 2)
    if typ == "array":
        return 2
    if typ in ("object", "map") and s is not None:
        size = 2
        props = s.get("properties") or {}
        for name in s.get("required") or ():
            prop = props.get(name)
            if isinstance(prop, dict) and "default" not in prop:
                size += len(name) + min_serialized_size(prop) + 4
        return size
    return 0


def max_size(s: Schema | None) -> int:
    """The most characters, items or entries a value of the schema can hold."""
    typ = _type(s)
    if s is None or not typ:
        return 1
    if typ in ("string", "int-or-string"):
        # bytes: maxLength counts code points, up to 4 bytes each
        if "maxLength" in s:
            return max(0, int(s["maxLength"])) * 4
        if s.get("enum") and typ == "string":
            return max(len(str(e).encode()) for e in s["enum"])
        return _FORMAT_SIZES.get(s.get("format") or "", MAX_REQUEST_SIZE_BYTES - 2)
    if typ == "array":
        if "maxItems" in s:
            return int(s["maxItems"])
        return (MAX_REQUEST_SIZE_BYTES - 2) // (min_serialized_size(s.get("items")) + 1)
    if typ in ("map", "object"):
        if "maxProperties" in s:
            return int(s["maxProperties"])
        if typ == "object":
            return len(s.get("properties") or {}) or 1
        return (MAX_REQUEST_SIZE_BYTES - 2) // (min_serialized_size(s.get("additionalProperties")) + 6)
    return 1


def max_cardinality(s: Schema | None) -> int:
    """How many times a rule can run in one object when its node sits under an unbounded list or map."""
    return MAX_REQUEST_SIZE_BYTES // (min_serialized_size(s) + 1)


@dataclass(frozen=True)
class Shape:
    """What the estimator knows of a value: its schema (None: unknown), kind, greatest size and, at run
    time, the value itself (the actual cost is estimated with actual sizes)."""
    schema: Schema | None = None
    kind: str = ""
    size: int = 1
    value: Any = None

    @staticmethod
    def of(schema: Schema | None, value: Any = None) -> Shape:
        """The schema's bounds; with a value (run time), the value's own size."""
        if isinstance(value, (str, list, dict)):
            return Shape(schema, _type(schema), len(value), value)
        return Shape(schema, _type(schema), max_size(schema))

    def child(self, name: str | None = None) -> Shape:
        s, v = self.schema or {}, self.value
        if self.kind == "array":
            return Shape.of(s.get("items"), _largest(v) if isinstance(v, list) else None)
        if self.kind == "map":
            sub = v.get(name) if isinstance(v, dict) and name is not None else \
                _largest(list(v.values())) if isinstance(v, dict) else None
            return Shape.of(s.get("additionalProperties"), sub)
        if self.kind == "object" and name is not None:
            props = s.get("properties") or {}
            sub = v.get(name) if isinstance(v, dict) else None
            if name in props:
                return Shape.of(props[name], sub)
            return Shape.of(s.get("additionalProperties") if isinstance(s.get("additionalProperties"), dict)
                            else None, sub)
        return Shape()

    def element(self) -> Shape:
        """The comprehension variable's shape: a list's items, a map's keys."""
        if self.kind == "array":
            return self.child()
        if self.kind in ("map", "object"):
            if isinstance(self.value, dict):
                return Shape(None, "string", max(map(len, self.value), default=0))
            return Shape(None, "string", 0)
        return Shape()


def _largest(values: list[Any]) -> Any:
    """The element that bounds a comprehension's body at run time: the longest string, list or map."""
    sized = [x for x in values if isinstance(x, (str, list, dict))]
    return max(sized, key=len) if sized else None


_UNKNOWN = Shape(size=0)
_STRING_FUNCS = frozenset({"contains", "lowerAscii", "upperAscii", "trim", "split", "substring", "indexOf",
                           "lastIndexOf", "charAt", "reverse", "quantity", "isQuantity", "ip", "isIP", "cidr",
                           "isCIDR", "url", "isURL"})
_SAME_SIZE = frozenset({"lowerAscii", "upperAscii", "trim", "replace", "substring", "reverse", "find", "string"})


def _scaled(size: int, factor: float) -> int:
    return math.ceil(size * factor)


def _equality(a: Shape, b: Shape) -> int:
    """Comparing two values: strings by characters, lists and maps by their elements."""
    shape = a if a.kind else b
    if shape.kind == "string":
        return _scaled(min(a.size, b.size) if a.kind and b.kind else shape.size, _STRING_FACTOR)
    if shape.kind in ("array", "map"):
        return max(1, shape.size * _equality(shape.child(), shape.child()))
    if shape.kind == "object":
        props = (shape.schema or {}).get("properties") or {}
        return max(1, sum(_equality(Shape.of(p), Shape.of(p)) for p in props.values()))
    return 1


class Estimator:
    """Worst-case cost of an expression with `self` (and `oldSelf`) bound to a schema's shape."""

    def __init__(self, variables: dict[str, Shape]) -> None:
        self.vars = dict(variables)

    def cost(self, node: Node) -> int:
        return self.estimate(node)[0]

    def estimate(self, n: Node) -> tuple[int, Shape]:
        kind = n.kind
        if kind == "lit":
            if isinstance(n.value, (str, bytes)):
                return 0, Shape(None, "string", len(n.value))
            return 0, _UNKNOWN
        if kind == "ident":
            return 1, self.vars.get(n.name, _UNKNOWN)
        if kind == "select":
            c, shape = self.estimate(n.args[0])
            return c + 1, shape.child(n.name)
        if kind == "has":
            c, _ = self.estimate(n.args[0].args[0])
            return c + 1, _UNKNOWN
        if kind == "index":
            (c1, s1), (c2, _) = self.estimate(n.args[0]), self.estimate(n.args[1])
            key = n.args[1].value if n.args[1].kind == "lit" and isinstance(n.args[1].value, str) else None
            return c1 + c2 + 1, s1.child(key)
        if kind == "list":
            parts = [self.estimate(a) for a in n.args]
            return 10 + sum(c for c, _ in parts), Shape(None, "array", len(parts))
        if kind == "map":
            return 30 + sum(self.estimate(a)[0] for a in n.args), Shape(None, "map", len(n.args) // 2)
        if kind == "cond":
            c, (t, ts), (f, fs) = self.cost(n.args[0]), self.estimate(n.args[1]), self.estimate(n.args[2])
            return c + max(t, f), ts if t >= f else fs
        if kind == "comp":
            return self._comprehension(n)
        return self._call(n)

    def _comprehension(self, n: Node) -> tuple[int, Shape]:
        range_cost, rng = self.estimate(n.args[0])
        saved = self.vars.get(n.var)
        self.vars[n.var] = rng.element()
        body = sum(self.cost(a) for a in n.args[1:])
        if saved is None:
            del self.vars[n.var]
        else:
            self.vars[n.var] = saved
        total = range_cost + 1 + rng.size * (body + 3)
        if n.name in ("map", "filter"):
            return total, Shape(None, "array", rng.size)
        return total, _UNKNOWN

    def _call(self, n: Node) -> tuple[int, Shape]:
        parts = [self.estimate(a) for a in n.args]
        args_cost = sum(c for c, _ in parts)
        shapes = [s for _, s in parts]
        name = n.name
        if name in ("&&", "||"):
            return args_cost, _UNKNOWN
        if name in ("==", "!=") and any(a.kind == "lit" and not isinstance(a.value, str) for a in n.args) and \
                "int-or-string" not in (shapes[0].kind, shapes[1].kind):
            return args_cost, _UNKNOWN  # against a scalar literal: cel-go counts nothing for the comparison
        if name in ("==", "!=", "<", "<=", ">", ">="):
            return args_cost + _equality(shapes[0], shapes[1]), _UNKNOWN
        if name == "in":
            coll = shapes[1]
            if coll.kind == "array":
                return args_cost + max(1, coll.size * _equality(shapes[0], coll.child())), _UNKNOWN
            return args_cost + 1, _UNKNOWN
        if name == "+" and all(s.kind == "string" for s in shapes):
            size = shapes[0].size + shapes[1].size
            return args_cost + max(1, _scaled(size, _STRING_FACTOR)), Shape(None, "string", size)
        if name == "+" and all(s.kind == "array" for s in shapes):
            return args_cost + 1, Shape(shapes[0].schema, "array", shapes[0].size + shapes[1].size)
        if name in ("matches", "find", "findAll") and len(shapes) >= 2:
            target, regex = shapes[0], shapes[1]
            cost = (1 + _scaled(target.size, _STRING_FACTOR)) * _scaled(regex.size, _REGEX_FACTOR)
            return args_cost + cost, Shape(None, "string", target.size) if name == "find" else _UNKNOWN
        if name in ("startsWith", "endsWith") and len(shapes) == 2:
            return args_cost + _scaled(shapes[1].size, _STRING_FACTOR), _UNKNOWN
        if name == "replace" and len(shapes) >= 3:
            size = shapes[0].size
            return args_cost + 2 * _scaled(size, _STRING_FACTOR), Shape(None, "string", size)
        if name == "join" and shapes and shapes[0].kind == "array":
            item = shapes[0].child().size
            sep = shapes[1].size if len(shapes) > 1 else 0
            size = shapes[0].size * (item + sep)
            return args_cost + _scaled(size, _STRING_FACTOR), Shape(None, "string", size)
        if name in _STRING_FUNCS:
            receiver = shapes[0] if shapes else _UNKNOWN
            cost = args_cost + _scaled(receiver.size, _STRING_FACTOR)
            if name == "split":
                return cost, Shape(None, "array", receiver.size)
            if name in _SAME_SIZE:
                return cost, Shape(None, "string", receiver.size)
            return cost, _UNKNOWN
        if name in ("sum", "min", "max", "isSorted", "indexOf", "lastIndexOf") and shapes and shapes[0].kind == "array":
            element = shapes[0].child()
            return args_cost + 1 + shapes[0].size * (1 + _equality(element, element)), _UNKNOWN
        if name in ("value", "orValue") and shapes:
            return args_cost + 1, shapes[0]
        if name == "string" and shapes:
            return args_cost + 1, Shape(None, "string", shapes[0].size if shapes[0].kind == "string" else 20)
        return args_cost + 1, _UNKNOWN


def saturating_mul(cost: int, cardinality: int) -> int:
    """multiplyWithOverflowGuard."""
    return min(cost * cardinality, MAX_UINT64) if cost else 0


def exceeds_message(what: str, cost: int, limit: int) -> str:
    """getCostErrorMessage."""
    factor = cost / limit
    if factor > 100.0:
        shown = "more than 100x"
    elif factor < 1.5:
        shown = f"{factor:f}x"
    else:
        shown = f"{factor:.1f}x"
    return (f"{what} exceeds budget by factor of {shown} (try simplifying the rule, or adding maxItems, "
            "maxProperties, and maxLength where arrays, maps, and strings are declared)")
