"""ToolRegistry: every way a tool call can go wrong becomes an observation for the model."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from fim.tools import FunctionTool, ToolRegistry, tool
from fim.types import ToolResult

ADD_SCHEMA = {
    "type": "object",
    "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
    "required": ["a", "b"],
    "additionalProperties": False,
}


@tool("add", "Add two integers.", ADD_SCHEMA, category="compute", access="read")
async def add(a: int, b: int) -> str:
    return str(a + b)


async def _boom(**_: Any) -> str:
    raise RuntimeError("disk on fire")


async def _hang(**_: Any) -> str:
    await asyncio.sleep(3600)
    return "never"


async def _own_timeout(**_: Any) -> str:
    raise TimeoutError("upstream took too long")


async def _data(**_: Any) -> Any:
    return {"answer": 42}


def _fn(name: str, fn: Any) -> FunctionTool:
    return FunctionTool(name, f"{name} tool", {"type": "object", "properties": {}}, fn)


@pytest.fixture
def registry() -> ToolRegistry:
    return ToolRegistry(
        [
            add,
            _fn("boom", _boom),
            _fn("hang", _hang),
            _fn("own_timeout", _own_timeout),
            _fn("data", _data),
        ]
    )


async def test_a_valid_call_returns_the_tool_output(registry: ToolRegistry) -> None:
    result = await registry.call("add", {"a": 2, "b": 3})
    assert result == ToolResult(content="5")


def test_the_decorator_keeps_category_and_metadata() -> None:
    assert add.category == "compute"
    assert add.metadata == {"access": "read"}


async def test_unknown_tool_names_the_available_ones(registry: ToolRegistry) -> None:
    result = await registry.call("substract", {"a": 1})
    assert result.is_error
    assert "no tool named 'substract'" in result.content
    assert "add, boom, hang, own_timeout, data" in result.content


async def test_unknown_tool_lists_only_the_visible_tools(registry: ToolRegistry) -> None:
    registry.restrict(["add"])
    result = await registry.call("nope", {})
    assert "Available tools: add." in result.content


async def test_malformed_json_is_quoted_back(registry: ToolRegistry) -> None:
    result = await registry.call("add", {}, raw='{"a": 1, "b":')
    assert result.is_error
    assert "were not valid JSON" in result.content
    assert '{"a": 1, "b":' in result.content
    assert "one JSON object" in result.content


async def test_schema_failure_says_what_is_wrong_and_what_is_valid(
    registry: ToolRegistry,
) -> None:
    result = await registry.call("add", {"a": "two"})
    assert result.is_error
    assert "invalid arguments for 'add'" in result.content
    assert "a: 'two' is not of type 'integer'" in result.content
    assert "'b' is a required property" in result.content
    assert "Valid parameters: {a: integer, b: integer}" in result.content
    assert "call the tool again" in result.content


async def test_extra_arguments_are_refused(registry: ToolRegistry) -> None:
    result = await registry.call("add", {"a": 1, "b": 2, "c": 3})
    assert result.is_error
    assert "'c' was unexpected" in result.content


async def test_a_tool_that_raises_becomes_an_observation(registry: ToolRegistry) -> None:
    result = await registry.call("boom", {})
    assert result == ToolResult(
        content="Error: tool 'boom' failed: RuntimeError: disk on fire", is_error=True
    )


async def test_a_tool_that_hangs_is_cut_at_the_timeout(registry: ToolRegistry) -> None:
    result = await registry.call("hang", {}, timeout=0.05)
    assert result.is_error
    assert result.content.startswith("Error: tool 'hang' timed out after 0.05s.")


async def test_a_tools_own_timeout_error_is_a_failure_not_a_registry_timeout(
    registry: ToolRegistry,
) -> None:
    without_deadline = await registry.call("own_timeout", {})
    with_deadline = await registry.call("own_timeout", {}, timeout=5)
    expected = "Error: tool 'own_timeout' failed: TimeoutError: upstream took too long"
    assert without_deadline.content == expected
    assert with_deadline.content == expected


async def test_non_text_results_are_sent_as_json(registry: ToolRegistry) -> None:
    result = await registry.call("data", {})
    assert result.content == '{"answer": 42}'


async def test_cancellation_propagates(registry: ToolRegistry) -> None:
    task = asyncio.create_task(registry.call("hang", {}))
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


def test_duplicate_names_are_rejected() -> None:
    with pytest.raises(ValueError, match="duplicate tool name 'add'"):
        ToolRegistry([add, add])


def test_restrict_and_activate_control_what_the_model_sees(registry: ToolRegistry) -> None:
    assert len(registry) == 5
    registry.restrict(["add", "ghost"])
    assert registry.active_names == ["add"]
    assert [s.name for s in registry.specs()] == ["add"]
    assert registry.specs()[0].parameters == ADD_SCHEMA
    assert {t.name for t in registry.inactive} == {"boom", "hang", "own_timeout", "data"}
    assert registry.activate(["data", "add", "ghost"]) == ["data"]
    assert registry.active_names == ["add", "data"]
    assert "boom" in registry and "ghost" not in registry


def test_activate_without_a_restriction_adds_nothing(registry: ToolRegistry) -> None:
    assert registry.activate(["add"]) == []
    assert registry.active_names == registry.names


async def test_a_tool_that_suspends_is_driven_to_its_end_under_the_deadline() -> None:
    """The first step of a call runs at once (no deadline armed for tools that never
    suspend); one that suspends continues under the deadline and returns or raises as if
    awaited directly."""

    async def steps(**_: Any) -> str:
        for _ in range(3):
            await asyncio.sleep(0)
        return "done after 3 suspensions"

    async def late_boom(**_: Any) -> str:
        await asyncio.sleep(0)
        raise RuntimeError("after a suspension")

    async def slow_then_hang(**_: Any) -> str:
        await asyncio.sleep(0)
        await asyncio.sleep(3600)
        return "never"

    class Ready:  # an awaitable that is not a coroutine
        def __await__(self) -> Any:
            yield from asyncio.sleep(0).__await__()
            return "from __await__"

    def awaitable(**_: Any) -> Any:
        return Ready()

    registry = ToolRegistry(
        [
            _fn("steps", steps),
            _fn("late_boom", late_boom),
            _fn("slow", slow_then_hang),
            _fn("ready", awaitable),
        ]
    )
    assert (await registry.call("steps", {}, timeout=5)).content == "done after 3 suspensions"
    assert (await registry.call("late_boom", {}, timeout=5)).content == (
        "Error: tool 'late_boom' failed: RuntimeError: after a suspension"
    )
    slow = await registry.call("slow", {}, timeout=0.05)
    assert slow.content.startswith("Error: tool 'slow' timed out after 0.05s.")
    assert (await registry.call("ready", {}, timeout=5)).content == "from __await__"


async def test_a_huge_result_is_cut_to_its_head_and_tail_before_anything_reads_it():
    """An 8 MB database result or a server's huge reply cost every step after it on the
    event loop (masking, token counting ~0.2 s a megabyte, events, the store)."""
    from fim.tools.registry import MAX_OBSERVATION_CHARS

    big = "HEAD" + "x" * 2_000_000 + "TAIL"

    async def dump() -> str:
        return big

    async def small() -> str:
        return "ok"

    none: dict[str, Any] = {"type": "object", "properties": {}}
    registry = ToolRegistry(
        [FunctionTool("dump", "A huge text", none, dump), FunctionTool("small", "Ok", none, small)]
    )
    result = await registry.call("dump", {})
    assert len(result.content) < MAX_OBSERVATION_CHARS + 200
    assert result.content.startswith("HEAD") and result.content.endswith("TAIL")
    cut = len(big) - MAX_OBSERVATION_CHARS
    assert f"[... {cut} characters of this result were cut" in result.content
    assert (await registry.call("small", {})).content == "ok"
