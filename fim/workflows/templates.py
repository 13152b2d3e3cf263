"""Sandboxed Jinja2 for workflow templates: node args, prompts, `if` expressions, outputs.

Workflow files are reviewed code but still data: templates run in Jinja2's immutable
sandbox with StrictUndefined, so a typo (`nodes.lokup.output`) fails the node with a clear
message instead of rendering an empty string into a payment request. A string that is
exactly one `{{ expr }}` evaluates to the expression's native value, so
`args: {order: "{{ nodes.lookup.output }}"}` passes a dict, not its repr. What a template
may build, write and loop over is bounded by the one guarded environment,
`fim.config.template_guards`, which agents' instructions render with too.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable
from functools import lru_cache
from typing import Any

from fim.config import template_guards
from fim.config.template_guards import guarded_environment
from fim.config.templates import node_attribute_problem
from fim.masking import known

_SINGLE_EXPR = re.compile(r"^\s*\{\{(?P<expr>(?:(?!\}\}).)*)\}\}\s*$", re.DOTALL)
_FALSE_WORDS = frozenset({"", "false", "no", "off", "0", "none", "null"})


class TemplateError(Exception):
    """A template failed to parse or render; the message names the template text."""


class NodeScope(dict[str, Any]):
    """What a template reads of a finished node (`nodes.<id>`): its output and status
    (`NODE_ATTRIBUTES`), knowing its id, so a name it lacks (`nodes.tip.outptu`) is said as
    `fim validate` says it, not as "'dict object' has no attribute"."""

    def __init__(self, node: str, output: Any, status: str) -> None:
        super().__init__(output=output, status=status)
        self.node = node


class NodeAttributeMissing(Exception):
    """Marks the undefined error of a name a node does not have (`_undefined`)."""


@lru_cache(maxsize=1)
def _undefined() -> Any:
    """StrictUndefined, saying a node's missing attribute in `fim validate`'s words."""
    # deferred: loading jinja2 costs tens of ms
    import jinja2

    class Missing(jinja2.UndefinedError, NodeAttributeMissing):
        pass

    class Undefined(jinja2.StrictUndefined):
        __slots__ = ()

        def __init__(self, hint: Any = None, obj: Any = jinja2.utils.missing, **kw: Any) -> None:
            if isinstance(obj, NodeScope):
                kw["exc"] = Missing
            super().__init__(hint, obj, **kw)

        @property
        def _undefined_message(self) -> str:
            node, name = self._undefined_obj, self._undefined_name
            if isinstance(node, NodeScope) and isinstance(name, str):
                return "{} ({})".format(*node_attribute_problem(node.node, name))
            return str(super()._undefined_message)

    return Undefined


@lru_cache(maxsize=1)
def _environment() -> Any:
    env = guarded_environment(undefined=_undefined(), autoescape=False)
    env.filters["tojson"] = _tojson
    return env


def _tojson(value: Any) -> str:
    return json.dumps(value, default=str, ensure_ascii=False)


@lru_cache(maxsize=4096)
def _compiled_expression(expr: str) -> Any:
    return _environment().compile_expression(expr, undefined_to_none=False)


@lru_cache(maxsize=4096)
def _compiled_template(text: str) -> Any:
    return _environment().from_string(text)


def _short(text: str) -> str:
    """A template quoted in an error. Its text may hold a `${VAR}` value (interpolated at
    load): masked whole, then cut (`Masker.head`), or the cut leaves a piece of it."""
    return text if len(text) <= 80 else known().head(text, 77)[0] + "..."


def _wrap(exc: Exception, text: str) -> TemplateError:
    # deferred: loading jinja2 costs tens of ms
    import jinja2

    if isinstance(exc, NodeAttributeMissing):
        why = str(exc)
    elif isinstance(exc, jinja2.UndefinedError):
        why = f"{exc.message} (check the name; nodes are only visible once they finished)"
    elif isinstance(exc, jinja2.TemplateSyntaxError):
        why = f"syntax error: {exc.message}"
    else:
        why = f"{type(exc).__name__}: {exc}"
    return TemplateError(f"template {_short(text)!r}: {why}")


def is_template(value: str) -> bool:
    return "{{" in value or "{%" in value


def single_expression(value: str) -> str | None:
    """The expression of a string that is exactly one `{{ expr }}` (which `render` passes
    with its own type), stripped; None for any other string."""
    single = _SINGLE_EXPR.match(value)
    return single.group("expr").strip() if single is not None and "{%" not in value else None


def evaluate(expr: str, context: dict[str, Any]) -> Any:
    """Evaluate a bare Jinja2 expression (`inputs.amount > 100`) to its native value."""
    # deferred: loading jinja2 costs tens of ms
    import jinja2

    try:
        result = template_guards.evaluate(_compiled_expression(expr.strip()), context)
        if isinstance(result, jinja2.Undefined):
            str(result)  # StrictUndefined raises here, naming what was undefined
        return result
    except TemplateError:
        raise
    except Exception as exc:
        raise _wrap(exc, expr) from None


def render(value: Any, context: dict[str, Any]) -> Any:
    """Render strings in `value` (recursively through dicts and lists).

    A string that is exactly one `{{ expr }}` keeps the expression's native type; any other
    string with template syntax renders to text; everything else passes through unchanged.
    """
    if isinstance(value, str):
        if not is_template(value):
            return value
        single = _SINGLE_EXPR.match(value)
        if single is not None and "{%" not in value:
            return evaluate(single.group("expr"), context)
        try:
            return template_guards.render(_compiled_template(value), context)
        except Exception as exc:
            raise _wrap(exc, value) from None
    if isinstance(value, dict):
        return {k: render(v, context) for k, v in value.items()}
    if isinstance(value, list):
        return [render(v, context) for v in value]
    return value


def render_text(value: str, context: dict[str, Any]) -> str:
    """Render a template that must produce text (a prompt, an agent's task)."""
    result = render(value, context)
    if isinstance(result, str):
        return result

    return json.dumps(result, default=str, ensure_ascii=False)


def truthy(value: str, context: dict[str, Any]) -> bool:
    """Decide a condition: `{{ expr }}`, a bare expression, or text ("false", "0", "")."""
    if not is_template(value):
        result: Any = evaluate(value, context)
    else:
        result = render(value, context)
    if isinstance(result, str):
        return result.strip().lower() not in _FALSE_WORDS
    return bool(result)


def allowed_env(allowlist: Iterable[str]) -> dict[str, str]:
    """The environment variables a workflow may read as `env.NAME`: only allow-listed ones,
    so a template cannot exfiltrate `OPENAI_API_KEY` into a connector call."""
    return {name: os.environ[name] for name in allowlist if name in os.environ}


def check_syntax(value: Any) -> list[str]:
    """Syntax errors in every template inside `value`, for static checks."""
    errors: list[str] = []
    if isinstance(value, str) and is_template(value):
        single = _SINGLE_EXPR.match(value)
        try:
            if single is not None and "{%" not in value:
                _compiled_expression(single.group("expr").strip())
            else:
                _compiled_template(value)
        except Exception as exc:
            errors.append(str(_wrap(exc, value)))
    elif isinstance(value, dict):
        for v in value.values():
            errors.extend(check_syntax(v))
    elif isinstance(value, list):
        for v in value:
            errors.extend(check_syntax(v))
    return errors
