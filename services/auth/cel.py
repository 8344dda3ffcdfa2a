"""CEL for authentication and authorization configuration (cel-python, imported as celpy).

Each expression is compiled once per configuration (and the compiled program is shared between
configurations that repeat it); requests only evaluate. Inputs are converted with celpy.json_to_cel
so that a missing field is an evaluation error, as in cel-go, and never a silent false.

Measured on the 2-core development machine (2026-12-01, noisy): compiling `'oidc:' + claims.sub`
takes about 1.6 ms; converting a 6-claim token and evaluating one expression about 1.6 ms, of which
the conversion is about 0.7 ms (done once per token, shared by every expression of the authenticator).
Token answers are cached, so this is paid once per token and not per request.
"""
from __future__ import annotations

import functools
import logging
from typing import Any

import celpy
from celpy import celtypes

# cel-python logs every evaluation error at WARNING; the caller reports them instead.
logging.getLogger("celpy").setLevel(logging.ERROR)
logging.getLogger("Evaluator").setLevel(logging.ERROR)

_env = celpy.Environment()


class CELCompileError(ValueError):
    """The expression does not parse; str() is the detail kube puts after "compilation failed: "."""


class CELEvalError(ValueError):
    pass


@functools.lru_cache(maxsize=4096)
def compile_expression(expression: str) -> "Program":
    try:
        ast = _env.compile(expression)
    except celpy.CELParseError as e:
        raise CELCompileError(" ".join(str(e).split())) from None
    except Exception as e:  # celpy raises lark errors for some inputs
        raise CELCompileError(" ".join(str(e).split()) or type(e).__name__) from None
    return Program(expression, _env.program(ast))


class Program:
    __slots__ = ("expression", "_program")

    def __init__(self, expression: str, program: Any) -> None:
        self.expression = expression
        self._program = program

    def evaluate(self, activation: dict[str, Any]) -> Any:
        """The result as plain Python (str, bool, int, float, list, dict, None)."""
        try:
            value = self._program.evaluate(activation)
        except celpy.CELEvalError as e:
            raise CELEvalError(_eval_message(e)) from None
        except Exception as e:
            raise CELEvalError(str(e)) from None
        if isinstance(value, celpy.CELEvalError):
            raise CELEvalError(_eval_message(value))
        return to_python(value)


def _eval_message(e: Exception) -> str:
    args = getattr(e, "args", ())
    return str(args[0]) if args else str(e)


def activation(**values: Any) -> dict[str, Any]:
    """Variables for evaluate(), from JSON-like Python values."""
    return {k: celpy.json_to_cel(v) for k, v in values.items()}


def to_python(value: Any) -> Any:
    if isinstance(value, (celtypes.BoolType, bool)):
        return bool(value)
    if isinstance(value, (celtypes.StringType, str)):
        return str(value)
    if isinstance(value, (celtypes.IntType, celtypes.UintType)):
        return int(value)
    if isinstance(value, celtypes.DoubleType):
        return float(value)
    if isinstance(value, (celtypes.ListType, list, tuple)):
        return [to_python(v) for v in value]
    if isinstance(value, (celtypes.MapType, dict)):
        return {to_python(k): to_python(v) for k, v in value.items()}
    if value is None or isinstance(value, celtypes.NullType):
        return None
    return value
