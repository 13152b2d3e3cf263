"""A cell of a CSV eval file that is not a var: an `__expected` cell as one assertion
(`contains: Paris`, promptfoo's spellings included) and an `__approvals` cell. Kept apart
from `fim.config.case_csv`, the RFC 4180 reader, so each reads on its own."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from fim.config import promptfoo_words
from fim.config.problems import suggest
from fim.config.schema import Assertion
from fim.config.schema.evals import NEGATABLE
from fim.config.yamlio import YamlSyntaxError, parse
from fim.errors import Problem

if TYPE_CHECKING:
    from fim.config.declarations import Declarations

_BARE = {"is_json": True, "contains_json": True}
"""The promptfoo assertions a cell writes with no value (`is-json`), and the value fim's
check takes for that."""

_STRUCTURED = {"json_schema", "json_path", "contains_json", "not"}
"""Assertions whose value is a mapping: written in the cell as YAML flow, `{path: $.a}`."""

_LISTS = {"contains_any", "contains_all", "icontains_any", "icontains_all"}
"""Assertions whose value is a list of texts: in a cell, comma-separated as promptfoo reads
them (`contains-any: Paris, Lyon`; `"Paris, France"` in double quotes keeps its comma)."""

_ITEM = re.compile(r'\s*(?:"([^"]*)"|([^,]*?))\s*(?:,|\Z)')
"""One text of such a cell: double-quoted, or up to the next comma."""

_PREFIX = re.compile(r"([A-Za-z][A-Za-z0-9_-]*)(\([\d.]+\))?\s*:(.*)\Z", re.S)
"""A cell's `type:` and its value; promptfoo writes a threshold in `similar(0.8):`."""


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
    `not-contains: sorry` and `not-icontains: sorry` (promptfoo's spellings: a `not-`
    prefix is fim's `not:`), `is-json`; a cell with no known `type:` in front is the
    exact answer (`equals`), as in promptfoo."""
    text = cell.strip()
    bare = _bare(decls, rel, text, line, col)
    if bare is not False:
        return bare
    match = _PREFIX.match(text)
    if match is None or (match[2] and _key(match[1])[0] not in promptfoo_words.UNSUPPORTED):
        return {"equals": text}
    key, negated = _key(match[1])
    value = match[3].strip()
    fields = [info.alias or name for name, info in Assertion.model_fields.items()]
    if key not in fields or (negated and key not in NEGATABLE):
        hint = promptfoo_words.spelled(match[1], value, NEGATABLE)
        known = key in fields or key in promptfoo_words.UNSUPPORTED
        if known and (negated or key in promptfoo_words.UNSUPPORTED):
            what = f"'{match[1]}' assertions are not supported by fim"
            decls.problems.append(Problem(rel, line, col, what, hint))
            return None
        hint = suggest(key, fields) or ""
        if not hint.startswith("did you mean"):
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
    found = _value(decls, rel, key, match[1], value, line, col)
    if found is None:
        return None
    return {"not": {key: found}} if negated else {key: found}


def _key(word: str) -> tuple[str, bool]:
    """(fim's key, whether negated) of a cell's `type:` (`not-icontains` -> icontains,
    True; `not-contains` -> not_contains, False: fim has that one)."""
    key = promptfoo_words.normal(word)
    negated = key.startswith("not_") and key != "not_contains"
    if negated:
        key = key[len("not_") :]
    return promptfoo_words.fim_key(key) or key, negated


def _bare(decls: Declarations, rel: str, text: str, line: int, col: int) -> Any:
    """A cell that is a promptfoo assertion type alone: `is-json` as fim's check,
    `not-is-json` negated, a type fim has no counterpart for (`is-xml`) or that needs a
    value (`starts-with`) as a problem (None). False when the cell is not one: an answer
    of one word (`python`) stays an answer, so only a type of two words or more counts."""
    word = promptfoo_words.normal(text)
    if not re.fullmatch(r"[a-z]+(?:_[a-z]+)+", word):
        return False
    key, negated = _key(text)
    if key in _BARE:
        return {"not": {key: _BARE[key]}} if negated else {key: _BARE[key]}
    literal = f"'equals: {text}' for the literal text"
    if key in promptfoo_words.UNSUPPORTED:
        hint = f"{promptfoo_words.UNSUPPORTED[key]}; write {literal}"
        what = f"'{text}' assertions are not supported by fim"
        decls.problems.append(Problem(rel, line, col, what, hint))
        return None
    if key in Assertion.model_fields:
        hint = f"write '{text}: <value>', or {literal}"
        decls.problems.append(Problem(rel, line, col, f"'{text}' needs a value", hint))
        return None
    return False


def _value(
    decls: Declarations, rel: str, key: str, written: str, value: str, line: int, col: int
) -> Any:
    """A cell's text after `type:` as the value of fim's check `key`, or None with the
    problem recorded."""
    found: Any = value
    if key in _STRUCTURED or value.startswith(("{", "[")):
        try:
            found = parse(value, rel).data
        except YamlSyntaxError as exc:
            decls.problems.append(Problem(rel, line, col, f"{key}: {exc.message}", exc.hint))
            return None
    if key in _BARE and found in ("", None, "true"):
        return _BARE[key]
    if key in _LISTS and isinstance(found, str):
        found = _items(found)
        if not found:
            decls.problems.append(
                Problem(
                    rel,
                    line,
                    col,
                    f"'{written}' names no text to look for",
                    f"separate them with commas: '{written}: Paris, Lyon'",
                )
            )
            return None
    elif key == "tool_called" and isinstance(found, str):
        found = {"name": found}
    elif key == "tool_sequence" and isinstance(found, str):
        found = {"tools": [name.strip() for name in found.split(",") if name.strip()]}
    elif key == "tool_sequence" and isinstance(found, list):
        found = {"tools": found}
    return found


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
