"""One JSON Schema policy: how fim checks a model-written value against a schema.

Tool arguments, MCP and connector parameters, workflow node inputs, structured output and
eval assertions all check values the same way: the schema's own `$schema` dialect, else
Draft 2020-12; every problem prefixed with its field path (`items/0/id: ...`), at most
five, so a model can fix them in one go. Validators are cached per schema object because
builtin and snapshot schemas outlive a single run and building one costs far more than using
it. jsonschema (~40 ms to import) loads on first use.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

MAX_PROBLEMS = 5
"""Problems reported at most: enough to fix a call, short enough for a tool observation."""

MAX_NESTING = 64
"""Deepest nesting of lists and objects a model- or client-written value may have (tool
arguments, HTTP bodies). Deeper values break what walks them recursively after the check:
hook payloads, masking, the pickling that hands data to an isolated worker (a 900-level
`json_transform` document killed pebble's scheduler thread and hung the call)."""
_CONTAINERS = (dict, list, tuple)


def nested_deeper(value: Any, limit: int = MAX_NESTING) -> bool:
    """Whether `value` nests lists/dicts more than `limit` levels (iterative: it must not
    itself hit the recursion limit it guards against). Only containers are stacked: it
    runs on every tool call's arguments."""
    if not isinstance(value, _CONTAINERS):
        return False
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if depth >= limit:
            return True
        children: Iterable[Any] = item.values() if isinstance(item, dict) else item
        stack += [(child, depth + 1) for child in children if isinstance(child, _CONTAINERS)]
    return False


_PATTERNS: dict[str, Any] = {}
"""Compiled RE2 patterns by source (None: RE2 cannot run it)."""

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

    cls = _bounded(jsonschema.validators.validator_for(schema, jsonschema.Draft202012Validator))
    built = cls(schema)
    if len(_VALIDATORS) >= _CACHE_LIMIT:
        _VALIDATORS.clear()
    _VALIDATORS[id(schema)] = (schema, built)
    return built


_BOUNDED: dict[Any, Any] = {}


def pattern_matches(pattern: str, text: str) -> bool | None:
    """Whether `text` matches the schema `pattern` (search semantics), run by RE2 in time
    linear in the text; None when RE2 cannot run the pattern (lookaround, backreferences).

    Patterns come from schemas (connector specs, MCP servers) and values from the model:
    Python's `re` backtracks, so `^(a|aa)+$` against 35 characters held the event loop for
    seconds, and it cannot be interrupted (the `regex` module's timeout fired 13 s late)."""
    compiled = _PATTERNS.get(pattern, False)
    if compiled is False:
        # deferred: a compiled extension, loaded with the first pattern
        import re2

        options = re2.Options()
        options.log_errors = False
        try:
            compiled = re2.compile(pattern, options)
        except re2.error:
            compiled = None
        if len(_PATTERNS) >= _CACHE_LIMIT:
            _PATTERNS.clear()
        _PATTERNS[pattern] = compiled
    if compiled is None:
        return None
    return compiled.search(text) is not None


def _evaluated_keys(validator: Any, instance: Any, schema: Any) -> list[Any]:
    """jsonschema's `find_evaluated_property_keys_by_schema` (jsonschema 4.x, MIT), with
    `patternProperties` matched by `pattern_matches` where the original calls `re.search`:
    the keys `schema` evaluates in `instance`, for `unevaluatedProperties`. A pattern RE2
    cannot run counts as matching (the key is left to the tool's own check)."""
    if validator.is_type(schema, "boolean"):
        return []
    found: list[Any] = []
    for keyword in ("$ref", "$dynamicRef"):
        ref = schema.get(keyword)
        if ref is not None:
            resolved = validator._resolver.lookup(ref)
            inner = validator.evolve(schema=resolved.contents, _resolver=resolved.resolver)
            found += _evaluated_keys(inner, instance, resolved.contents)
    properties = schema.get("properties")
    if validator.is_type(properties, "object"):
        found += properties.keys() & instance.keys()
    for keyword in ("additionalProperties", "unevaluatedProperties"):
        subschema = schema.get(keyword)
        if subschema is not None:
            found += (
                key
                for key, value in instance.items()
                if next(validator.descend(value, subschema), None) is None
            )
    for key in instance if "patternProperties" in schema else ():
        for pattern in schema["patternProperties"]:
            if pattern_matches(pattern, key) is not False:
                found.append(key)
    for key, subschema in schema.get("dependentSchemas", {}).items():
        if key in instance:
            found += _evaluated_keys(validator, instance, subschema)
    for keyword in ("allOf", "oneOf", "anyOf"):
        for subschema in schema.get(keyword, []):
            if next(validator.descend(instance, subschema), None) is None:
                found += _evaluated_keys(validator, instance, subschema)
    if "if" in schema:
        if validator.evolve(schema=schema["if"]).is_valid(instance):
            found += _evaluated_keys(validator, instance, schema["if"])
            if "then" in schema:
                found += _evaluated_keys(validator, instance, schema["then"])
        elif "else" in schema:
            found += _evaluated_keys(validator, instance, schema["else"])
    return found


def _bounded(cls: Any) -> Any:
    """`cls` with `pattern`, `patternProperties`, `additionalProperties` and (Draft 2020-12,
    the default) `unevaluatedProperties` matching by RE2 (`pattern_matches`; a schema that
    declares Draft 2019-09 keeps jsonschema's `unevaluatedProperties`, whose rules differ,
    and with them `re`). A pattern RE2 cannot run
    is not checked before the call: the value reaches the tool, whose own side (the API,
    the MCP server) checks its input; the event loop never runs a backtracking match on a
    model-written value."""
    extended = _BOUNDED.get(cls)
    if extended is None:
        # deferred: loading jsonschema costs tens of ms
        from jsonschema import ValidationError, validators

        def pattern(validator: Any, patrn: str, instance: Any, schema: Any) -> Any:
            if validator.is_type(instance, "string") and pattern_matches(patrn, instance) is False:
                yield ValidationError(f"{instance!r} does not match {patrn!r}")

        def pattern_properties(validator: Any, props: Any, instance: Any, schema: Any) -> Any:
            if not validator.is_type(instance, "object"):
                return
            for patrn, subschema in props.items():
                for key, value in instance.items():
                    if pattern_matches(patrn, key):
                        yield from validator.descend(value, subschema, path=key, schema_path=patrn)

        def additional_properties(validator: Any, ap: Any, instance: Any, schema: Any) -> Any:
            # jsonschema's own finds the extras with `re.search` over the patterns
            if not validator.is_type(instance, "object"):
                return
            named, patterns = schema.get("properties", {}), schema.get("patternProperties", {})
            extras = [
                key
                for key in instance
                if key not in named
                and not any(pattern_matches(p, key) is not False for p in patterns)
            ]
            if validator.is_type(ap, "object"):
                for extra in extras:
                    yield from validator.descend(instance[extra], ap, path=extra)
            elif not ap and extras:
                listed = ", ".join(repr(each) for each in sorted(extras))
                if patterns:
                    verb = "does" if len(extras) == 1 else "do"
                    regexes = ", ".join(repr(each) for each in sorted(patterns))
                    yield ValidationError(
                        f"{listed} {verb} not match any of the regexes: {regexes}"
                    )
                else:
                    verb = "was" if len(extras) == 1 else "were"
                    yield ValidationError(
                        f"Additional properties are not allowed ({listed} {verb} unexpected)"
                    )

        def unevaluated_properties(validator: Any, up: Any, instance: Any, schema: Any) -> Any:
            # jsonschema's own, over `_evaluated_keys` (its finder calls `re.search`)
            if not validator.is_type(instance, "object"):
                return
            evaluated = _evaluated_keys(validator, instance, schema)
            failing = [
                key
                for key in instance
                if key not in evaluated
                and next(validator.descend(instance[key], up, path=key, schema_path=key), None)
                is not None
            ]
            if not failing:
                return
            if up is False:
                extras = sorted(failing, key=str)
                listed, verb = ", ".join(map(repr, extras)), "was" if len(extras) == 1 else "were"
                yield ValidationError(
                    f"Unevaluated properties are not allowed ({listed} {verb} unexpected)"
                )
            else:
                listed = ", ".join(map(repr, failing))
                verb = "was" if len(failing) == 1 else "were"
                yield ValidationError(
                    "Unevaluated properties are not valid under the given schema "
                    f"({listed} {verb} unevaluated and invalid)"
                )

        extend: Any = validators.extend
        keywords = {
            "pattern": pattern,
            "patternProperties": pattern_properties,
            "additionalProperties": additional_properties,
        }
        latest = validators.Draft202012Validator.VALIDATORS["unevaluatedProperties"]
        if cls.VALIDATORS.get("unevaluatedProperties") is latest:  # 2019-09 keeps its own
            keywords["unevaluatedProperties"] = unevaluated_properties
        extended = _BOUNDED[cls] = extend(cls, keywords)
    return extended


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


def problems_json(value: Any, schema: Mapping[str, Any]) -> str:
    """`problems(value, schema)` as a JSON list: what a killable worker returns when the
    schema is a third party's (`fim.tools.isolate.schema_problems`). A schema that cannot
    be used (invalid, a `$ref` that resolves nowhere) is one problem saying so."""
    try:
        found = problems(value, schema)
    except Exception as exc:  # jsonschema's and referencing's errors: not all pickle
        found = [f"the schema cannot be used: {type(exc).__name__}: {str(exc)[:300]}"]
    return json.dumps(found)


_PLAIN_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "boolean": (bool,),
    "integer": (int,),
    "number": (int, float),
}
_PLAIN_SCHEMA_KEYS = frozenset(
    {"type", "properties", "required", "additionalProperties", "description", "title"}
)
_PLAIN_PROPERTY_KEYS = frozenset(
    {"type", "description", "title", "default", "examples", "minLength", "maxLength", "enum"}
)
_Rule = tuple[tuple[type, ...], int, int | None, frozenset[str] | None]
"""Allowed Python types, minLength, maxLength, string enum of one flat property."""
_PLAIN: dict[int, tuple[Mapping[str, Any], dict[str, _Rule] | None]] = {}


