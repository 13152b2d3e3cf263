"""The fast argument check (`fim.schema_check.plainly_valid`, the registry's first) never
accepts what jsonschema rejects: it answers only for flat schemas and defers to jsonschema
(which also words the error) whenever unsure."""

from __future__ import annotations

import itertools

import jsonschema
import pytest

from fim.schema_check import plain_shape, plainly_valid
from fim.tools.builtin.calculator import TOOL as CALCULATOR
from fim.tools.registry import ToolRegistry, _spec

FLAT = {
    "type": "object",
    "properties": {
        "s": {"type": "string", "minLength": 1, "maxLength": 3, "description": "x"},
        "e": {"type": "string", "enum": ["a", "b"]},
        "i": {"type": "integer"},
        "n": {"type": "number"},
        "b": {"type": "boolean"},
    },
    "required": ["s"],
    "additionalProperties": False,
}
VALUES = ["", "a", "abcd", "c", 0, 1, -2, 1.5, 2.0, float("nan"), True, False, None, [], {}]


def test_the_fast_check_agrees_with_jsonschema_whenever_it_accepts():
    checker = jsonschema.Draft202012Validator(FLAT)
    accepted = 0
    for s, other, value in itertools.product(["a", "abc", "", "abcd", 1], "einbz", VALUES):
        args = {"s": s, other: value}
        if plainly_valid(FLAT, args):
            accepted += 1
            assert checker.is_valid(args), args
    assert accepted > 10  # the fast path is taken for ordinary calls
    assert not plainly_valid(FLAT, {})  # missing required: jsonschema explains


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "object", "properties": {"x": {"type": "string", "pattern": "^a"}}},
        {"type": "object", "properties": {"x": {"type": "integer", "minimum": 3}}},
        {"type": "object", "properties": {"x": {"type": "array"}}},
        {"type": "object", "properties": {"x": {"type": ["string", "null"]}}},
        {"type": "object", "properties": {"x": {"type": "string"}}, "additionalProperties": True},
        {"type": "object", "$defs": {}, "properties": {}},
    ],
)
def test_anything_beyond_a_flat_schema_is_left_to_jsonschema(schema):
    assert plain_shape(schema) is None


async def test_errors_are_still_worded_by_jsonschema_and_specs_are_reused():
    registry = ToolRegistry([CALCULATOR])
    assert await registry.check("calculator", {"expression": "1+1"}) is None
    problem = await registry.check("calculator", {"expression": ""})
    assert problem is not None and "should be non-empty" in problem
    problem = await registry.check("calculator", {"expression": "1", "extra": 1})
    assert problem is not None and "Additional properties" in problem
    assert registry.specs()[0] is ToolRegistry([CALCULATOR]).specs()[0] is _spec(CALCULATOR)
