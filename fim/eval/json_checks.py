"""The eval assertions on JSON in the output: `is_json`, `contains_json`, `json_schema`
and `json_path`, and how JSON is found in a model's answer.

A model asked for JSON often wraps it: `Here is the triage: {...}`, or a ```json fence.
The runtime accepts a fence around a structured answer (`fim.structured.parse_json`), so
the assertions do too: `json_schema` and `json_path` read the whole output as JSON, else
its first fenced block, else its first JSON object or array (`found_json`). `is_json`
stays strict (the output *is* JSON, promptfoo's `is-json`), and `contains_json` asks only
that one be there (promptfoo's `contains-json`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from fim.eval.outcomes import Observed, Outcome, clip, json_path, subset

if TYPE_CHECKING:
    from fim.config.schema import JsonPathSpec

_FENCE = re.compile(r"```[ \t]*(?:json|JSON)?[ \t]*\r?\n(.*?)```", re.S)
"""A fenced block, ```json or bare: its body."""

MAX_STARTS = 100
"""How many `{` or `[` of an output are tried as the start of a JSON value: an output of
a million `{` must not cost a million parses."""

MAX_SCHEMA_TRIES = 10
"""How many JSON values of an output `contains_json` checks against its schema."""

_NOT_CHECKED = (" could not be checked", "the value is nested more than")
"""How `isolate.schema_problems` says it could not tell (a verdict neither way)."""


def _loads(text: str) -> tuple[bool, Any]:
    try:
        return True, json.loads(text)
    except (ValueError, RecursionError):
        return False, None


def json_values(text: str) -> Iterator[Any]:
    """The JSON values of an output, in the order they are looked for: the whole output
    (then nothing else), each fenced block, each object or array in the text."""
    whole, value = _loads(text.strip())
    if whole:
        yield value
        return
    for fenced in _FENCE.finditer(text):
        ok, value = _loads(fenced[1].strip())
        if ok:
            yield value
    decoder = json.JSONDecoder()
    at, tries = 0, 0
    while tries < MAX_STARTS:
        starts = [i for i in (text.find("{", at), text.find("[", at)) if i >= 0]
        if not starts:
            return
        at, tries = min(starts), tries + 1
        try:
            value, end = decoder.raw_decode(text, at)
        except (ValueError, RecursionError):
            at += 1
            continue
        yield value
        at = end


def found_json(seen: Observed) -> Any:
    """The JSON `json_schema` and `json_path` read: a workflow's outputs as they are,
    else the output's first JSON value (`json_values`); ValueError when it holds none."""
    if seen.structured is not None:
        return seen.structured
    for value in json_values(seen.output):
        return value
    raise ValueError("no JSON")


def _strict(seen: Observed) -> bool:
    return seen.structured is not None or _loads(seen.output.strip())[0]


def check_is_json(seen: Observed, kind: str = "is_json") -> Outcome:
    """The whole output is JSON; a failure says when JSON is in it all the same."""
    if _strict(seen):
        return Outcome(kind, True, "output is JSON")
    said = f"output is not JSON: {clip(seen.output)!r}"
    if any(isinstance(v, (dict, list)) for v in json_values(seen.output)):
        said += " (it holds JSON in prose or a fence: `contains_json: true` accepts that)"
    return Outcome(kind, False, said)


async def check_contains_json(value: Any, seen: Observed) -> Outcome:
    """A JSON object or array somewhere in the output (the first few against the schema,
    if one is given)."""
    kind = "contains_json"
    found = [seen.structured] if seen.structured is not None else []
    found += [v for v in json_values(seen.output) if isinstance(v, (dict, list))][:MAX_SCHEMA_TRIES]
    if not found:
        return Outcome(kind, False, f"no JSON object or array in {clip(seen.output)!r}")
    if value is True or value == {}:
        return Outcome(kind, True, f"found {clip(_json(found[0]), 60)} in the output")
    first: list[str] = []
    for document in found:
        errors = await _problems(document, value)
        if not errors:
            return Outcome(kind, True, f"found {clip(_json(document), 60)}, matching the schema")
        first = first or errors
    said = f"no JSON value of the output matches the schema: {'; '.join(first[:3])}"
    return Outcome(kind, False, said, decided=_told(first))


async def check_schema(schema: dict[str, Any], seen: Observed) -> Outcome:
    """The output's JSON against the case's schema. An empty schema asks only for JSON (a
    CSV cell's `is-json` was written so), strictly, and is named `is_json` in a failure."""
    if schema == {}:
        return check_is_json(seen)
    try:
        document = found_json(seen)
    except ValueError:
        return Outcome("json_schema", False, f"output holds no JSON: {clip(seen.output)!r}")
    errors = await _problems(document, schema)
    said = "; ".join(errors[:3]) if errors else "output matches the schema"
    return Outcome("json_schema", not errors, said, decided=_told(errors))


def check_json_path(value: JsonPathSpec, seen: Observed) -> Outcome:
    """The value at a JSONPath of the output's JSON; "not JSON" and "not found" apart."""
    kind = "json_path"
    try:
        document = found_json(seen)
    except ValueError:
        return Outcome(kind, False, f"output is not JSON: {clip(seen.output)!r}")
    try:
        actual = json_path(document, value.path)
    except (KeyError, IndexError, TypeError, ValueError) as exc:
        shown = clip(_json(document), 80)
        return Outcome(kind, False, f"{value.path} not found in the output's JSON {shown} ({exc})")
    return Outcome(
        kind,
        subset(value.equals, actual),
        f"expected {value.path} == {value.equals!r}, got {actual!r}",
    )


async def _problems(document: Any, schema: dict[str, Any]) -> list[str]:
    """Schema problems of `document`, checked in a killable worker unless the value
    plainly satisfies a flat schema (`isolate.schema_problems`): a few kilobytes of
    `$ref`'d `anyOf` against a model-shaped output kept a validator busy for seconds."""
    # deferred: the worker pool is loaded with the first schema that needs it
    from fim.tools import isolate

    return await isolate.schema_problems(document, schema, whose="the output", party="fim-eval")


def _told(errors: list[str]) -> bool:
    """Whether the schema check gave a verdict (False: it could not tell, timed out)."""
    return not any(marker in error for error in errors for marker in _NOT_CHECKED)


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)


__all__ = [
    "check_contains_json",
    "check_is_json",
    "check_json_path",
    "check_schema",
    "found_json",
    "json_values",
]