def _plain_rule(prop: Any) -> _Rule | None:
    if not isinstance(prop, dict) or not set(prop) <= _PLAIN_PROPERTY_KEYS:
        return None
    kind = prop.get("type")
    if not isinstance(kind, str) or kind not in _PLAIN_TYPES:
        return None
    low, high, enum = prop.get("minLength", 0), prop.get("maxLength"), prop.get("enum")
    if kind != "string" and ({"minLength", "maxLength", "enum"} & set(prop)):
        return None
    if type(low) is not int or (high is not None and type(high) is not int):
        return None
    if enum is not None and not (isinstance(enum, list) and all(isinstance(v, str) for v in enum)):
        return None
    return _PLAIN_TYPES[kind], low, high, None if enum is None else frozenset(enum)


def plain_shape(schema: Mapping[str, Any]) -> dict[str, _Rule] | None:
    """For the common flat schema (an object of string/number/integer/boolean properties,
    string lengths and enums, `required`, `additionalProperties: false`) a rule per
    property; None for anything else, which jsonschema alone decides."""
    if (
        schema.get("type") != "object"
        or not set(schema) <= _PLAIN_SCHEMA_KEYS
        or schema.get("additionalProperties", False) is not False
        or not isinstance(schema.get("properties", {}), dict)
    ):
        return None
    shape: dict[str, _Rule] = {}
    for name, prop in schema.get("properties", {}).items():
        rule = _plain_rule(prop)
        if rule is None:
            return None
        shape[name] = rule
    required = schema.get("required", [])
    if not isinstance(required, list) or not all(r in shape for r in required):
        return None
    return shape


