"""A tool ported from ADK (`tool_context: ToolContext`) or openai-agents (`ctx:
RunContextWrapper`) keeps the context parameter those frameworks inject. fim injects none,
so `fim validate` says so and asks to remove it (newcomer-50 #5), instead of "annotate it,
e.g. tool_context: int", which would show the model a required integer to make up."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Generic, TypeVar

import pytest

from fim.tools.python_tools import PythonToolError, build_tool
from tests.eval_projects import problems

T = TypeVar("T")


class ToolContext:
    """Stands for google.adk.tools.ToolContext."""


class RunContextWrapper(Generic[T]):
    """Stands for agents.RunContextWrapper."""


HINT = (
    "ADK passes a ToolContext and openai-agents a RunContextWrapper into a tool; fim injects "
    "no context, and the model cannot fill one: remove the parameter"
)


def test_validate_names_adks_tool_context_whose_import_was_removed(tmp_path: Path) -> None:
    root = tmp_path / "p"
    (root / "agents").mkdir(parents=True)
    (root / "hooks").mkdir()
    (root / "fim.yaml").write_text("name: p\nstate: sqlite:///.fim/state.db\n")
    (root / "hooks" / "weather.py").write_text(
        "def get_weather_stateful(city: str, tool_context) -> str:\n"
        '    """Weather, in the unit the session prefers."""\n'
        "    return city\n"
    )
    (root / "agents" / "weather.yaml").write_text(
        json.dumps(
            {"description": "w", "model": "scripted:x", "tools": ["weather:get_weather_stateful"]}
        )
    )
    [problem] = [p for p in problems(root) if "tools:" in p]
    assert re.match(r"agents/weather\.yaml:\d+:\d+: ", problem), problem
    assert problem.endswith(
        "tools: 'weather:get_weather_stateful' has a parameter for an injected context: "
        f"tool_context ({HINT})"
    )
    assert "tool_context: int" not in problem


def adk_tool(city: str, tool_context: ToolContext) -> str:
    """ADK's stateful tool."""
    return city


def agents_tool(ctx: RunContextWrapper[Any], city: str) -> str:
    """openai-agents' tool."""
    return city


def quoted(wrapper: RunContextWrapper, city: str) -> str:
    """A context under a name of its own, annotated."""
    return city


quoted.__annotations__["wrapper"] = "agents.RunContextWrapper[MyState]"


def unannotated(city: str, ctx, run_context, context) -> str:  # type: ignore[no-untyped-def]
    """openai-agents' names, their imports gone."""
    return city


@pytest.mark.parametrize(
    ("fn", "named"),
    [
        (adk_tool, "tool_context"),
        (agents_tool, "ctx"),
        (quoted, "wrapper"),
        (unannotated, "ctx, run_context, context"),
    ],
)
def test_an_injected_context_is_named_as_one(fn: Any, named: str) -> None:
    with pytest.raises(PythonToolError) as caught:
        build_tool(fn, f"mytools:{fn.__name__}")
    assert caught.value.message == (
        f"'mytools:{fn.__name__}' has a parameter for an injected context: {named}"
    )
    assert caught.value.hint == HINT


def with_context_text(question: str, context: str = "") -> str:
    """A parameter called context that the model fills."""
    return question + context


def test_an_annotated_parameter_called_context_is_an_ordinary_argument() -> None:
    tool = build_tool(with_context_text, "mytools:with_context_text")
    assert tool.parameters["properties"]["context"]["type"] == "string"


def untyped(city, units) -> str:  # type: ignore[no-untyped-def]
    """Other bare parameters keep the annotate-it hint."""
    return city


def test_other_bare_parameters_still_ask_for_annotations() -> None:
    with pytest.raises(PythonToolError) as caught:
        build_tool(untyped, "mytools:untyped")
    assert caught.value.hint is not None and caught.value.hint.startswith("annotate each one")
