"""A cell of a CSV eval file that is not a var: an `__expected` cell as one assertion
(`contains: Paris`, promptfoo's spellings included) and an `__approvals` cell. Kept apart
from `fim.config.case_csv`, the RFC 4180 reader, so each reads on its own."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from fim.config.problems import suggest
from fim.config.schema import Assertion
from fim.config.yamlio import YamlSyntaxError, parse
from fim.errors import Problem

if TYPE_CHECKING:
    from fim.config.declarations import Declarations

_PROMPTFOO_ONLY = {
    "javascript": "code in a cell",
    "fn": "code in a cell",
    "similar": "embedding similarity",
    "levenshtein": "levenshtein",
    "moderation": "moderation",
}
"""promptfoo assertion types fim has no counterpart for: named, rather than read as an
`equals` of the whole cell."""

_ALIASES = {"llm_rubric": "judge", "is_json": "json_schema"}
"""promptfoo's spelling of a fim assertion (`-` is read as `_` first)."""

_STRUCTURED = {"json_schema", "json_path"}
"""Assertions whose value is a mapping: written in the cell as YAML flow, `{path: $.a}`."""

_LISTS = {"contains_any", "contains_all", "icontains_any", "icontains_all"}
"""Assertions whose value is a list of texts: in a cell, comma-separated as promptfoo reads
them (`contains-any: Paris, Lyon`; `"Paris, France"` in double quotes keeps its comma)."""

_ITEM = re.compile(r'\s*(?:"([^"]*)"|([^,]*?))\s*(?:,|\Z)')
"""One text of such a cell: double-quoted, or up to the next comma."""

_PREFIX = re.compile(r"([A-Za-z][A-Za-z0-9_-]*)\s*:(.*)\Z", re.S)


def approvals(cell: str) -> Any:
    """An `__approvals` cell as the case's `approvals`: `approve`, `deny`, or
    `approve: save_note, send_mail` (those tools approved, every other call denied)."""
    text = cell.strip()
    head, colon, names = text.partition(":")
    if colon and head.strip().lower() == "approve":
        return {"approve": [name.strip() for name in names.split(",") if name.strip()]}
    return text.lower() if text.lower() in ("approve", "deny") else text


def assertion_of(
    decls: Declarations, rel: str, cell: str, line: int, col: int
) -> dict[str, Any] | None:
    """One `__expected` cell as assertion data: `contains: Paris`, `tool_called: search`,
    `not-contains: sorry` (promptfoo's spelling), `is-json`; a cell with no known
    `type:` in front is the exact answer (`equals`), as in promptfoo."""
    text = cell.strip()
    fields = list(Assertion.model_fields)
    if text.replace("-", "_") == "is_json":
        return {"json_schema": {}}
    match = _PREFIX.match(text)
    if match is None:
        return {"equals": text}
    key = match[1].lower().replace("-", "_")
    key = _ALIASES.get(key, key)
    value = match[2].strip()
    if key in _PROMPTFOO_ONLY:
        decls.problems.append(
            Problem(
                rel,
                line,
                col,
                f"'{match[1]}' assertions are not supported by fim",
                "use contains, regex, json_path, tool_called or judge: <rubric>",
            )
        )
        return None
    if key not in fields:
        hint = suggest(key, fields)
        if hint is None or not hint.startswith("did you mean"):
            return {"equals": text}  # "Answer: 42" is an answer, not an assertion type
        decls.problems.append(
            Problem(
                rel,
                line,
                col,
                f"unknown assertion '{match[1]}'",
                f"{hint} An exact answer that holds a colon is written 'equals: {text}'",
            )
        )
        return None
    if key in _STRUCTURED or value.startswith(("{", "[")):
        try:
            value = parse(value, rel).data
        except YamlSyntaxError as exc:
            decls.problems.append(Problem(rel, line, col, f"{key}: {exc.message}", exc.hint))
            return None
    if key in _LISTS and isinstance(value, str):
        value = _items(value)
        if not value:
            decls.problems.append(
                Problem(
                    rel,
                    line,
                    col,
                    f"'{match[1]}' names no text to look for",
                    f"separate them with commas: '{match[1]}: Paris, Lyon'",
                )
            )
            return None
    elif key == "tool_called" and isinstance(value, str):
        value = {"name": value}
    elif key == "tool_sequence" and isinstance(value, str):
        value = {"tools": [name.strip() for name in value.split(",") if name.strip()]}
    elif key == "tool_sequence" and isinstance(value, list):
        value = {"tools": value}
    return {key: value}


def _items(text: str) -> list[str]:
    """`Paris, "Lyon, Rhône", Nice` as its texts, each trimmed: a comma separates them
    outside double quotes (promptfoo's reading of a `contains-any` cell); an empty item is
    none, so `a, b,` is two texts."""
    items = []
    for match in _ITEM.finditer(text):
        if match.end() == match.start():  # the empty match after the last item
            break
        item = match[1] if match[1] is not None else match[2]
        if item:
            items.append(item)
    return items


__all__ = ["approvals", "assertion_of"]
