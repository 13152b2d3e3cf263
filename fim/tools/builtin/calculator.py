"""calculator: exact arithmetic for the model, evaluated by walking a parsed `ast`, never eval.

Models are bad at arithmetic and `eval` is a sandbox escape; a whitelist walker over the
expression tree gives both safety and exact integers. Sizes are guarded before computing,
so `9**9**9` is refused instead of freezing the process; and the evaluation runs in a
killable worker process (`fim.tools.isolate`) with a deadline, CPU and memory caps, so an
expression the guards did not foresee still cannot hold the server. Only plain arithmetic
whose cost is bounded by construction (`bounded`: + - * / // % on 64-bit literals, at most
64 nodes) is evaluated in place.
"""

from __future__ import annotations

import ast
import math
import operator
from collections.abc import Callable
from typing import Any

from fim.tools import isolate
from fim.tools.base import FunctionTool
from fim.tools.builtin._common import fail
from fim.types import ToolResult

MAX_EXPRESSION = 1000
MAX_INT_BITS = 13_000  # ~3900 decimal digits: stays under Python's int->str limit of 4300
MAX_FACTORIAL = 1000
TIMEOUT = 2.0

Number = int | float


def _factorial(n: Number) -> int:
    if isinstance(n, float):
        if not n.is_integer():
            raise ValueError("factorial() needs a whole number")
        n = int(n)
    if n > MAX_FACTORIAL:
        raise ValueError(f"factorial() is limited to n <= {MAX_FACTORIAL}")
    return math.factorial(n)


def _log(x: Number, base: Number | None = None) -> float:
    return math.log(x) if base is None else math.log(x, base)


FUNCTIONS: dict[str, Callable[..., Any]] = {
    "sqrt": math.sqrt,
    "cbrt": lambda x: math.copysign(abs(x) ** (1 / 3), x),
    "exp": math.exp,
    "log": _log,
    "ln": math.log,
    "log10": math.log10,
    "log2": math.log2,
    "sin": math.sin,
    "cos": math.cos,
    "tan": math.tan,
    "asin": math.asin,
    "acos": math.acos,
    "atan": math.atan,
    "atan2": math.atan2,
    "sinh": math.sinh,
    "cosh": math.cosh,
    "tanh": math.tanh,
    "degrees": math.degrees,
    "radians": math.radians,
    "hypot": math.hypot,
    "floor": math.floor,
    "ceil": math.ceil,
    "trunc": math.trunc,
    "round": round,
    "abs": abs,
    "min": min,
    "max": max,
    "factorial": _factorial,
    "gcd": math.gcd,
    "lcm": math.lcm,
}
CONSTANTS: dict[str, float] = {"pi": math.pi, "e": math.e, "tau": math.tau, "inf": math.inf}

_BINARY: dict[type[ast.operator], Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}


class CalcError(ValueError):
    """An expression the calculator refuses; the message is meant for the model."""


def _bits(value: Number) -> int:
    return abs(value).bit_length() if isinstance(value, int) else 0


def _guard_pow(base: Number, exp: Number) -> None:
    big_int = isinstance(base, int) and isinstance(exp, int) and exp > 0 and abs(base) > 1
    if big_int and _bits(base) * exp > MAX_INT_BITS:
        raise CalcError(f"{base}**{exp} would have more than ~{MAX_INT_BITS * 3 // 10} digits")
    if isinstance(exp, int | float) and abs(exp) > 1_000_000:
        raise CalcError(f"exponent {exp} is too large (limit 1,000,000)")


def _binary(node: ast.BinOp) -> Number:
    op = _BINARY.get(type(node.op))
    if op is None:
        raise CalcError(f"operator {type(node.op).__name__} is not supported")
    left, right = _eval(node.left), _eval(node.right)
    if isinstance(node.op, ast.Pow):
        _guard_pow(left, right)
    elif isinstance(node.op, ast.Mult) and _bits(left) + _bits(right) > MAX_INT_BITS:
        raise CalcError("the product is too large")
    result = op(left, right)
    if isinstance(result, complex):
        raise CalcError(f"{ast.unparse(node)} has no real result")
    return result


def _call(node: ast.Call) -> Number:
    if not isinstance(node.func, ast.Name) or node.func.id not in FUNCTIONS:
        name = node.func.id if isinstance(node.func, ast.Name) else ast.unparse(node.func)
        raise CalcError(f"unknown function '{name}'")
    if node.keywords:
        raise CalcError("keyword arguments are not supported; pass arguments by position")
    args = [_eval(a) for a in node.args]
    return FUNCTIONS[node.func.id](*args)


def _eval(node: ast.AST) -> Number:
    if isinstance(node, ast.Expression):
        return _eval(node.body)
    if isinstance(node, ast.Constant):
        if isinstance(node.value, bool) or not isinstance(node.value, int | float):
            raise CalcError(f"{node.value!r} is not a number")
        return node.value
    if isinstance(node, ast.Name):
        if node.id not in CONSTANTS:
            raise CalcError(f"unknown name '{node.id}'")
        return CONSTANTS[node.id]
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.UAdd | ast.USub):
        value = _eval(node.operand)
        return -value if isinstance(node.op, ast.USub) else +value
    if isinstance(node, ast.BinOp | ast.Call):
        result = _binary(node) if isinstance(node, ast.BinOp) else _call(node)
        if _bits(result) > MAX_INT_BITS:
            raise CalcError("an intermediate result is too large")
        return result
    raise CalcError(f"'{ast.unparse(node)}' is not allowed in an expression")


