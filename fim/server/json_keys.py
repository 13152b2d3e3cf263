"""Duplicate keys in a JSON request body: where the first one is, so the body is refused.

`{"input": "a", "input": "b"}` is valid JSON whose meaning depends on the parser: Python's
and pydantic-core's keep the last value, some proxies and firewalls the first, so what a
filter in front of fim checked need not be what fim runs (attack-50 F5). Hook output is
refused for the same reason (`fim.hooks.command_output`); request bodies now are too.
"""

from __future__ import annotations

import json
from typing import Any


class _Object(dict[str, Any]):
    """A parsed JSON object that remembers the first key it was given twice."""

    twice: str | None = None


def _pairs(pairs: list[tuple[str, Any]]) -> _Object:
    made = _Object(pairs)
    if len(made) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                made.twice = key
                break
            seen.add(key)
    return made


def duplicate_key(raw: bytes | str) -> str | None:
    """The dotted path (`messages.0.role`) of the first key some object of JSON text `raw`
    has twice, None when none has. `raw` was already parsed and its nesting capped
    (`fim.server.bodies.read_body`), so this parse is bounded too; text that Python's
    parser reads differently (it refuses what pydantic-core took) is left to that parse."""
    try:
        value = json.loads(raw, object_pairs_hook=_pairs)
    except (ValueError, RecursionError):
        return None
    stack: list[tuple[Any, tuple[str, ...]]] = [(value, ())]
    while stack:  # depth first, in the document's order
        item, path = stack.pop()
        if isinstance(item, _Object):
            if item.twice is not None:
                return ".".join((*path, item.twice))
            children = [(v, (*path, k)) for k, v in item.items()]
        elif isinstance(item, list):
            children = [(v, (*path, str(i))) for i, v in enumerate(item)]
        else:
            continue
        stack.extend(reversed(children))
    return None
