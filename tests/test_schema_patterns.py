"""Schema patterns meet model-written values: matched by RE2, in time linear in the value,
so a pattern with nested quantifiers (from a connector spec or an MCP server) cannot hold
the event loop on a hostile argument."""

from __future__ import annotations

import re
import threading

import pytest

from fim.schema_check import pattern_matches, problems

CATASTROPHIC = "^(a|aa)+$"
"""Python's `re` needs ~2^n steps to reject 'a' * n + '!': 35 characters took seconds."""


def test_a_catastrophic_pattern_on_a_hostile_value_is_decided_at_once() -> None:
    schema = {"type": "object", "properties": {"id": {"type": "string", "pattern": CATASTROPHIC}}}
    found: list[list[str]] = []
    checker = threading.Thread(
        target=lambda: found.append(problems({"id": "a" * 5000 + "!"}, schema))
    )
    checker.start()
    checker.join(timeout=30)  # a backtracking engine would need longer than the universe
    assert not checker.is_alive()
    assert found == [[f"id: {'a' * 5000 + '!'!r} does not match {CATASTROPHIC!r}"]]


@pytest.mark.parametrize(
    "pattern",
    [r"^[a-z0-9_-]{3,16}$", r"^\d{4}-\d{2}-\d{2}$", r"\.json$", r"^(GET|POST)$", r"[A-Z]", "^$"],
)
@pytest.mark.parametrize("value", ["abc", "2026-12-01", "data.json", "POST", "get", "", "A_b-9"])
def test_ordinary_patterns_decide_as_pythons_re_does(pattern: str, value: str) -> None:
    assert pattern_matches(pattern, value) is (re.search(pattern, value) is not None)


def test_a_pattern_re2_cannot_run_is_left_to_the_tool_not_run_on_the_loop() -> None:
    """Lookaround and backreferences need backtracking: such a value goes to the tool (the
    API or MCP server checks its own input) rather than through `re` on the event loop."""
    assert pattern_matches(r"^(?=.*\d)\w+$", "no-digits") is None
    schema = {"type": "string", "pattern": r"(\w)\1"}
    assert problems("ab", schema) == []


def test_additional_properties_sort_keys_with_the_same_engine() -> None:
    """jsonschema's own `additionalProperties` runs `re.search` over the patterns: 45
    characters against CATASTROPHIC would take it minutes."""
    schema = {
        "type": "object",
        "patternProperties": {CATASTROPHIC: {"type": "integer"}},
        "additionalProperties": False,
    }
    key = "a" * 45 + "!"
    found: list[list[str]] = []
    checker = threading.Thread(target=lambda: found.append(problems({key: 1}, schema)))
    checker.start()
    checker.join(timeout=30)
    assert not checker.is_alive()
    assert found == [[f"{key!r} does not match any of the regexes: {CATASTROPHIC!r}"]]


def test_pattern_properties_match_keys_with_the_same_engine() -> None:
    schema = {
        "type": "object",
        "patternProperties": {CATASTROPHIC: {"type": "integer"}},
        "additionalProperties": {"type": "string"},
    }
    assert problems({"aaaa": 1, "a" * 3000 + "!": "text"}, schema) == []
    assert problems({"aa": "two"}, schema) == ["aa: 'two' is not of type 'integer'"]


def test_unevaluated_properties_sort_keys_with_the_same_engine() -> None:
    """jsonschema's `unevaluatedProperties` finds the evaluated keys with `re.search` over
    `patternProperties`, anywhere under `allOf`/`if`/`$ref`: fim's own finder uses RE2."""
    schema = {
        "type": "object",
        "allOf": [{"patternProperties": {CATASTROPHIC: {"type": "integer"}}}],
        "unevaluatedProperties": False,
    }
    key = "a" * 45 + "!"
    found: list[list[str]] = []
    checker = threading.Thread(target=lambda: found.append(problems({key: 1, "aa": 2}, schema)))
    checker.start()
    checker.join(timeout=30)  # `re` would need minutes on this key
    assert not checker.is_alive()
    assert found == [[f"Unevaluated properties are not allowed ({key!r} was unexpected)"]]


UNEVALUATED = [
    {"properties": {"a": {}}, "unevaluatedProperties": False},
    {"patternProperties": {"^x-": {"type": "string"}}, "unevaluatedProperties": False},
    {"allOf": [{"properties": {"a": {}}}], "unevaluatedProperties": {"type": "integer"}},
    {
        "anyOf": [{"properties": {"a": {"const": 1}}}, {"properties": {"b": {}}}],
        "unevaluatedProperties": False,
    },
    {
        "if": {"properties": {"a": {"const": 1}}},
        "then": {"properties": {"b": {}}},
        "else": {"patternProperties": {"^c": {}}},
        "unevaluatedProperties": False,
    },
    {
        "$defs": {"x": {"properties": {"x-1": {}}}},
        "$ref": "#/$defs/x",
        "unevaluatedProperties": False,
    },
    {"dependentSchemas": {"a": {"properties": {"b": {}}}}, "unevaluatedProperties": False},
    {"additionalProperties": {"type": "string"}, "unevaluatedProperties": False},
]
INSTANCES = [{}, {"a": 1}, {"a": 2, "b": 1}, {"x-1": "s"}, {"x-1": 3}, {"c": 1, "d": 2}, {"b": "s"}]


@pytest.mark.parametrize("schema", UNEVALUATED)
def test_unevaluated_properties_decide_as_jsonschema_does(schema: dict) -> None:
    """For patterns both engines run, fim's keyword finds exactly jsonschema's problems."""
    import jsonschema

    upstream = jsonschema.Draft202012Validator(schema)
    for instance in INSTANCES:
        theirs = sorted(
            f"{'/'.join(map(str, e.absolute_path))}: {e.message}" if e.absolute_path else e.message
            for e in upstream.iter_errors(instance)
        )
        assert sorted(problems(instance, schema)) == theirs, instance


def test_nested_deeper_counts_containers_only_and_any_container_at_the_limit() -> None:
    from fim.schema_check import nested_deeper

    chain: list = []
    tip = chain
    for _ in range(70):
        tip.append([])
        tip = tip[-1]
    assert nested_deeper(chain) and not nested_deeper(chain, 71)
    assert nested_deeper([[1]], 1) and not nested_deeper([[1]], 2)
    assert nested_deeper([], 0) and nested_deeper({"a": {}}, 1) and nested_deeper(((1,),), 1)
    assert not nested_deeper("x" * 100, 0) and not nested_deeper({"a": "b", "c": 1}, 1)
