"""One JSONPath dialect for fim: RFC 9535 JSONPath through `python-jsonpath`.

Used by the `json_transform` tool (model-written paths) and the `json_path` eval assertion
(author-written paths); they used to parse two hand-written dialects. python-jsonpath was
chosen over jmespath because both old dialects were already JSONPath-shaped and it reads every
path users and models write today unchanged — `$.a.b[0]['c d']`, `orders[*].id`,
`items[-1]`, `["odd key"]`, a `$` prefix or none — while jmespath has no `$` root and reads
`['c d']` as a list literal. It also brings filters (`orders[?@.total > 10]`).

A path matching one place (a singular query) gives that value; a path with `*`, `..` or a
filter gives the list of every match. A singular path that matches nothing raises
`PathError` saying where the walk stopped and what was there, so a model can correct it.
python-jsonpath (~0.1 s to import) loads on first use.
"""

from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING, Any

from fim.masking import known

if TYPE_CHECKING:
    from jsonpath import JSONPath, JSONPathEnvironment

_MISSING = object()


class PathError(ValueError):
    """A path that does not parse or does not match; the message is for the model."""


@lru_cache(maxsize=1)
def _environment() -> JSONPathEnvironment:
    """The default environment without the regex filter functions (`match`, `search`): a
    model-written pattern could backtrack for ever; `json_transform` has a guarded
    `matches` operation for that."""
    # deferred: loading jsonpath costs tens of ms
    from jsonpath import JSONPathEnvironment

    class Environment(JSONPathEnvironment):
        def setup_function_extensions(self) -> None:
            super().setup_function_extensions()
            for name in ("match", "search"):
                self.function_extensions.pop(name, None)

    return Environment()


@lru_cache(maxsize=256)
def compile_path(path: str) -> JSONPath:
    """The compiled path; `PathError` with the position when it does not parse."""
    # deferred: loading jsonpath costs tens of ms
    from jsonpath import JSONPath, JSONPathError

    text = path.strip()
    if text == "@":  # the old tool dialect's spelling of the root
        text = "$"
    try:
        compiled = _environment().compile(text or "$")
    except JSONPathError as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise PathError(f"cannot parse path '{path}': {first}") from None
    if not isinstance(compiled, JSONPath):  # a union of paths (`a | b`)
        raise PathError(f"cannot parse path '{path}': combine paths one at a time")
    return compiled


def check(path: str) -> str | None:
    """Why `path` does not parse, or None (for `fim validate`)."""
    try:
        compile_path(path)
    except PathError as exc:
        return str(exc)
    return None


def _describe(value: Any) -> str:
    if isinstance(value, dict):
        keys = list(value)
        shown = ", ".join(repr(k) for k in keys[:20]) + (" ..." if len(keys) > 20 else "")
        return f"an object with keys {shown}" if keys else "an empty object"
    if isinstance(value, list):
        return f"a list of {len(value)} items"
    # masked whole, then cut: a value cut first keeps the piece of a secret before the cut
    return f"a {type(value).__name__} ({known().head(str(value), 40)[0]!r})"


def _explain(value: Any, compiled: JSONPath) -> str:
    """Where a singular path stops matching `value`, and what is there instead."""
    trail = ""
    for segment in compiled.segments:
        selector = segment.selectors[0]
        name = getattr(selector, "name", None)
        if isinstance(name, str):
            if isinstance(value, dict) and name in value:
                value, trail = value[name], f"{trail}.{name}" if trail else name
                continue
            hint = (
                f"; use '{trail}[*].{name}' to take it from every item"
                if isinstance(value, list)
                else ""
            )
            return f"key '{name}' not found at '{trail or '$'}': found {_describe(value)}{hint}"
        index = getattr(selector, "index", None)
        if isinstance(index, int):
            if isinstance(value, list) and -len(value) <= index < len(value):
                value, trail = value[index], f"{trail}[{index}]"
                continue
            return f"'{trail or '$'}[{index}]' does not exist: found {_describe(value)}"
        break
    return f"path '{compiled}' matches nothing"


def _find(value: Any, path: str) -> tuple[Any, JSONPath]:
    compiled = compile_path(path)
    found = compiled.findall(value)
    if not compiled.singular_query():
        return found, compiled
    return (found[0] if found else _MISSING), compiled


def query(value: Any, path: str) -> Any:
    """Evaluate `path` on `value`: the value at a singular path, the list of matches
    otherwise. Raises PathError naming where a singular path failed and what is there."""
    found, compiled = _find(value, path)
    if found is _MISSING:
        raise PathError(_explain(value, compiled))
    return found


def lookup(value: Any, path: str, default: Any = None) -> Any:
    """Like `query` but returns `default` when a singular path does not match (filters)."""
    found, _ = _find(value, path)
    return default if found is _MISSING else found


__all__ = ["PathError", "check", "compile_path", "lookup", "query"]
