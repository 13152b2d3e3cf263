"""`fim schema KIND --format text`: the fields of a declaration kind, one line each, read
from its JSON Schema (`fim.config.export.json_schema`, itself derived from the pydantic
models and their field docstrings; nothing here is written by hand).

    name: string = "" — Agent name (default: the file name); letters, digits, `_` and `-`.
    budget: Budget — Spend limit of one run of this agent (`max_tokens`, `max_cost_usd`).
      max_tokens: integer — ...

A field whose value is a model (directly, in a list, a mapping or a union) has that
model's fields indented under it; a union of models (workflow nodes, connector kinds)
names each model first. A model is expanded once per line of descent (no cycles).
"""

from __future__ import annotations

import json
import re
from typing import Any

_SENTENCE_END = re.compile(r"(?<!e\.g)(?<!i\.e)(?<!etc)\.\s+(?=[A-Z])")
"""A full stop before a capital: the end of a field's first sentence (not `e.g. `)."""

_INDENT = "  "


def schema_text(schema: dict[str, Any]) -> str:
    """Every field of `schema` (a kind's JSON Schema), one line each, nested models
    indented under the field that holds them."""
    defs: dict[str, Any] = schema.get("$defs", {})
    lines = [f"{schema.get('title', '')}: {first_sentence(schema.get('description', ''))}"]
    if "properties" in schema:
        lines += _fields(schema, defs, 1, ())
    else:  # a union of models (a connector: http or database)
        lines += _variants(_refs(schema), defs, 1, ())
    return "\n".join(lines) + "\n"


def first_sentence(text: str) -> str:
    """The first sentence of a description, on one line."""
    flat = " ".join(text.split())
    return _SENTENCE_END.split(flat, maxsplit=1)[0].rstrip(".") if flat else ""


def _fields(
    model: dict[str, Any], defs: dict[str, Any], depth: int, seen: tuple[str, ...]
) -> list[str]:
    lines: list[str] = []
    required = set(model.get("required", ()))
    for name, prop in model.get("properties", {}).items():
        line = f"{_INDENT * depth}{name}: {type_of(prop)}"
        if name in required:
            line += " (required)"
        elif _shown(prop.get("default")):
            line += f" = {json.dumps(prop['default'], ensure_ascii=False)}"
        about = first_sentence(prop.get("description", ""))
        lines.append(f"{line} — {about}" if about else line)
        refs = [r for r in _refs(prop) if r not in seen]
        if len(refs) == 1:
            lines += _fields(defs.get(refs[0], {}), defs, depth + 1, (*seen, refs[0]))
        elif refs:
            lines += _variants(refs, defs, depth + 1, seen)
    return lines


def _variants(
    refs: list[str], defs: dict[str, Any], depth: int, seen: tuple[str, ...]
) -> list[str]:
    """Each model of a union, named with its description, its fields under it."""
    lines: list[str] = []
    for ref in refs:
        model = defs.get(ref, {})
        about = first_sentence(model.get("description", ""))
        lines.append(f"{_INDENT * depth}- {ref}" + (f": {about}" if about else ""))
        lines += _fields(model, defs, depth + 1, (*seen, ref))
    return lines


def _shown(default: Any) -> bool:
    """Whether a default says something: not none, not an empty list or mapping."""
    return default is not None and default != [] and default != {}


def _ref_name(ref: str) -> str:
    return ref.rsplit("/", 1)[-1]


def _refs(schema: Any) -> list[str]:
    """The models a value of `schema` may be, in order, each once."""
    if not isinstance(schema, dict):
        return []
    found: list[str] = []
    if "$ref" in schema:
        found.append(_ref_name(schema["$ref"]))
    for key in ("anyOf", "oneOf", "allOf"):
        for option in schema.get(key, ()):
            found += _refs(option)
    found += _refs(schema.get("items"))
    found += _refs(schema.get("additionalProperties"))
    return list(dict.fromkeys(found))


def type_of(schema: Any) -> str:
    """A value's type in a few words: `string`, `list[string]`, `mapping of Retry`,
    `react|dag`, `string | ModelSettings` (null, the absent value, left out)."""
    if not isinstance(schema, dict) or not schema:
        return "any"
    if "$ref" in schema:
        return _ref_name(schema["$ref"])
    if "const" in schema:
        return json.dumps(schema["const"], ensure_ascii=False)
    if "enum" in schema:
        return "|".join(str(v) for v in schema["enum"] if v is not None)
    options = schema.get("anyOf") or schema.get("oneOf") or schema.get("allOf")
    if options:
        names = [type_of(o) for o in options if o.get("type") != "null"]
        return " | ".join(dict.fromkeys(names)) or "null"
    kind = schema.get("type")
    if isinstance(kind, list):
        return " | ".join(type_of({**schema, "type": k}) for k in kind if k != "null")
    if kind == "array":
        return f"list[{type_of(schema.get('items'))}]"
    if kind == "object":
        values = schema.get("additionalProperties")
        if isinstance(values, dict) and values:
            return f"mapping of {type_of(values)}"
        return "mapping"
    return str(kind or "any")
