"""json_transform: query and reshape JSON with a path and a short pipeline of operations.

Models mangle large JSON when they reshape it in their head; a deterministic pipeline
(`get` a path, `filter` by a field, `sort_by`, `pick` keys, `count` ...) is exact and keeps
the observation small. Paths are JSONPath (`fim.json_paths`, the one dialect in fim).

The pipeline runs in a killable worker process (`fim.tools.isolate`): `matches` applies a
model-written regular expression, and `^(a+)+$` backtracks for ever; the worker is killed
at the deadline instead of the event loop freezing.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

from fim.json_paths import PathError, lookup, query
from fim.tools import isolate
from fim.tools.base import FunctionTool
from fim.tools.builtin._common import clip, fail
from fim.types import ToolResult

MAX_OUTPUT = 20_000
MAX_OPERATIONS = 20
MAX_PATTERN = 1_000
TIMEOUT = 5.0
OPERATIONS = (
    "get", "pick", "omit", "filter", "sort_by", "limit", "count", "unique", "flatten", "keys",
    "values", "sum", "min", "max", "avg", "group_by", "count_by",
)  # fmt: skip

_COMPARE: dict[str, Callable[[Any, Any], bool]] = {
    "eq": lambda a, b: a == b,
    "ne": lambda a, b: a != b,
    "gt": lambda a, b: a is not None and a > b,
    "gte": lambda a, b: a is not None and a >= b,
    "lt": lambda a, b: a is not None and a < b,
    "lte": lambda a, b: a is not None and a <= b,
    "contains": lambda a, b: a is not None and b in a,
    "in": lambda a, b: a in b,
    "exists": lambda a, b: a is not None,
    "missing": lambda a, b: a is None,
    "matches": lambda a, b: isinstance(a, str) and _pattern(b).search(a) is not None,
}
_OPS_HELP = (
    "get{path}, pick{keys}, omit{keys}, filter{field, compare?, value}, sort_by{field, "
    "descending?}, limit{n}, count, unique{field?}, flatten, keys, values, "
    "sum|min|max|avg{field?}, group_by{field}, count_by{field}"
)


class TransformError(ValueError):
    """An operation that cannot apply; the message is for the model."""


def _pattern(value: Any) -> re.Pattern[str]:
    text = str(value)
    if len(text) > MAX_PATTERN:
        raise TransformError(f"the 'matches' pattern is longer than {MAX_PATTERN} characters")
    try:
        return re.compile(text)
    except re.error as exc:
        raise TransformError(f"invalid regular expression for 'matches': {exc}") from None


def _need_list(value: Any, op: str) -> list[Any]:
    if isinstance(value, dict) and op in ("count", "unique", "flatten"):
        return list(value.values())
    if not isinstance(value, list):
        raise TransformError(
            f"'{op}' works on a list, but the current value is a {type(value).__name__}; "
            "use 'get' with a path to reach a list first"
        )
    return value


def _field(item: Any, field: str | None) -> Any:
    return item if not field else lookup(item, field)


def _pick(value: Any, keys: list[str], keep: bool) -> Any:
    if isinstance(value, list):
        return [_pick(item, keys, keep) for item in value]
    if not isinstance(value, dict):
        raise TransformError(f"pick/omit need objects, found a {type(value).__name__}")
    if keep:
        found = {k: lookup(value, k, _Absent) for k in keys}
        return {k: v for k, v in found.items() if v is not _Absent}
    return {k: v for k, v in value.items() if k not in keys}


class _Absent:
    """Marker for a key that is not there (distinct from a JSON null)."""


def _sort_key(value: Any) -> tuple[int, Any]:
    if value is None:
        return (2, 0)
    if isinstance(value, bool | int | float):
        return (0, value)
    return (1, str(value))


def _numbers(items: list[Any], field: str | None, op: str) -> list[float]:
    values = [_field(item, field) for item in items]
    numbers = [v for v in values if isinstance(v, int | float) and not isinstance(v, bool)]
    if not numbers:
        raise TransformError(f"'{op}' found no numbers" + (f" in field '{field}'" if field else ""))
    return numbers


def apply(value: Any, step: dict[str, Any]) -> Any:
    """Apply one operation; raises TransformError or PathError with a message for the model."""
    op = step["op"]
    field = step.get("field")
    if op == "get":
        return query(value, step.get("path", "$"))
    if op in ("pick", "omit"):
        if not step.get("keys"):
            raise TransformError(f"'{op}' needs 'keys', a list of key names")
        return _pick(value, step["keys"], keep=op == "pick")
    if op == "keys":
        if not isinstance(value, dict):
            raise TransformError(f"'keys' needs an object, found a {type(value).__name__}")
        return list(value)
    if op == "values":
        if not isinstance(value, dict):
            raise TransformError(f"'values' needs an object, found a {type(value).__name__}")
        return list(value.values())
    if op == "count":
        return len(value) if isinstance(value, str) else len(_need_list(value, op))
    items = _need_list(value, op)
    if op == "filter":
        compare = step.get("compare", "eq")
        if "value" not in step and compare not in ("exists", "missing"):
            raise TransformError(f"'filter' with compare '{compare}' needs 'value'")
        test = _COMPARE[compare]
        try:
            return [i for i in items if test(_field(i, field), step.get("value"))]
        except TypeError as exc:
            raise TransformError(f"cannot compare with '{compare}': {exc}") from None
    if op == "sort_by":
        return sorted(
            items,
            key=lambda i: _sort_key(_field(i, field)),
            reverse=bool(step.get("descending")),
        )
    if op == "limit":
        return items[: step.get("n", 10)]
    if op == "flatten":
        return [x for item in items for x in (item if isinstance(item, list) else [item])]
    if op == "unique":
        seen: set[str] = set()
        unique = []
        for item in items:
            marker = json.dumps(_field(item, field), sort_keys=True, default=str)
            if marker not in seen:
                seen.add(marker)
                unique.append(item)
        return unique
    if op in ("sum", "min", "max", "avg"):
        numbers = _numbers(items, field, op)
        if op == "avg":
            return sum(numbers) / len(numbers)
        if op == "sum":
            return sum(numbers)
        return min(numbers) if op == "min" else max(numbers)
    if op in ("group_by", "count_by"):
        if not field:
            raise TransformError(f"'{op}' needs 'field'")
        groups: dict[str, list[Any]] = {}
        for item in items:
            key = _field(item, field)
            groups.setdefault(key if isinstance(key, str) else json.dumps(key), []).append(item)
        if op == "count_by":
            return {k: len(v) for k, v in groups.items()}
        return groups
    raise TransformError(f"unknown operation '{op}'")


def observe(
    data: Any, path: str | None = None, operations: list[dict[str, Any]] | None = None
) -> str | ToolResult:
    """Run the pipeline to the tool's observation; runs inside the isolated worker."""
    if isinstance(data, str):
        try:
            data = json.loads(data)
        except json.JSONDecodeError as exc:
            return fail(
                f"'data' is a string but not valid JSON ({exc.msg} at line {exc.lineno} "
                f"column {exc.colno}). Pass the JSON document as text or as a value."
            )
    steps = [("path", {"op": "get", "path": path})] if path else []
    steps += [(f"operation {n} ({s['op']})", s) for n, s in enumerate(operations or [], 1)]
    value = data
    for where, step in steps:
        try:
            value = apply(value, step)
        except (TransformError, PathError) as exc:
            return fail(f"{where}: {exc}. Operations: {_OPS_HELP}.")
    return clip(json.dumps(value, indent=2, ensure_ascii=False, default=str), MAX_OUTPUT)


