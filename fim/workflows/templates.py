"""Sandboxed Jinja2 for workflow templates: node args, prompts, `if` expressions, outputs.

Workflow files are reviewed code but still data: templates run in Jinja2's immutable
sandbox with StrictUndefined, so a typo (`nodes.lokup.output`) fails the node with a clear
message instead of rendering an empty string into a payment request. A string that is
exactly one `{{ expr }}` evaluates to the expression's native value, so
`args: {order: "{{ nodes.lookup.output }}"}` passes a dict, not its repr.
"""

from __future__ import annotations

import functools
import json
import os
import re
from collections.abc import Callable, Iterable
from functools import lru_cache
from typing import Any, NoReturn

_SINGLE_EXPR = re.compile(r"^\s*\{\{(?P<expr>(?:(?!\}\}).)*)\}\}\s*$", re.DOTALL)
_FALSE_WORDS = frozenset({"", "false", "no", "off", "0", "none", "null"})


class TemplateError(Exception):
    """A template failed to parse or render; the message names the template text."""


MAX_REPEAT = 1_000_000  # items (characters) `"-" * n` may build; the largest width or count
MAX_POWER_BITS = 100_000  # bits of an integer `a ** b`
MAX_BUILT = 16_000_000  # characters one string operation (`replace`, `indent`...) may build

_PERCENT_SPEC = re.compile(r"%(?:\([^)]*\))?[#0\- +]*(\*|\d*)(?:\.(\*|\d*))?")
_DIGITS = re.compile(r"\d+")


def _refuse(why: str) -> NoReturn:
    # deferred: loading jinja2 costs tens of ms
    from jinja2.exceptions import SecurityError

    raise SecurityError(why)


def _check_counts(args: Iterable[Any]) -> None:
    """A width, fill count or batch size is an int argument: past `MAX_REPEAT` it builds
    (or loops) that much."""
    for arg in args:
        if isinstance(arg, int) and not isinstance(arg, bool) and abs(arg) > MAX_REPEAT:
            _refuse(f"the argument {arg} is larger than {MAX_REPEAT}")


def _check_format(text: str, percent: bool, args: Iterable[Any]) -> None:
    """Widths and precisions of a format string (which may be model output too): written
    in it (`%0999999999d`, `{:>999999999}`), or taken from the arguments (`%*d`,
    `{:>{}}`), which are only checked then (`{:,}` of a large number is fine)."""
    if percent:
        numbers = [n for m in _PERCENT_SPEC.finditer(text) for n in m.groups() if n]
        nested = "*" in numbers
    else:
        # deferred: string.Formatter only when a template formats
        from string import Formatter

        try:
            specs = [spec for _, _, spec, _ in Formatter().parse(text) if spec]
        except ValueError:
            return  # str.format raises the same error itself
        numbers = [n for spec in specs for n in _DIGITS.findall(spec)]
        nested = any("{" in spec for spec in specs)
    for number in numbers:
        if number != "*" and (len(number) > 7 or int(number) > MAX_REPEAT):
            _refuse(f"the format width {number} is larger than {MAX_REPEAT}")
    if nested:
        for arg in args:
            _check_counts(arg.values() if isinstance(arg, dict) else (arg,))


def _check_built(size: int, what: str) -> None:
    if size > MAX_BUILT:
        _refuse(f"{what} would build {size} characters")


