"""Whether a JSON Schema is certainly valid, without jsonschema: the fast path of
`fim validate`'s check of connector `parameters` (`fim.build.parameter_checks`).

jsonschema's meta-schema check of Draft 2020-12 costs about 15 ms per action schema of an
imported API (263 actions of Discord's spec: 5 s, every validate). Nearly every schema uses
a few keywords with values of the plain kind (`type: string`, `properties`, `required`,
`enum`, `minLength` ...), which this walk recognises in microseconds. It answers only
"certainly valid" or "not sure": anything else (a keyword value of another shape, a
`$schema` dialect, `patternProperties`, `$id`/`$anchor`...) is left to jsonschema, which
alone words the problems (`fim.schema_check.schema_problems_at`). So it can only ever skip
the check of a schema jsonschema would accept.
"""

from __future__ import annotations

import re
from typing import Any

TYPES = frozenset({"array", "boolean", "integer", "null", "number", "object", "string"})

_TEXT = frozenset(
    {"title", "description", "$comment", "format", "contentEncoding", "contentMediaType"}
)
_FLAG = frozenset({"uniqueItems", "deprecated", "readOnly", "writeOnly"})
_COUNT = frozenset(
    {
        "maxLength",
        "minLength",
        "maxItems",
        "minItems",
        "maxProperties",
        "minProperties",
        "maxContains",
        "minContains",
    }
)
_NUMBER = frozenset({"maximum", "minimum", "exclusiveMaximum", "exclusiveMinimum"})
_ONE = frozenset(
    {
        "items",
        "additionalProperties",
        "not",
        "contains",
        "propertyNames",
        "if",
        "then",
        "else",
        "unevaluatedItems",
        "unevaluatedProperties",
    }
)
_MANY = frozenset({"prefixItems", "allOf", "anyOf", "oneOf"})
_NAMED = frozenset({"properties", "$defs", "definitions", "dependentSchemas"})
_ANY = frozenset({"const", "default"})
_KNOWN = _TEXT | _FLAG | _COUNT | _NUMBER | _ONE | _MANY | _NAMED | _ANY
_VOCABULARY = _KNOWN | {
    "$schema",
    "$ref",
    "$id",
    "$anchor",
    "$dynamicRef",
    "$dynamicAnchor",
    "$vocabulary",
    "$recursiveRef",
    "$recursiveAnchor",
    "type",
    "enum",
    "examples",
    "required",
    "dependentRequired",
    "dependencies",
    "multipleOf",
    "pattern",
    "patternProperties",
    "contentSchema",
}
"""Every keyword Draft 2020-12's meta-schema gives a rule; other keys (`nullable`, `x-...`)
it ignores, and so does this walk."""


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _strings(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


def _plain_value(key: str, value: Any) -> bool | None:
    """Whether `value` is certainly valid for `key`; None when `key` holds subschemas."""
    if key in _TEXT:
        return isinstance(value, str)
    if key in _FLAG:
        return isinstance(value, bool)
    if key in _COUNT:
        return isinstance(value, int) and not isinstance(value, bool) and value >= 0
    if key in _NUMBER:
        return _number(value)
    if key == "multipleOf":
        return _number(value) and value > 0
    if key == "type":
        if isinstance(value, str):
            return value in TYPES
        return _strings(value) and 0 < len(value) == len(set(value)) and set(value) <= TYPES
    if key == "required":
        return _strings(value) and len(value) == len(set(value))
    if key in ("enum", "examples"):
        return isinstance(value, list)
    if key == "pattern":
        return isinstance(value, str) and _compiles(value)
    if key in _ANY:
        return True
    return None


def _compiles(pattern: str) -> bool:
    try:
        re.compile(pattern)
    except (re.error, RecursionError, OverflowError):
        return False
    return True


def certainly_valid(schema: Any) -> bool:
    """True only when `schema` is a valid Draft 2020-12 JSON Schema of the plain kind (see
    the module); False means "not sure", never "invalid"."""
    pending = [schema]
    while pending:
        node = pending.pop()
        if isinstance(node, bool):
            continue
        if not isinstance(node, dict):
            return False
        for key, value in node.items():
            if not isinstance(key, str) or key not in _VOCABULARY:
                continue  # not a keyword: the meta-schema allows it
            plain = _plain_value(key, value)
            if plain is not None:
                if not plain:
                    return False
            elif key in _ONE:
                pending.append(value)
            elif key in _MANY and isinstance(value, list) and value:
                pending.extend(value)
            elif key in _NAMED and isinstance(value, dict):
                pending.extend(value.values())
            else:
                return False  # `$schema`, `patternProperties`, ...: jsonschema decides
    return True


KEYWORDS = _VOCABULARY
SUBSCHEMA = _ONE
"""Keywords whose value is one schema."""
SUBSCHEMA_LISTS = _MANY
"""Keywords whose value is a list of schemas."""
SUBSCHEMA_MAPS = _NAMED
"""Keywords whose value maps names to schemas."""

__all__ = ["KEYWORDS", "SUBSCHEMA", "SUBSCHEMA_LISTS", "SUBSCHEMA_MAPS", "certainly_valid"]