async def _run(
    data: Any, path: str | None = None, operations: list[dict[str, Any]] | None = None
) -> str | ToolResult:
    return await isolate.run(
        observe,
        data,
        path,
        operations,
        timeout=TIMEOUT,
        hint="Simplify the 'matches' pattern (avoid nested quantifiers such as (a+)+) or "
        "send less data.",
    )


TOOL = FunctionTool(
    name="json_transform",
    description=(
        "Query and reshape JSON exactly instead of by hand. Give 'data', an optional 'path' "
        "('a.b', 'items[0]', 'items[*].name'), then 'operations' in order, e.g. path "
        "'orders', operations [{op: filter, field: status, value: open}, {op: sort_by, "
        "field: total, descending: true}, {op: pick, keys: [id, total]}]."
    ),
    parameters={
        "type": "object",
        "properties": {
            "data": {
                "description": "The JSON document, as text or as a JSON value.",
            },
            "path": {
                "type": "string",
                "description": "Optional path applied first, e.g. 'orders[*].items'.",
            },
            "operations": {
                "type": "array",
                "maxItems": MAX_OPERATIONS,
                "description": "Operations applied in order to the current value.",
                "items": {
                    "type": "object",
                    "properties": {
                        "op": {
                            "type": "string",
                            "enum": list(OPERATIONS),
                        },
                        "path": {"type": "string", "description": "get: the path."},
                        "keys": {
                            "type": "array",
                            "items": {"type": "string"},
                            "description": "pick/omit: key names (pick also takes paths).",
                        },
                        "field": {
                            "type": "string",
                            "description": "Field (or path) of each list item to use.",
                        },
                        "compare": {"type": "string", "enum": list(_COMPARE)},
                        "value": {"description": "filter: the value to compare with."},
                        "descending": {"type": "boolean"},
                        "n": {"type": "integer", "minimum": 0, "description": "limit: count."},
                    },
                    "required": ["op"],
                    "additionalProperties": False,
                },
            },
        },
        "required": ["data"],
        "additionalProperties": False,
    },
    fn=_run,
    category="data",
    # pure: no network, files, processes or other effects, so `fim eval` replay runs it
    # without a recorded result (fim.eval.tool_replay)
    metadata={"builtin": True, "access": "read", "pure": True},
)