def evaluate(expression: str) -> Number:
    """Evaluate an arithmetic expression; raises CalcError, ArithmeticError or ValueError."""
    text = expression.strip().replace("^", "**")
    if not text:
        raise CalcError("the expression is empty")
    if len(text) > MAX_EXPRESSION:
        raise CalcError(f"the expression is longer than {MAX_EXPRESSION} characters")
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError as exc:
        raise CalcError(f"cannot parse the expression ({exc.msg})") from None
    return _eval(tree)


def format_number(value: Number) -> str:
    """Integers exactly; floats to 15 significant digits so 0.1+0.2 reads as 0.3."""
    if isinstance(value, int):
        return str(value)
    if math.isnan(value) or math.isinf(value):
        return str(value)
    return format(value, ".15g")


_HELP = (
    "Use numbers, + - * / // % ** (or ^), parentheses, the constants "
    f"{', '.join(CONSTANTS)} and the functions {', '.join(FUNCTIONS)}."
)


def observe(expression: str, tree: ast.Expression | None = None) -> str | ToolResult:
    """Evaluate to the tool's observation; runs inside the isolated worker (or inline with
    the `tree` that `bounded_tree` already parsed and checked)."""
    try:
        return format_number(_eval(tree) if tree is not None else evaluate(expression))
    except CalcError as exc:
        return fail(f"{exc}. {_HELP}")
    except ZeroDivisionError:
        return fail("division by zero. Check the divisor and try again.")
    except OverflowError:
        return fail("the result is too large to represent. Use smaller numbers.")
    except (ValueError, TypeError) as exc:
        return fail(f"{exc}. Check the function's arguments. {_HELP}")


_INLINE_OPS = (ast.Add, ast.Sub, ast.Mult, ast.Div, ast.FloorDiv, ast.Mod, ast.USub, ast.UAdd)
_INLINE_OP_TYPES = frozenset(_INLINE_OPS)
_INLINE_CHARS = 200
_INLINE_NODES = 64
_INLINE_BITS = 64


def bounded(expression: str) -> bool:
    """True for plain arithmetic whose cost is bounded by its length: at most 64 nodes of
    + - * / // % on literals of at most 64 bits (the largest result is a product of ~32
    such numbers, 2,048 bits). Only these skip the worker process; anything else — powers,
    functions, long input — is evaluated where a deadline can kill it."""
    return bounded_tree(expression) is not None


def bounded_tree(expression: str) -> ast.Expression | None:
    """The parsed expression when it is `bounded`, else None (parsed once for both the
    check and the evaluation)."""
    text = expression.strip().replace("^", "**")
    if not text or len(text) > _INLINE_CHARS:
        return None
    try:
        tree = ast.parse(text, mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    if _inline_nodes(tree.body, 1) > _INLINE_NODES:
        return None
    return tree


def _inline_nodes(node: ast.AST, seen: int) -> int:
    """`seen` plus the nodes under `node` (operators included, as `ast.walk` counts them),
    or more than `_INLINE_NODES` as soon as the limit is passed or a node is not plain
    arithmetic. A direct walk: `ast.walk`'s generic field iteration cost more than the
    evaluation itself, on every call of the tool. Recursion stops at the node limit."""
    seen += 1
    if seen > _INLINE_NODES:
        return seen
    kind = type(node)
    if kind is ast.Constant:
        value = node.value  # type: ignore[attr-defined]
        if type(value) is float or (type(value) is int and value.bit_length() <= _INLINE_BITS):
            return seen
        return _INLINE_NODES + 1
    if kind is ast.BinOp:
        assert isinstance(node, ast.BinOp)
        if type(node.op) not in _INLINE_OP_TYPES:
            return _INLINE_NODES + 1
        return _inline_nodes(node.right, _inline_nodes(node.left, seen + 1))
    if kind is ast.UnaryOp:
        assert isinstance(node, ast.UnaryOp)
        if type(node.op) not in _INLINE_OP_TYPES:
            return _INLINE_NODES + 1
        return _inline_nodes(node.operand, seen + 1)
    return _INLINE_NODES + 1


async def _run(expression: str) -> str | ToolResult:
    tree = bounded_tree(expression)
    if tree is not None:  # cost bounded by construction: no process round trip
        return observe(expression, tree)
    return await isolate.run(
        observe, expression, timeout=TIMEOUT, hint="Use smaller numbers or fewer operations."
    )


TOOL = FunctionTool(
    name="calculator",
    description=(
        "Evaluate an arithmetic expression exactly, e.g. 'sqrt(2) * pi', 'round(7/3, 2)'. "
        "Use it for any arithmetic instead of computing in your head."
    ),
    parameters={
        "type": "object",
        "properties": {
            "expression": {
                "type": "string",
                "minLength": 1,
                "maxLength": MAX_EXPRESSION,
            }
        },
        "required": ["expression"],
        "additionalProperties": False,
    },
    fn=_run,
    category="compute",
    # pure: no network, files, processes or other effects, so `fim eval` replay runs it
    # without a recorded result (fim.eval.tool_replay)
    metadata={"builtin": True, "access": "read", "pure": True},
)
