"""A project function's docstring as ADK and openai-agents read it (newcomer review 6): the
parameter descriptions of a Google (`Args:`), NumPy (`Parameters` + dashes) or Sphinx
(`:param x:`) docstring reach the tool's JSON Schema, where the model reads them; the
tool's description stays the summary (an `Args:` section right below it is no part of
it); a description an annotation gives (`Annotated[..., Field(description=...)]`) wins."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from fim.build.compile import compile_project
from fim.capabilities import CAPABILITIES
from fim.run.assembly import assemble
from fim.run.services import RunContext, Services
from fim.tools.docstrings import parameter_docs

TOOLS = '''
from typing import Annotated

from pydantic import Field


def get_weather(city: str, days: int = 1) -> dict:
    """Retrieves the current weather report for a specified city.

    Args:
        city (str): The name of the city for which to retrieve
            the weather report.
        days: How many days ahead.

    Returns:
        dict: status and result.
    """
    return {"city": city}


def forecast(city: str, days: int) -> dict:
    """The forecast for a city.

    Parameters
    ----------
    city : str
        The name of the city,
        in English.
    days : int
        How many days ahead.

    Returns
    -------
    dict
        The forecast.
    """
    return {"city": city}


def tides(port: str, metric: bool = True) -> str:
    """Tide times of a port.

    :param port: The port's name.
    :param bool metric: Heights in metres.
    :returns: the tides as text
    """
    return port


def squeezed(city: str) -> str:
    """Looks up a city.
    Args:
        city: The city to look up.
    """
    return city


def annotated(city: Annotated[str, Field(description="from the annotation")]) -> str:
    """Annotated wins.

    Args:
        city: from the docstring
    """
    return city
'''


@pytest.fixture
def tools(tmp_path: Path) -> dict[str, Any]:
    """The project's function tools as the model is offered them, by name."""
    root = tmp_path / "p"
    (root / "agents").mkdir(parents=True)
    (root / "hooks").mkdir()
    (root / "hooks" / "mytools.py").write_text(TOOLS)
    (root / "fim.yaml").write_text(json.dumps({"name": "doc", "state": "sqlite:///.fim/s.db"}))
    (root / "s.script.yaml").write_text(json.dumps([{"text": "done"}]))
    names = ["get_weather", "forecast", "tides", "squeezed", "annotated"]
    agent = {
        "description": "weather",
        "model": "scripted:s.script.yaml",
        "instructions": "Go.",
        "tools": [f"mytools:{n}" for n in names],
    }
    (root / "agents" / "weather.yaml").write_text(json.dumps(agent))
    snapshot = compile_project(root)
    ctx = RunContext(
        snapshot=snapshot,
        agent=snapshot.agent("weather"),
        services=Services(providers=CAPABILITIES, root=root),
    )
    registry = asyncio.run(assemble(ctx)).registry
    return {s.name: s for s in registry.specs() if s.name in names}


def described(spec: Any) -> dict[str, str | None]:
    return {k: v.get("description") for k, v in spec.parameters["properties"].items()}


def test_google_style_args_describe_the_parameters(tools: dict[str, Any]) -> None:
    spec = tools["get_weather"]
    assert spec.description == "Retrieves the current weather report for a specified city."
    assert described(spec) == {
        "city": "The name of the city for which to retrieve the weather report.",
        "days": "How many days ahead.",
    }
    assert spec.parameters["properties"]["city"]["type"] == "string"


def test_numpy_style_parameters_describe_the_parameters(tools: dict[str, Any]) -> None:
    spec = tools["forecast"]
    assert spec.description == "The forecast for a city."
    assert described(spec) == {
        "city": "The name of the city, in English.",
        "days": "How many days ahead.",
    }


def test_sphinx_style_params_describe_the_parameters(tools: dict[str, Any]) -> None:
    spec = tools["tides"]
    assert spec.description == "Tide times of a port."
    assert described(spec) == {"port": "The port's name.", "metric": "Heights in metres."}


def test_an_args_section_right_below_the_summary_is_not_the_description(
    tools: dict[str, Any],
) -> None:
    spec = tools["squeezed"]
    assert spec.description == "Looks up a city."
    assert described(spec) == {"city": "The city to look up."}


def test_a_description_in_the_annotation_wins_over_the_docstring(
    tools: dict[str, Any],
) -> None:
    assert described(tools["annotated"]) == {"city": "from the annotation"}


def test_a_docstring_without_a_parameter_section_describes_nothing() -> None:
    assert parameter_docs("Add two numbers.\n\nThe model never reads this.") == {}
    assert parameter_docs(None) == {}
