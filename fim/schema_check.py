"""One JSON Schema policy: how fim checks a model-written value against a schema.

Tool arguments, MCP and connector parameters, workflow node inputs, structured output and
eval assertions all check values the same way: the schema's own `$schema` dialect, else
Draft 2020-12; every problem prefixed with its field path (`items/0/id: ...`), at most
five, so a model can fix them in one go. Validators are cached per schema object because
builtin and snapshot schemas outlive a single run and building one costs far more than using
it. jsonschema (~40 ms to import) loads on first use.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

MAX_PROBLEMS = 5
"""Problems reported at most: enough to fix a call, short enough for a tool observation."""

_CACHE_LIMIT = 4096
_VALIDATORS: dict[int, tuple[Mapping[str, Any], Any]] = {}
"""Validators by schema object id, holding the schema so the id cannot be reused."""


def validator(schema: Mapping[str, Any]) -> Any:
    """The jsonschema validator of `schema`, cached by schema object. Raises
    `jsonschema.SchemaError` only when used on an invalid schema, so check schemas once with
    `schema_problem`."""
    cached = _VALIDATORS.get(id(schema))
    if cached is not None and cached[0] is schema:
        return cached[1]
    # deferred: loading referencing costs tens of ms
    import jsonschema

    cls = jsonschema.validators.validator_for(schema, jsonschema.Draft202012Validator)
    built = cls(schema)
    if len(_VALIDATORS) >= _CACHE_LIMIT:
        _VALIDATORS.clear()
    _VALIDATORS[id(schema)] = (schema, built)
    return built


def _where(path: Any) -> str:
    return "/".join(str(part) for part in path)


def problems(value: Any, schema: Mapping[str, Any], limit: int = MAX_PROBLEMS) -> list[str]:
    """Up to `limit` reasons `value` does not match `schema`, each with its field path."""
    return validator_problems(validator(schema), value, limit)


def validator_problems(checker: Any, value: Any, limit: int = MAX_PROBLEMS) -> list[str]:
    """`problems` with a validator the caller keeps (see `validator`)."""
    found: list[str] = []
    for error in checker.iter_errors(value):
        where = _where(error.absolute_path)
        found.append(f"{where}: {error.message}" if where else error.message)
        if len(found) >= limit:
            break
    return found


def schema_problem(schema: Any) -> str | None:
    """Why `schema` is not a usable JSON Schema (with the path inside it), or None."""
    # deferred: loading referencing costs tens of ms
    import jsonschema

    if not isinstance(schema, dict):
        return "a JSON Schema must be a mapping"
    cls = jsonschema.validators.validator_for(schema, jsonschema.Draft202012Validator)
    try:
        cls.check_schema(schema)
    except jsonschema.SchemaError as exc:
        where = _where(exc.absolute_path)
        return f"invalid JSON Schema{f' at {where}' if where else ''}: {exc.message}"
    return None


__all__ = ["MAX_PROBLEMS", "problems", "schema_problem", "validator", "validator_problems"]