def plainly_valid(schema: Mapping[str, Any], arguments: Any) -> bool:
    """True only when `arguments` certainly satisfies a flat schema (see `plain_shape`):
    the check runs on every tool call, and for these schemas a few isinstance tests give
    jsonschema's answer. False means "not certain": jsonschema then decides and explains."""
    cached = _PLAIN.get(id(schema))
    if cached is None or cached[0] is not schema:
        if len(_PLAIN) > 4096:
            _PLAIN.clear()
        cached = _PLAIN[id(schema)] = (schema, plain_shape(schema))
    shape = cached[1]
    if shape is None or not isinstance(arguments, dict):
        return False
    for name in schema.get("required", ()):
        if name not in arguments:
            return False
    for name, value in arguments.items():
        rule = shape.get(name)
        if rule is None or not isinstance(value, rule[0]):
            return False
        if isinstance(value, bool) and rule[0] is not _PLAIN_TYPES["boolean"]:
            return False  # JSON Schema: true is not a number
        if isinstance(value, float) and value != value:  # NaN: leave it to jsonschema
            return False
        if isinstance(value, str):
            if len(value) < rule[1] or (rule[2] is not None and len(value) > rule[2]):
                return False
            if rule[3] is not None and value not in rule[3]:
                return False
    return True


def schema_problem(schema: Any) -> str | None:
    """Why `schema` is not a usable JSON Schema (with the path inside it), or None."""
    if not isinstance(schema, dict):
        return "a JSON Schema must be a mapping"
    for path, message, _ in schema_problems_at(schema, limit=1):
        where = _where(path)
        return f"invalid JSON Schema{f' at {where}' if where else ''}: {message}"
    return None


def schema_problems_at(
    schema: Any, limit: int = 20
) -> list[tuple[tuple[str | int, ...], str, Any]]:
    """Every reason (up to `limit`) `schema` is not a usable JSON Schema, as `schema_problem`
    judges it, as (path inside the schema, message, value there): all at once, so `fim
    validate` reports each at its YAML node (a connector action's `parameters`)."""
    # deferred: loading referencing costs tens of ms
    import jsonschema

    if not isinstance(schema, dict):
        return [((), "a JSON Schema must be a mapping", schema)]
    cls = jsonschema.validators.validator_for(schema, jsonschema.Draft202012Validator)
    meta_cls = jsonschema.validators.validator_for(cls.META_SCHEMA, default=cls)
    meta = meta_cls(cls.META_SCHEMA, format_checker=meta_cls.FORMAT_CHECKER)
    found = []
    for error in meta.iter_errors(schema):  # the first is what `check_schema` raises
        found.append((tuple(error.absolute_path), error.message, error.instance))
        if len(found) >= limit:
            break
    return sorted(found, key=lambda each: [str(step) for step in each[0]])


__all__ = [
    "MAX_NESTING",
    "MAX_PROBLEMS",
    "nested_deeper",
    "pattern_matches",
    "problems",
    "schema_problem",
    "schema_problems_at",
    "validator",
    "validator_problems",
]
