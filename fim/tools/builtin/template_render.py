"""template_render: fill a Jinja2 template from variables, in a sandbox.

The environment is Jinja2's SandboxedEnvironment (no attribute access to internals, capped
`range`) with StrictUndefined, so a missing variable is an error the model can fix instead
of a silently empty string. Rendering streams in a worker thread and stops at an output cap
or a deadline, so a runaway loop cannot pin the event loop.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from fim.tools.base import FunctionTool
from fim.tools.builtin._common import fail
from fim.types import ToolResult

MAX_TEMPLATE = 100_000
MAX_OUTPUT = 50_000
DEADLINE = 5.0


class _Stop(Exception):
    """Raised inside the rendering thread when the output cap or the deadline is hit."""


def _environment() -> Any:
    from jinja2 import StrictUndefined
    from jinja2.sandbox import SandboxedEnvironment

    return SandboxedEnvironment(
        undefined=StrictUndefined, autoescape=False, keep_trailing_newline=True
    )


def render(template: str, variables: dict[str, Any]) -> str:
    """Render or raise a jinja2 error / `_Stop` (what went wrong is in the message)."""
    compiled = _environment().from_string(template)
    started = time.monotonic()
    out: list[str] = []
    size = 0
    for piece in compiled.generate(**variables):
        out.append(piece)
        size += len(piece)
        if size > MAX_OUTPUT:
            raise _Stop(f"the output is longer than {MAX_OUTPUT} characters")
        if time.monotonic() - started > DEADLINE:
            raise _Stop(f"rendering took longer than {DEADLINE:g}s")
    return "".join(out)


async def _run(template: str, variables: dict[str, Any] | None = None) -> str | ToolResult:
    import jinja2

    variables = variables or {}
    given = ", ".join(sorted(variables)) or "none"
    try:
        return await asyncio.to_thread(render, template, variables)
    except jinja2.TemplateSyntaxError as exc:
        return fail(f"template syntax error on line {exc.lineno}: {exc.message}. Fix the template.")
    except jinja2.UndefinedError as exc:
        return fail(
            f"{exc.message}. Variables provided: {given}. Pass the missing value in "
            "'variables' or use a default, e.g. {{ name | default('n/a') }}."
        )
    except jinja2.exceptions.SecurityError as exc:
        return fail(f"the sandbox refused an operation: {exc}. Use plain data access only.")
    except _Stop as exc:
        return fail(f"{exc}. Render less data or simplify loops.")
    except (jinja2.TemplateError, TypeError, ValueError, ArithmeticError) as exc:
        return fail(f"rendering failed: {type(exc).__name__}: {exc}. Fix the template.")


TOOL = FunctionTool(
    name="template_render",
    description=(
        "Render a Jinja2 template with the given variables. Syntax: {{ name }}, {% for %}, "
        "{% if %}, filters; every variable it uses must be supplied. Sandboxed: no imports "
        "or file access."
    ),
    parameters={
        "type": "object",
        "properties": {
            "template": {
                "type": "string",
                "maxLength": MAX_TEMPLATE,
                "description": "Jinja2 template text, e.g. 'Hello {{ name }}!'.",
            },
            "variables": {
                "type": "object",
                "description": 'Values for the template\'s variables, e.g. {"name": "Ada"}.',
            },
        },
        "required": ["template"],
        "additionalProperties": False,
    },
    fn=_run,
    category="text",
    metadata={"builtin": True, "access": "read"},
)
