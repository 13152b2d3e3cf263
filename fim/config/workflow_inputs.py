"""A workflow's declared inputs, checked: defaults applied, text converted to the declared
type, every problem said with the field it is at (`input_problems`).

The one check of inputs: a run's start (`fim.workflows.inputs.validate_inputs`, which
raises them as one `InvalidInputs`) and `fim validate`'s check of a workflow eval case's
`input` (`fim.build.eval_checks`), which reports each at its key. Values typed on a command
line (`--input amount=120`) arrive as text, so text is converted to the declared type.
Numbers are JSON's: NaN and Infinity (`nan`, `1e400`), which Python's parsers read, are
refused wherever they sit in an input (`fim.structured.non_finite`). A name that is not an
input gets a did-you-mean.
"""

from __future__ import annotations

import json
from typing import Any

from fim.config.schema import WorkflowDecl, WorkflowInput
from fim.config.suggestions import suggest
from fim.masking import known
from fim.structured import finite

_BOOLEANS = {
    "true": True,
    "yes": True,
    "on": True,
    "1": True,
    "false": False,
    "no": False,
    "off": False,
    "0": False,
}


def _unknown(key: str, decl: WorkflowDecl) -> str:
    """`unknown input 'expresion' (did you mean 'expression'?)`."""
    close = suggest(key, decl.inputs)
    meant = f" ({close})" if close and close.startswith("did you mean") else ""
    return f"unknown input '{key}'{meant}"


def _coerce(spec: WorkflowInput, value: Any) -> Any:
    """Convert text to the declared type; raise ValueError with what was expected."""
    kind = spec.type
    if kind == "string":
        if isinstance(value, str):
            return value
        raise ValueError(f"expected a string, got {type(value).__name__}")
    if isinstance(value, str):
        text = value.strip()
        try:
            if kind == "integer":
                return int(text)
            if kind == "number":
                number = float(text) if any(c in text for c in ".eE") else int(text)
        except ValueError:
            raise ValueError(
                f"expected {'an integer' if kind == 'integer' else 'a number'}"
            ) from None
        if kind == "number":  # `1e400` reads as inf
            return finite(number)
        if kind == "boolean":
            if text.lower() in _BOOLEANS:
                return _BOOLEANS[text.lower()]
            raise ValueError("expected a boolean (true/false)")
        try:
            value = json.loads(text)
        except ValueError:
            raise ValueError(f"expected a JSON {kind}") from None
    checks = {
        "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
        "number": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
        "boolean": lambda v: isinstance(v, bool),
        "object": lambda v: isinstance(v, dict),
        "array": lambda v: isinstance(v, list),
    }
    if not checks[kind](value):
        raise ValueError(f"expected {kind}, got {type(value).__name__}")
    finite(value)  # NonFinite, a ValueError: NaN would pass an `amount > 100` guard's else
    return value


def required(spec: WorkflowInput) -> bool:
    return spec.required if spec.required is not None else spec.default is None


def describe(decl: WorkflowDecl) -> str:
    """`order_id: string, reason?: string` — the input fields, for messages and stubs."""
    if not decl.inputs:
        return "none"
    return ", ".join(
        f"{name}{'' if required(spec) else '?'}: {spec.type}" for name, spec in decl.inputs.items()
    )


def input_problems(
    decl: WorkflowDecl, given: dict[str, Any] | None
) -> tuple[dict[str, Any], list[tuple[str, str]]]:
    """The values a run of `decl` starts with (defaults applied, text converted), and
    (input name, message) of every problem of `given`: an unknown name, a required input
    missing, a value of the wrong type."""
    given = dict(given or {})
    values: dict[str, Any] = {}
    problems: list[tuple[str, str]] = []
    for key in given:
        if key not in decl.inputs:
            problems.append((key, _unknown(key, decl)))
    for key, spec in decl.inputs.items():
        if key not in given or given[key] is None:
            if spec.default is not None:
                values[key] = spec.default
            elif required(spec):
                problems.append((key, f"missing input '{key}' ({spec.type})"))
            else:
                values[key] = None
            continue
        try:
            values[key] = _coerce(spec, given[key])
        except (ValueError, TypeError) as exc:
            # masked whole, then cut: a value cut first keeps the piece of a secret before
            # the cut, which no form matches (`Masker.head`)
            shown = repr(given[key])
            if len(shown) > 60:
                shown = known().head(shown, 57)[0] + "..."
            problems.append((key, f"input '{key}' = {shown}: {exc}"))
    return values, problems
