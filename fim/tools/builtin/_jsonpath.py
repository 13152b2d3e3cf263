"""A small path language over JSON values, shared by json_transform (and usable by others).

Syntax (a JMESPath-like subset, easy for a model to write):
  `a.b.c`         object keys          `items[0]`, `items[-1]`  list indexes
  `items[*].id`   map over a list (or an object's values); missing keys are skipped
  `["odd key"]`   quoted keys          `$` / `$.` prefix        the root (optional)
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Any

_TOKEN = re.compile(
    r"""\s*(?:
        (?P<dot>\.)
      | \[\s*(?P<index>-?\d+)\s*\]
      | \[\s*(?P<star>\*)\s*\]
      | \[\s*(?P<q>["'])(?P<quoted>(?:\\.|(?!(?P=q))[^\\])*)(?P=q)\s*\]
      | (?P<wild>\*)
      | (?P<name>[A-Za-z_$@][\w$@-]*)
    )""",
    re.VERBOSE,
)

# The quoted-key branch must not let a backslash match two ways (`\\.` or `.`): that
# ambiguity made `["\\\\...` (no closing quote) backtrack exponentially.

STAR = object()
_MISSING = object()


class PathError(ValueError):
    """A path that does not parse or does not match; the message is for the model."""


@lru_cache(maxsize=256)
def parse(path: str) -> tuple[str | int | object, ...]:
    """Split a path into keys (str), indexes (int) and STAR (projection)."""
    text = path.strip()
    if text in ("", "$", "@"):
        return ()
    if text.startswith("$."):
        text = text[2:]
    elif text.startswith("$["):
        text = text[1:]
    tokens: list[str | int | object] = []
    pos = 0
    expect_segment = True
    while pos < len(text):
        match = _TOKEN.match(text, pos)
        if match is None or match.end() == pos:
            raise PathError(f"cannot parse path '{path}' at position {pos}: '{text[pos:]}'")
        pos = match.end()
        if match["dot"]:
            if expect_segment:
                raise PathError(f"unexpected '.' in path '{path}' at position {pos - 1}")
            expect_segment = True
            continue
        if match["name"] is not None and not expect_segment:
            raise PathError(f"missing '.' before '{match['name']}' in path '{path}'")
        if match["index"] is not None:
            tokens.append(int(match["index"]))
        elif match["star"] or match["wild"]:
            tokens.append(STAR)
        elif match["q"]:
            tokens.append(re.sub(r"\\(.)", r"\1", match["quoted"]))
        else:
            tokens.append(match["name"])
        expect_segment = False
    if expect_segment and tokens:
        raise PathError(f"path '{path}' ends with '.'")
    return tuple(tokens)


def _describe(value: Any) -> str:
    if isinstance(value, dict):
        keys = list(value)
        shown = ", ".join(repr(k) for k in keys[:20]) + (" ..." if len(keys) > 20 else "")
        return f"an object with keys {shown}" if keys else "an empty object"
    if isinstance(value, list):
        return f"a list of {len(value)} items"
    return f"a {type(value).__name__} ({str(value)[:40]!r})"


def _walk(value: Any, tokens: tuple[str | int | object, ...], trail: str, strict: bool) -> Any:
    if not tokens:
        return value
    token, rest = tokens[0], tokens[1:]
    if token is STAR:
        if isinstance(value, dict):
            items = list(value.values())
        elif isinstance(value, list):
            items = value
        else:
            if strict:
                raise PathError(
                    f"'{trail or '$'}[*]' needs a list or object, found {_describe(value)}"
                )
            return _MISSING
        results = (_walk(item, rest, f"{trail}[*]", False) for item in items)
        return [r for r in results if r is not _MISSING]
    if isinstance(token, int):
        if isinstance(value, list) and -len(value) <= token < len(value):
            return _walk(value[token], rest, f"{trail}[{token}]", strict)
        if strict:
            raise PathError(f"'{trail or '$'}[{token}]' does not exist: found {_describe(value)}")
        return _MISSING
    if isinstance(value, dict) and token in value:
        return _walk(value[token], rest, f"{trail}.{token}" if trail else str(token), strict)
    if strict:
        hint = (
            f"; use '{trail}[*].{token}' to take it from every item"
            if isinstance(value, list)
            else ""
        )
        raise PathError(
            f"key '{token}' not found at '{trail or '$'}': found {_describe(value)}{hint}"
        )
    return _MISSING


def query(value: Any, path: str) -> Any:
    """Evaluate `path` on `value`; raises PathError naming where it failed and what is there."""
    return _walk(value, parse(path), "", True)


def lookup(value: Any, path: str, default: Any = None) -> Any:
    """Like `query` but returns `default` when the path does not match (for filters)."""
    found = _walk(value, parse(path), "", False)
    return default if found is _MISSING else found
