"""template_render: fill a Jinja2 template from variables, in a sandbox.

The environment is Jinja2's SandboxedEnvironment (no attribute access to internals, capped
`range`) with StrictUndefined, so a missing variable is an error the model can fix instead
of a silently empty string. Rendering runs in a killable worker process
(`fim.tools.isolate`) and streams with an output cap: `{{ 9**(9**8) }}` or nested loops end
at the deadline with the worker killed, never pinning the event loop or a thread.
"""

from __future__ import annotations

from typing import Any

from fim.tools import isolate
from fim.tools.base import FunctionTool
from fim.tools.builtin._common import fail
from fim.types import ToolResult

MAX_TEMPLATE = 100_000
MAX_OUTPUT = 50_000
TIMEOUT = 5.0


class _Stop(Exception):
    """Raised while rendering when the output cap is hit."""


def _environment() -> Any:
    # deferred: loading jinja2 costs tens of ms
    from jinja2 import StrictUndefined
    from jinja2.sandbox import SandboxedEnvironment

    return SandboxedEnvironment(
        undefined=StrictUndefined, autoescape=False, keep_trailing_newline=True
    )


def render(template: str, variables: dict[str, Any]) -> str:
    """Render or raise a jinja2 error / `_Stop` (what went wrong is in the message)."""
    compiled = _environment().from_string(template)
    out: list[str] = []
    size = 0
    for piece in compiled.generate(**variables):
        out.append(piece)
        size += len(piece)
        if size > MAX_OUTPUT:
            raise _Stop(f"the output is longer than {MAX_OUTPUT} characters")
    return "".join(out)


def observe(template: str, variables: dict[str, Any]) -> str | ToolResult:
    """Render to the tool's observation; runs inside the isolated worker."""
    # deferred: loading jinja2 costs tens of ms
    import jinja2

    given = ", ".join(sorted(variables)) or "none"
    try:
        return render(template, variables)
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


async def _run(template: str, variables: dict[str, Any] | None = None) -> str | ToolResult:
    return await isolate.run(
        observe,
        template,
        variables or {},
        timeout=TIMEOUT,
        hint="Render less data, simplify loops, avoid huge numbers.",
    )


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
    # pure: no network, files, processes or other effects, so `fim eval` replay runs it
    # without a recorded result (fim.eval.tool_replay)
    metadata={"builtin": True, "access": "read", "pure": True},
)
