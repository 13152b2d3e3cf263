"""The one JSON Schema policy (`fim.schema_check`) and the places that use it."""

from __future__ import annotations

from fim.schema_check import problems, schema_problem, validator
from fim.tools.base import FunctionTool
from fim.tools.registry import ToolRegistry

ORDER = {
    "type": "object",
    "properties": {
        "id": {"type": "integer"},
        "items": {
            "type": "array",
            "items": {"type": "object", "required": ["sku"], "properties": {"sku": {}}},
        },
    },
    "required": ["id"],
    "additionalProperties": False,
}


def test_problems_name_the_field_path_and_stop_at_the_limit():
    found = problems({"id": "7", "items": [{"sku": 1}, {}]}, ORDER)
    assert "id: '7' is not of type 'integer'" in found
    assert "items/1: 'sku' is a required property" in found
    assert problems({"id": 1}, ORDER) == []
    many = {"type": "object", "properties": {f"k{i}": {"type": "string"} for i in range(9)}}
    assert len(problems({f"k{i}": i for i in range(9)}, many)) == 5
    assert len(problems({f"k{i}": i for i in range(9)}, many, limit=2)) == 2


def test_top_level_problems_have_no_path_prefix():
    assert problems({"id": 1, "extra": True}, ORDER) == [
        "Additional properties are not allowed ('extra' was unexpected)"
    ]


def test_the_schema_dialect_is_honoured_and_2020_12_is_the_default():
    # prefixItems exists only from 2020-12 on; Draft 7 ignores it.
    tuple_schema = {"type": "array", "prefixItems": [{"type": "integer"}]}
    assert problems(["x"], tuple_schema) == ["0: 'x' is not of type 'integer'"]
    draft7 = {"$schema": "http://json-schema.org/draft-07/schema#", **tuple_schema}
    assert problems(["x"], draft7) == []


def test_validators_are_cached_per_schema_object():
    assert validator(ORDER) is validator(ORDER)
    assert validator(dict(ORDER)) is not validator(ORDER)


def test_schema_problem_explains_an_invalid_schema_with_its_path():
    assert schema_problem(ORDER) is None
    assert schema_problem(["not", "a", "mapping"]) == "a JSON Schema must be a mapping"
    bad = {"type": "object", "properties": {"id": {"type": "integr"}}}
    problem = schema_problem(bad)
    assert problem is not None and problem.startswith("invalid JSON Schema at properties/id/type")


async def test_tool_arguments_are_checked_by_the_same_policy():
    async def place(id: int, items: list[dict[str, str]] | None = None) -> str:
        return f"placed {id}"

    tool = FunctionTool(name="place", description="Place an order.", parameters=ORDER, fn=place)
    registry = ToolRegistry([tool])
    bad = await registry.call("place", {"id": 1, "items": [{}]})
    assert bad.is_error and "items/0: 'sku' is a required property" in bad.content
    good = await registry.call("place", {"id": 1})
    assert not good.is_error and good.content == "placed 1"
