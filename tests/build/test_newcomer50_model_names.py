"""A model written as its provider's docs or another tool write it, and a tool module kept
where another framework keeps it, get the fix in the error (newcomer-50 #5, #6).

ADK writes `model: gemini-2.0-flash`, a Claude Code subagent `model: sonnet`; fim read both
as unknown roles and offered `openai/gpt-4o-mini`. Now the hint offers the litellm strings
the name probably means (its family's provider, and where litellm's price table lists it,
found in the table's text as the misspelt-model warning finds names), or says what Claude
Code's alias is. `fim validate`, a run and `fim run -m` say it in one wording. A tool module
in `tools/` (ADK's habit) is found and named, with the two ways to fix it.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from fim.build.compile import compile_project
from fim.build.model_checks import provider_strings, unknown_role
from fim.errors import ConfigError, RunError
from tests.inprocess_cli import run_fim

FIXTURE = Path(__file__).parents[1] / "fixtures" / "projects" / "minimal"


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "proj"
    shutil.copytree(FIXTURE, root)
    return root


def problems(root: Path) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        compile_project(root)
    return [str(p) for p in caught.value.problems]


def test_an_adk_gemini_name_is_offered_with_its_provider_and_where_litellm_lists_it(
    project: Path,
) -> None:
    (project / "agents" / "weather.yaml").write_text("model: gemini-2.0-flash\n")
    assert problems(project) == [
        "agents/weather.yaml:1:8: unknown model role 'gemini-2.0-flash' (did you mean "
        "'gemini/gemini-2.0-flash' or 'vertex_ai/gemini-2.0-flash'? a litellm string names "
        "its provider; model roles: fast, general)"
    ]


@pytest.mark.parametrize(
    ("written", "meant"),
    [
        ("gpt-4o", "openai/gpt-4o"),
        ("claude-sonnet-4-5", "anthropic/claude-sonnet-4-5"),
        ("mistral-large-latest", "mistral/mistral-large-latest"),
    ],
)
def test_a_listed_name_without_its_provider_is_offered_with_the_providers_own(
    project: Path, written: str, meant: str
) -> None:
    (project / "agents" / "ported.yaml").write_text(f"model: {written}\n")
    assert problems(project) == [
        f"agents/ported.yaml:1:8: unknown model role '{written}' (did you mean '{meant}'? a "
        "litellm string names its provider; model roles: fast, general)"
    ]


def test_the_price_table_is_asked_under_each_provider_prefix() -> None:
    asked: list[str] = []

    def listed(model: str) -> bool:
        asked.append(model)
        return model == "groq/llama-3.3-70b-versatile"

    assert provider_strings("llama-3.3-70b-versatile", listed) == ["groq/llama-3.3-70b-versatile"]
    assert "vertex_ai/llama-3.3-70b-versatile" in asked  # each prefix, the text searched


def test_a_role_typo_is_still_a_did_you_mean_over_the_roles(project: Path) -> None:
    (project / "agents" / "ported.yaml").write_text("model: genral\n")
    assert problems(project) == [
        "agents/ported.yaml:1:8: unknown model role 'genral' (did you mean 'general'?)"
    ]


@pytest.mark.parametrize(
    ("alias", "example"),
    [
        ("sonnet", "anthropic/claude-sonnet-4-5"),
        ("opus", "anthropic/claude-opus-4-5"),
        ("haiku", "anthropic/claude-haiku-4-5"),
    ],
)
def test_claude_codes_model_aliases_name_the_projects_roles(
    project: Path, alias: str, example: str
) -> None:
    (project / "agents" / "reviewer.yaml").write_text(f"model: {alias}\n")
    assert problems(project) == [
        f"agents/reviewer.yaml:1:8: unknown model role '{alias}' ('{alias}' is Claude Code's "
        "alias of a Claude model: fim names a role of fim.yaml or a litellm string such as "
        f"{example}; model roles: fast, general)"
    ]


def test_claude_codes_inherit_says_a_fim_agent_names_its_own_model(project: Path) -> None:
    (project / "agents" / "reviewer.yaml").write_text("model: inherit\n")
    assert problems(project) == [
        "agents/reviewer.yaml:1:8: unknown model role 'inherit' ('inherit' is Claude Code's "
        '"the caller\'s model": a fim agent names its own, a role of fim.yaml or a litellm '
        "string; leave `model:` out for 'general'; model roles: fast, general)"
    ]


def test_a_run_and_fim_run_m_say_it_as_validate_does(project: Path) -> None:
    snapshot = compile_project(project)
    with pytest.raises(RunError) as caught:
        snapshot.model_settings("sonnet")
    said = (caught.value.message, caught.value.hint)
    assert said == unknown_role("sonnet", ["fast", "general"])
    done = run_fim("--project", str(project), "run", "helper", "hi", "-m", "gpt-4o")
    assert done.returncode != 0
    assert (
        "-m: unknown model role 'gpt-4o' (did you mean 'openai/gpt-4o'? a litellm string "
        "names its provider; model roles: fast, general)"
    ) in done.stderr


# ------------------------------------------------------------------ tools/ elsewhere


TOOL = 'def get_weather(city: str) -> str:\n    """Weather."""\n    return city\n'


def test_a_tool_module_in_tools_is_found_and_both_fixes_are_named(project: Path) -> None:
    (project / "tools").mkdir()
    (project / "tools" / "weather.py").write_text(TOOL)
    (project / "agents" / "weather.yaml").write_text("tools: [weather:get_weather]\n")
    assert problems(project) == [
        "agents/weather.yaml:1:9: tools: cannot import 'weather:get_weather' (found "
        "tools/weather.py: fim reads Python tools from hooks/; move it there, or set "
        "`paths: {hooks: tools}` in fim.yaml)"
    ]


def test_a_workflow_tool_node_is_told_where_the_module_is_too(project: Path) -> None:
    (project / "lib" / "pkg").mkdir(parents=True)
    (project / "lib" / "pkg" / "weather.py").write_text(TOOL)
    (project / "workflows" / "w.yaml").write_text(
        "nodes:\n  a: {type: tool, tool: 'pkg.weather:get_weather', args: {city: x}}\n"
    )
    found = [p for p in problems(project) if p.startswith("workflows/w.yaml")]
    assert len(found) == 1
    assert found[0].endswith(
        "(found lib/pkg/weather.py: fim reads Python tools from hooks/; move it there, or set "
        "`paths: {hooks: lib}` in fim.yaml)"
    )


def test_without_such_a_file_anywhere_the_hint_is_as_before(project: Path) -> None:
    (project / ".venv" / "lib").mkdir(parents=True)  # hidden folders are not looked into
    (project / ".venv" / "lib" / "weather.py").write_text(TOOL)
    (project / "agents" / "weather.yaml").write_text("tools: [weather:get_weather]\n")
    assert problems(project) == [
        "agents/weather.yaml:1:9: tools: cannot import 'weather:get_weather' (there is no "
        "hooks/weather.py; no modules in hooks/ declared)"
    ]
