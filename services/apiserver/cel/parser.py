"""CEL's grammar (cel-spec's langdef) to a small AST: cel-rust compiles and evaluates but shows no tree, and
the cost estimator needs one. Only expressions cel-rust accepted reach here, so errors are not reported
with positions: anything unparsable raises ValueError."""
from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from typing import Any

MACROS = frozenset({"all", "exists", "exists_one", "map", "filter"})


@dataclass(frozen=True)
class Node:
    """kind: lit (value), ident (name), select (args[0].name), has (args[0] a select), index, list, map,
    cond, call (name; args[0] is the target of a member call when member), comp (name: the macro; var;
    args: range, body[, transform])."""
    kind: str
    name: str = ""
    value: Any = None
    args: tuple[Node, ...] = ()
    member: bool = False
    var: str = ""
    extra: dict[str, Any] = field(default_factory=dict, compare=False)


_TOKEN = re.compile(r"""
    (?P<ws>\s+|//[^\n]*)
  | (?P<str>[rRbB]{0,2}(?:\"\"\"(?:\\.|[^\\])*?\"\"\"|'''(?:\\.|[^\\])*?'''|"(?:\\.|[^"\\\n])*"|'(?:\\.|[^'\\\n])*'))
  | (?P<num>0[xX][0-9a-fA-F]+[uU]?|(?:\d+\.\d*|\.\d+|\d+)(?:[eE][+-]?\d+)?[uU]?)
  | (?P<id>[A-Za-z_][A-Za-z0-9_]*)
  | (?P<op>\|\||&&|==|!=|<=|>=|\.\?|[-+*/%!<>?:.,()\[\]{}])
""", re.VERBOSE)


def _tokens(src: str) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    pos = 0
    while pos < len(src):
        m = _TOKEN.match(src, pos)
        if not m:
            raise ValueError(f"unexpected character at {pos}")
        pos = m.end()
        kind = m.lastgroup or ""
        if kind != "ws":
            out.append((kind, m.group()))
    out.append(("eof", ""))
    return out


def _string(tok: str) -> str:
    prefix = ""
    while tok[0] in "rRbB":
        prefix, tok = prefix + tok[0].lower(), tok[1:]
    quote = tok[:3] if tok[:3] in ('"""', "'''") else tok[0]
    body = tok[len(quote):-len(quote)]
    if "r" in prefix:
        return body
    return body.encode("latin-1", "backslashreplace").decode("unicode_escape", "replace")


_RELATIONS = ("<", "<=", ">=", ">", "==", "!=", "in")


class _Parser:
    def __init__(self, src: str) -> None:
        self.toks = _tokens(src)
        self.i = 0

    def peek(self) -> str:
        return self.toks[self.i][1]

    def take(self, want: str | None = None) -> tuple[str, str]:
        tok = self.toks[self.i]
        if want is not None and tok[1] != want:
            raise ValueError(f"expected {want!r}, got {tok[1]!r}")
        self.i += 1
        return tok

    def expr(self) -> Node:
        cond = self.binary(0)
        if self.peek() == "?":
            self.take()
            then = self.binary(0)
            self.take(":")
            return Node("cond", args=(cond, then, self.expr()))
        return cond

    _LEVELS: tuple[tuple[str, ...], ...] = (("||",), ("&&",), _RELATIONS, ("+", "-"), ("*", "/", "%"))

    def binary(self, level: int) -> Node:
        if level == len(self._LEVELS):
            return self.unary()
        left = self.binary(level + 1)
        while self.toks[self.i][0] in ("op", "id") and self.peek() in self._LEVELS[level]:
            op = self.take()[1]
            left = Node("call", name=op, args=(left, self.binary(level + 1)))
        return left

    def unary(self) -> Node:
        if self.peek() in ("!", "-"):
            op = self.take()[1]
            operand = self.unary()
            if op == "-" and operand.kind == "lit" and isinstance(operand.value, (int, float)):
                return Node("lit", value=-operand.value)
            return Node("call", name=op + "_", args=(operand,))
        return self.member(self.primary())

    def args(self, close: str) -> tuple[Node, ...]:
        out: list[Node] = []
        while self.peek() != close:
            out.append(self.expr())
            if self.peek() != ",":
                break
            self.take()
        self.take(close)
        return tuple(out)

    def member(self, node: Node) -> Node:
        while True:
            tok = self.peek()
            if tok in (".", ".?"):
                self.take()
                name = self.take()[1]
                if self.peek() == "(":
                    self.take()
                    args = self.args(")")
                    if name in MACROS and args and args[0].kind == "ident" and len(args) in (2, 3):
                        node = Node("comp", name=name, var=args[0].name, args=(node, *args[1:]))
                    else:
                        node = Node("call", name=name, args=(node, *args), member=True)
                else:
                    node = Node("select", name=name, args=(node,), extra={"optional": tok == ".?"})
            elif tok == "[":
                self.take()
                index = self.expr()
                self.take("]")
                node = Node("index", args=(node, index))
            elif tok == "{" and node.kind in ("ident", "select"):
                self.take()
                node = Node("map", args=self._entries(struct=True))
            else:
                return node

    def _entries(self, struct: bool) -> tuple[Node, ...]:
        out: list[Node] = []
        while self.peek() != "}":
            key = Node("lit", value=self.take()[1]) if struct else self.expr()
            self.take(":")
            out += [key, self.expr()]
            if self.peek() != ",":
                break
            self.take()
        self.take("}")
        return tuple(out)

    def primary(self) -> Node:
        kind, tok = self.take()
        if kind == "str":
            return Node("lit", value=_string(tok), extra={"bytes": tok[0] in "bB" or tok[:2].lower() == "rb"})
        if kind == "num":
            text = tok.rstrip("uU")
            if text.lower().startswith("0x"):
                return Node("lit", value=int(text, 16))
            return Node("lit", value=float(text) if any(c in text for c in ".eE") else int(text))
        if tok == "(":
            inner = self.expr()
            self.take(")")
            return inner
        if tok == "[":
            return Node("list", args=self.args("]"))
        if tok == "{":
            return Node("map", args=self._entries(struct=False))
        if tok == ".":
            kind, tok = self.take()
        if kind != "id":
            raise ValueError(f"unexpected {tok!r}")
        if tok in ("true", "false", "null"):
            return Node("lit", value={"true": True, "false": False, "null": None}[tok])
        if self.peek() == "(":
            self.take()
            args = self.args(")")
            if tok == "has" and len(args) == 1 and args[0].kind == "select":
                return Node("has", args=args)
            return Node("call", name=tok, args=args)
        return Node("ident", name=tok)


@functools.lru_cache(maxsize=4096)
def parse(src: str) -> Node:
    p = _Parser(src)
    node = p.expr()
    if p.peek() != "":
        raise ValueError(f"unexpected {p.peek()!r}")
    return node
