"""`fim validate`'s checks of an HTTP connector action's `parameters` and `path`.

The parameters are a JSON Schema the user writes by hand (README's first connector), and
the model is given it as the tool's arguments. A schema jsonschema cannot use (`type:
strng`), a `required` name no property has (`required: [componnt]`) or a `{comp}` in the
path that no parameter fills passed `fim validate`; each call then failed with an error the
model was told to fix, which it could not (newcomer-53 #3). Each is a problem at its YAML
node here, all of them at once, with a did-you-mean where one is close. The schema is judged
by `fim.schema_check` (the one JSON Schema policy), as the call judges it.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from fim.build.schema_shape import certainly_valid
from fim.config.declarations import Entry
from fim.config.problems import suggest
from fim.config.schema import HttpConnector
from fim.schema_check import schema_problems_at

Where = tuple[str | int, ...]

JSON_TYPES = ("array", "boolean", "integer", "null", "number", "object", "string")

_PATH_PARAM = re.compile(r"\{([A-Za-z_][A-Za-z0-9_\-]*)\}")
"""A `{name}` of an action's path: the call fills each from the argument of that name
(`fim.connectors.http_request`'s pattern, a layer above)."""

_COMPOSED = frozenset(
    {
        "allOf",
        "anyOf",
        "oneOf",
        "$ref",
        "$dynamicRef",
        "if",
        "dependentSchemas",
        "patternProperties",
    }
)
"""Keywords that may declare properties besides `properties`: a `required` name beside
them is not checked against `properties` alone."""


def check_actions(checker: Any, entry: Entry, decl: HttpConnector) -> None:
    """Every problem of every action's `parameters` and `path`, at its YAML node."""
    for name, action in decl.actions.items():
        at: Where = ("actions", name)
        label = f"actions.{name}"
        for where, message, hint in parameter_problems(action.parameters):
            shown = ".".join(str(step) for step in ("parameters", *where))
            checker.add(
                entry.doc.problem((*at, "parameters", *where), f"{label}.{shown}: {message}", hint)
            )
        for param, message, hint in path_problems(action.path, action.parameters):
            problem = entry.doc.problem((*at, "path"), f"{label}.path: {message}", hint)
            checker.add(_at_brace(entry, problem, "{" + param + "}"))


def parameter_problems(schema: Any) -> list[tuple[Where, str, str | None]]:
    """(path inside the schema, message, hint) of each reason the `parameters` schema
    cannot describe a tool's arguments."""
    found: list[tuple[Where, str, str | None]] = []
    for where, message, value in () if certainly_valid(schema) else schema_problems_at(schema):
        found.append((where, *_worded(where, message, value)))
    if not isinstance(schema, dict):
        return found
    kind = schema.get("type", "object")
    if isinstance(kind, str) and kind in JSON_TYPES and kind != "object":
        found.append(
            (
                ("type",),
                f"the parameters of an action are an object of named arguments, not {kind!r}",
                "write type: object and name each argument under properties",
            )
        )
    return found + _required_problems(schema, ())


def _worded(where: Where, message: str, value: Any) -> tuple[str, str | None]:
    """jsonschema's message, with a did-you-mean for an unknown `type`."""
    if where and where[-1] == "type":
        names = [value] if isinstance(value, str) else value if isinstance(value, list) else []
        unknown = [n for n in names if isinstance(n, str) and n not in JSON_TYPES]
        if unknown:
            return f"unknown type {unknown[0]!r}", suggest(unknown[0], JSON_TYPES, "types")
    return (
        f"not a valid JSON Schema: {message}",
        "see https://json-schema.org/understanding-json-schema",
    )


def _subschemas(schema: dict[str, Any], where: Where) -> Iterator[tuple[dict[str, Any], Where]]:
    properties = schema.get("properties")
    for name, sub in properties.items() if isinstance(properties, dict) else ():
        yield sub, (*where, "properties", name)
    for key in ("items", "additionalProperties"):
        if isinstance(schema.get(key), dict):
            yield schema[key], (*where, key)


def _required_problems(schema: Any, where: Where) -> list[tuple[Where, str, str | None]]:
    """`required` names that no property of the same object has, there and in the objects
    it nests (`properties`, `items`, `additionalProperties`)."""
    if not isinstance(schema, dict):
        return []
    found: list[tuple[Where, str, str | None]] = []
    properties, required = schema.get("properties"), schema.get("required")
    if isinstance(properties, dict) and isinstance(required, list) and not _COMPOSED & set(schema):
        for i, name in enumerate(required):
            if isinstance(name, str) and name not in properties:
                found.append(
                    (
                        (*where, "required", i),
                        f"requires {name!r}, which is not one of its properties",
                        suggest(name, properties, "properties"),
                    )
                )
    for sub, at in _subschemas(schema, where):
        found += _required_problems(sub, at)
    return found


def path_problems(path: str, schema: Any) -> list[tuple[str, str, str | None]]:
    """(name, message, hint) of each `{name}` in `path` that no parameter fills."""
    properties = schema.get("properties") if isinstance(schema, dict) else None
    names = list(properties) if isinstance(properties, dict) else []
    found: list[tuple[str, str, str | None]] = []
    for param in dict.fromkeys(_PATH_PARAM.findall(path)):
        if param in names:
            continue
        hint = suggest(param, names, "parameters") or ""
        if not hint.startswith("did you mean"):
            hint = f"declare {param} under parameters.properties and list it in required"
        message = f"{{{param}}} is not a parameter of this action, so no call can fill it"
        found.append((param, message, hint))
    return found


def _at_brace(entry: Entry, problem: Any, text: str) -> Any:
    """`problem` at the column of `text` on its line, when the line has it there."""
    lines = entry.doc.text.splitlines()
    row = problem.line - 1 - entry.doc.line_offset
    if not 0 <= row < len(lines):
        return problem
    col = lines[row].find(text, problem.column - 1)
    if col < 0:
        return problem
    return type(problem)(problem.path, problem.line, col + 1, problem.message, problem.hint)


__all__ = ["JSON_TYPES", "check_actions", "parameter_problems", "path_problems"]