def _check_str_call(subject: str, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    """A string method a template calls (`text.center(n)`, `text.replace(a, b)`), checked
    for what it would build before it runs."""
    if name in ("format", "format_map"):
        _check_format(subject, False, (*args, *kwargs.values()))
        return
    _check_counts((*args, *kwargs.values()))
    if name == "replace" and len(args) >= 2:
        old, new = args[0], args[1]
        if isinstance(old, str) and isinstance(new, str):
            found = subject.count(old) if old else len(subject) + 1
            _check_built(len(subject) + found * len(new), "replace")
    elif name == "expandtabs":
        size = args[0] if args else kwargs.get("tabsize", 8)
        if isinstance(size, int):
            _check_built(len(subject) + subject.count("\t") * size, "expandtabs")


def _check_binop(operator: str, left: Any, right: Any) -> None:
    """The template is the author's, but its operands may be model output: `"-" * width`,
    `base ** exp` or `fmt % width` with a model-chosen number would allocate or compute
    without bound on the event loop. Refuse results past the caps before computing them."""
    if operator == "*":
        for seq, times in ((left, right), (right, left)):
            sized = isinstance(seq, str | list | tuple) and isinstance(times, int)
            if sized and len(seq) * times > MAX_REPEAT:
                _refuse(f"'*' would build {len(seq) * times} items")
        return
    if operator == "%":
        if isinstance(left, str):
            _check_format(left, True, right if isinstance(right, tuple) else (right,))
        return
    powers = isinstance(left, int) and isinstance(right, int) and abs(left) > 1 and right > 0
    if powers and left.bit_length() * right > MAX_POWER_BITS:
        _refuse(f"'{left} ** {right}' is too large to compute")


def _guarded_filters(filters: dict[str, Any]) -> dict[str, Any]:
    """The builtin filters that take a width, count or text to insert, each checked for
    what it would build first (the originals' signatures and pass-arguments kept)."""
    checks: dict[str, Callable[..., None]] = {
        "center": _check_counted,
        "batch": _check_counted,
        "slice": _check_counted,
        "format": _check_format_filter,
        "indent": _check_indent,
        "wordwrap": _check_wordwrap,
        "replace": _check_replace_filter,
    }
    guarded = {}
    for name, check in checks.items():
        original = filters[name]

        @functools.wraps(original)
        def run(*args: Any, _f: Any = original, _c: Any = check, **kwargs: Any) -> Any:
            _c(*args, **kwargs)
            return _f(*args, **kwargs)

        guarded[name] = run
    return guarded


def _check_counted(value: Any, *args: Any, **kwargs: Any) -> None:
    _check_counts((*args, *kwargs.values()))


def _check_format_filter(value: Any, *args: Any, **kwargs: Any) -> None:
    if isinstance(value, str):
        _check_format(value, True, (*args, kwargs))


def _check_replace_filter(eval_ctx: Any, value: Any, *args: Any, **kwargs: Any) -> None:
    if isinstance(value, str):
        _check_str_call(value, "replace", args, kwargs)


def _check_indent(value: Any, width: Any = 4, *_: Any, **kwargs: Any) -> None:
    width = kwargs.get("width", width)
    if isinstance(width, int):
        _check_counts((width,))
        width = " " * min(abs(width), MAX_REPEAT)
    if isinstance(value, str) and isinstance(width, str):
        _check_built(len(value) + (value.count("\n") + 1) * len(width), "indent")


def _check_wordwrap(env: Any, value: Any, *args: Any, **kwargs: Any) -> None:
    _check_counts((*args, *kwargs.values()))
    wrap = kwargs.get("wrapstring", args[2] if len(args) > 2 else None)
    if isinstance(value, str) and isinstance(wrap, str):
        _check_built(len(value) * (1 + len(wrap)), "wordwrap")


@lru_cache(maxsize=1)
def _environment() -> Any:
    # deferred: loading jinja2 costs tens of ms
    import jinja2
    from jinja2.sandbox import ImmutableSandboxedEnvironment
    from jinja2.utils import generate_lorem_ipsum as lorem

    class Guarded(ImmutableSandboxedEnvironment):
        intercepted_binops = frozenset({"*", "**", "%"})

        def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
            _check_binop(operator, left, right)
            return super().call_binop(context, operator, left, right)

        def call(self, context: Any, obj: Any, /, *args: Any, **kwargs: Any) -> Any:
            subject = getattr(obj, "__self__", None)
            if isinstance(subject, str):
                _check_str_call(subject, getattr(obj, "__name__", ""), args, kwargs)
            elif obj is lorem:
                _check_counts((*args, *kwargs.values()))
            return super().call(context, obj, *args, **kwargs)

        def wrap_str_format(self, value: Any) -> Any:
            """`text.format` is wrapped where it is read (Jinja 3.1.5+), so `call` sees
            the wrapper: the check goes in it."""
            wrapped = super().wrap_str_format(value)
            if wrapped is None:
                return None
            subject, name = value.__self__, value.__name__

            def checked(*args: Any, **kwargs: Any) -> Any:
                _check_str_call(subject, name, args, kwargs)
                return wrapped(*args, **kwargs)

            return checked

    env = Guarded(undefined=jinja2.StrictUndefined, autoescape=False)
    env.filters.update(_guarded_filters(env.filters))
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
    return text if len(text) <= 80 else text[:77] + "..."


def _wrap(exc: Exception, text: str) -> TemplateError:
    # deferred: loading jinja2 costs tens of ms
    import jinja2

    if isinstance(exc, jinja2.UndefinedError):
        why = f"{exc.message} (check the name; nodes are only visible once they finished)"
    elif isinstance(exc, jinja2.TemplateSyntaxError):
        why = f"syntax error: {exc.message}"
    else:
        why = f"{type(exc).__name__}: {exc}"
    return TemplateError(f"template {_short(text)!r}: {why}")


def is_template(value: str) -> bool:
    return "{{" in value or "{%" in value


def evaluate(expr: str, context: dict[str, Any]) -> Any:
    """Evaluate a bare Jinja2 expression (`inputs.amount > 100`) to its native value."""
    # deferred: loading jinja2 costs tens of ms
    import jinja2

    try:
        result = _compiled_expression(expr.strip())(**context)
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
            return _compiled_template(value).render(**context)
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
