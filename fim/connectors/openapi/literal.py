"""A spec's text stays text: `${...}` copied from an OpenAPI document is written `$${...}`.

fim interpolates every string value of a connector file from the environment, so a spec's
server variable default `eu-${OPENAI_API_KEY}` copied as it is became a base_url that sent
the operator's key to the spec's host. A spec chooses no variables: the only variables of
an imported connector are the `${NAME_TOKEN}`-style ones fim writes for `auth:` (and
`${NAME_URL}` when there is no server). Everything else the importer copies is escaped with
the interpolation's own literal form, so the loader reads back exactly the spec's text, and
the reviewer is told once where the document wrote one.
"""

from __future__ import annotations

import json
from typing import Any

from fim.config.interpolate import REFERENCE, escaped

_SHOWN = 60


def literal_data(value: Any) -> Any:
    """A copy of `value` with every string value `escaped` (mapping keys stay as they
    are: the loader interpolates values only). A copy, not in place: the resolver hands the
    same inlined schema to several actions, and escaping it twice would add two `$`."""
    if isinstance(value, str):
        return escaped(value)
    if isinstance(value, dict):
        return {k: literal_data(v) for k, v in value.items()}
    if isinstance(value, list):
        return [literal_data(v) for v in value]
    return value


def spec_variables(document: dict[str, Any]) -> str | None:
    """The warning for a document that writes `${...}` (in a value or a key, which becomes
    an action's `path` or a `required` entry), naming the first place; None without one.

    Most documents have none, so a C-speed check of the whole document comes first (JSON
    text holds `${` only inside a string); the walk for the place runs only when it hits.
    """
    try:
        if "${" not in json.dumps(document, ensure_ascii=False, check_circular=False):
            return None
    except (TypeError, ValueError, RecursionError):
        pass  # not plain JSON data: the walk decides
    found: list[tuple[str, str]] = []
    _find(document, found)
    if not found:
        return None
    where, text = found[0]
    shown = text if len(text) <= _SHOWN else text[: _SHOWN - 3] + "..."
    more = f" (and {len(found) - 1} more in the document)" if len(found) > 1 else ""
    return (
        f"{where or 'the document'} writes '{shown}'{more}: the connector keeps a spec's "
        "${...} as literal text (written $${...}), never a variable fim fills from the "
        "environment; write ${VAR} by hand where you want one"
    )


def _find(document: Any, found: list[tuple[str, str]]) -> None:
    """(place, first `${...}`) of every string of `document` the interpolation would
    expand, in document order; a loop, not recursion, so no nesting depth stops it."""
    stack: list[tuple[Any, str]] = [(document, "")]
    while stack:
        value, where = stack.pop()
        if isinstance(value, str):
            match = REFERENCE.search(value) if "${" in value else None
            if match is not None:
                found.append((where, match.group(0)))
        elif isinstance(value, dict):
            for k, v in reversed(value.items()):
                at = f"{where}.{k}" if where else str(k)
                stack += [(v, at), (k, at)]
        elif isinstance(value, list):
            stack += [(v, f"{where}[{i}]") for i, v in reversed(list(enumerate(value)))]
