"""What a template may build: each value weighed, each width and count checked before it
builds anything, for `fim.config.template_guards`' environment.

Apart from the environment because it is the part a reader checks against a new way to
build a big value (an operator, a filter, a string method): one function per way, and
`weight`, the measure they share. Nothing here imports Jinja until a check refuses.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable
from typing import Any, NoReturn

MAX_REPEAT = 1_000_000  # items (characters) `"-" * n` may build; the largest width or count
MAX_POWER_BITS = 100_000  # bits of an integer `a ** b` or `a * b`
MAX_BUILT = 16_000_000  # characters (or items) one value a template builds may hold
_PERCENT_SPEC = re.compile(r"%(?:\([^)]*\))?[#0\- +]*(\*|\d*)(?:\.(\*|\d*))?")
_DIGITS = re.compile(r"\d+")


def refuse(why: str) -> NoReturn:
    # deferred: loading jinja2 costs tens of ms
    from jinja2.exceptions import SecurityError

    raise SecurityError(why)


# ---------------------------------------------------------------------- weighing values


def weight(value: Any, cap: int = MAX_BUILT) -> int:
    """About how many characters `value` prints as; the walk stops once past `cap`."""
    total = 0
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str | bytes):
            total += len(item) + 1
        elif isinstance(item, int) and not isinstance(item, bool):
            total += item.bit_length() // 3 + 1
        elif isinstance(item, dict):
            total += len(item) + 1
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list | tuple | set | frozenset):
            total += len(item) + 1
            stack.extend(item)
        else:
            total += 1
        if total > cap:
            return total
    return total


def check_weight(value: Any, what: str) -> Any:
    if weight(value) > MAX_BUILT:
        refuse(f"{what} would build more than {MAX_BUILT} characters")
    return value


def check_counts(args: Iterable[Any]) -> None:
    """A width, fill count or batch size is an int argument: past `MAX_REPEAT` it builds
    (or loops) that much."""
    for arg in args:
        if isinstance(arg, int) and not isinstance(arg, bool) and abs(arg) > MAX_REPEAT:
            refuse(f"the argument {arg} is larger than {MAX_REPEAT}")


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
            refuse(f"the format width {number} is larger than {MAX_REPEAT}")
    if nested:
        for arg in args:
            check_counts(arg.values() if isinstance(arg, dict) else (arg,))


def check_built(size: int, what: str) -> None:
    if size > MAX_BUILT:
        refuse(f"{what} would build {size} characters")


def check_str_call(subject: str, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    """A string method a template calls (`text.center(n)`, `text.replace(a, b)`), checked
    for what it would build before it runs."""
    if name in ("format", "format_map"):
        _check_format(subject, False, (*args, *kwargs.values()))
        return
    check_counts((*args, *kwargs.values()))
    if name == "replace" and len(args) >= 2:
        old, new = args[0], args[1]
        if isinstance(old, str) and isinstance(new, str):
            found = subject.count(old) if old else len(subject) + 1
            check_built(len(subject) + found * len(new), "replace")
    elif name == "expandtabs":
        size = args[0] if args else kwargs.get("tabsize", 8)
        if isinstance(size, int):
            check_built(len(subject) + subject.count("\t") * size, "expandtabs")
    elif name == "join" and args:
        check_built(weight(args[0]) * (1 + len(subject)), "join")


def check_binop(operator: str, left: Any, right: Any) -> None:
    """`"-" * width`, `base ** exp`, `fmt % width` or `a + a` with a model-chosen operand
    would allocate or compute without bound: refuse results past the caps first."""
    if operator == "*":
        for seq, times in ((left, right), (right, left)):
            if isinstance(seq, str | list | tuple) and isinstance(times, int):
                if len(seq) * times > MAX_REPEAT:
                    refuse(f"'*' would build {len(seq) * times} items")
                check_built(weight(seq) * times, "'*'")
        ints = isinstance(left, int) and isinstance(right, int)
        if ints and left.bit_length() + right.bit_length() > MAX_POWER_BITS:
            refuse("the product is too large to compute")
        return
    if operator == "+":
        if isinstance(left, str | list | tuple) and isinstance(right, str | list | tuple):
            check_built(weight(left) + weight(right), "'+'")
        return
    if operator == "%":
        if isinstance(left, str):
            _check_format(left, True, right if isinstance(right, tuple) else (right,))
        return
    powers = isinstance(left, int) and isinstance(right, int) and abs(left) > 1 and right > 0
    if powers and left.bit_length() * right > MAX_POWER_BITS:
        refuse(f"'{left} ** {right}' is too large to compute")


# ---------------------------------------------------------------------- builtin filters


def _check_counted(value: Any, *args: Any, **kwargs: Any) -> None:
    check_counts((*args, *kwargs.values()))
    fill = kwargs.get("fill_with", args[1] if len(args) > 1 else None)
    if fill is not None and args and isinstance(args[0], int):
        check_built(weight(fill) * abs(args[0]), "the fill")


def _check_format_filter(value: Any, *args: Any, **kwargs: Any) -> None:
    if isinstance(value, str):
        _check_format(value, True, (*args, kwargs))


def _check_replace_filter(eval_ctx: Any, value: Any, *args: Any, **kwargs: Any) -> None:
    if isinstance(value, str):
        check_str_call(value, "replace", args, kwargs)


def _check_indent(value: Any, width: Any = 4, *_: Any, **kwargs: Any) -> None:
    width = kwargs.get("width", width)
    if isinstance(width, int):
        check_counts((width,))
        width = " " * min(abs(width), MAX_REPEAT)
    if isinstance(value, str) and isinstance(width, str):
        check_built(len(value) + (value.count("\n") + 1) * len(width), "indent")


def _check_wordwrap(env: Any, value: Any, *args: Any, **kwargs: Any) -> None:
    check_counts((*args, *kwargs.values()))
    wrap = kwargs.get("wrapstring", args[2] if len(args) > 2 else None)
    if isinstance(value, str) and isinstance(wrap, str):
        check_built(len(value) * (1 + len(wrap)), "wordwrap")


def _check_join(eval_ctx: Any, value: Any, d: Any = "", *_: Any, **kwargs: Any) -> None:
    items = value if isinstance(value, list | tuple | str) else ()
    check_built(weight(items) * (1 + len(str(kwargs.get("d", d)))), "join")


def guarded_filters(filters: dict[str, Any]) -> dict[str, Any]:
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
        "join": _check_join,
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
