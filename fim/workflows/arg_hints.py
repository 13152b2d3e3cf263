"""A node's tool refused its arguments: the error as a workflow author reads it.

The registry words an invalid call for a model ("Fix the arguments and call the tool
again"), which retries; a workflow node has no model to retry, and its author edits YAML.
The commonest mistake is text where the tool wants a number: a tool's result that is not a
JSON object or array stays text (the calculator's `12` is `"12"`, README "Templates"), so
`total: "{{ nodes.tip.output }}"` passes `"12"` to a `number` parameter. The error then
says which template gave the text and how to convert it (newcomer-49 #8); nothing is
coerced, so a node passes exactly what its template says.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from typing import Any

from fim.workflows.templates import single_expression

INVALID = "Error: invalid arguments for "
"""How the registry and a project function's binding begin a refusal of the arguments."""

FOR_MODEL = " Fix the arguments and call the tool again."
"""The registry's advice to a model, which a workflow node has not."""

_INTEGER = re.compile(r"\s*[+-]?\d+\s*")
_BOOLEAN = {"true", "false"}
_LONGEST = 40
"""Longest text quoted in a hint: a number or a boolean is short."""


def for_author(
    content: str,
    parameters: Mapping[str, Any],
    args: Mapping[str, Any],
    sources: Mapping[str, Any] | None = None,
) -> str:
    """A tool's error result as a node's error: an argument refusal loses the advice for a
    model and gains, for each argument that is text of the wanted scalar type, the
    template that gave it and its fix (`sources`: the node's args before rendering)."""
    if not content.startswith(INVALID):
        return content
    text = content.replace(FOR_MODEL, "").rstrip().removesuffix(".")
    hints = [
        hint
        for key, value in args.items()
        if (hint := _text_hint(key, value, _wanted(parameters, key), sources)) is not None
    ]
    fix = "; ".join(hints) if hints else "fix the node's args"
    return f"{text} ({fix})"


def _wanted(parameters: Mapping[str, Any], key: str) -> list[str]:
    """The JSON types the tool's parameter `key` takes (`type` a name or a list)."""
    props = parameters.get("properties")
    prop = props.get(key) if isinstance(props, Mapping) else None
    kind = prop.get("type") if isinstance(prop, Mapping) else None
    if isinstance(kind, str):
        return [kind]
    return [k for k in kind if isinstance(k, str)] if isinstance(kind, list) else []


def _conversion(value: str, wanted: list[str]) -> tuple[str, str] | None:
    """(the JSON type the text reads as, the Jinja2 that converts an expression to it)."""
    if "string" in wanted or len(value) > _LONGEST:
        return None
    if "integer" in wanted and _INTEGER.fullmatch(value):
        return "integer", "{expr} | int"
    if "number" in wanted:
        try:
            number = float(value)
        except ValueError:
            number = math.nan
        if math.isfinite(number):
            return "number", "{expr} | float"
    if "boolean" in wanted and value.strip().lower() in _BOOLEAN:
        return "boolean", "{expr} | lower == 'true'"
    return None


def _text_hint(
    key: str, value: Any, wanted: list[str], sources: Mapping[str, Any] | None
) -> str | None:
    """How to pass `value` (text) as the scalar the parameter wants, or None."""
    if not isinstance(value, str) or (found := _conversion(value, wanted)) is None:
        return None
    kind, conversion = found
    quoted = json.dumps(value, ensure_ascii=False)
    source = sources.get(key) if sources is not None else None
    expr = single_expression(source) if isinstance(source, str) else None
    if expr is not None:
        fixed = "{{ " + conversion.format(expr=expr) + " }}"
        return f'{expr} is the text {quoted}: write "{fixed}"'
    if isinstance(source, str) and source == value:  # quoted in the YAML
        return f"args.{key} is the text {quoted}: write it without quotes for {_a(kind)}"
    return (
        f"args.{key} renders as the text {quoted}: {_a(kind)} needs the whole value to be one "
        'expression, e.g. "{{ ' + conversion.format(expr="nodes.ID.output") + ' }}"'
    )


def _a(kind: str) -> str:
    return f"an {kind}" if kind == "integer" else f"a {kind}"


__all__ = ["for_author"]
