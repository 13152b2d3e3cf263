"""ADK's and openai-agents' words in an agent file, and Claude Code's pasted hook and
subagent shapes, are answered with fim's way of saying each (newcomer-50 #5, #6).

A team porting an ADK or openai-agents agent writes `sub_agents:`, `output_key:`,
`model_settings:` and `before_tool_callback:` from memory. A did-you-mean built for typos
sent them the wrong way (`output_key` was "did you mean 'output_schema'?", which would turn
the agent into a JSON-only one) or listed fim's keys cut off. Each now gets the mapping.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from fim.build.compile import compile_project
from fim.config.schema import HookSpec
from fim.errors import ConfigError

FIXTURE = Path(__file__).parents[1] / "fixtures" / "projects" / "minimal"


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "proj"
    shutil.copytree(FIXTURE, root)
    return root


def hint_for(project: Path, line: str) -> str:
    """The one problem an agent file with `line` besides its instructions gets."""
    (project / "agents" / "ported.yaml").write_text(f"instructions: hi\n{line}\n")
    with pytest.raises(ConfigError) as caught:
        compile_project(project)
    found = [str(p) for p in caught.value.problems if p.path == "agents/ported.yaml"]
    assert len(found) == 1, found
    return found[0]


@pytest.mark.parametrize("key", ["sub_agents", "handoffs", "agents_as_tools"])
def test_agents_under_another_frameworks_key_are_delegates(project: Path, key: str) -> None:
    said = hint_for(project, f"{key}: [greeting_agent, farewell_agent]")
    assert said == (
        f"agents/ported.yaml:2:1: unknown key '{key}' (write `delegates: [greeting_agent, "
        "farewell_agent]`, agents this one calls through `call_agent`, as tools: the caller "
        "keeps the conversation and gets the answer back (fim has no handoff))"
    )


def test_output_key_says_fim_keeps_no_session_state_never_output_schema(project: Path) -> None:
    said = hint_for(project, "output_key: last_weather_report")
    assert "fim keeps no session state" in said and "delete this key" in said
    assert "output_schema" not in said


def test_tool_use_behavior_says_what_fim_has_instead_of_tool_selection(project: Path) -> None:
    said = hint_for(project, "tool_use_behavior: stop_on_first_tool")
    assert "fim has no stop-on-tool" in said and "`type: tool` node" in said
    assert "tool_selection" not in said


@pytest.mark.parametrize(
    ("line", "model"),
    [
        ("temperature: 0.3", "{model: general, temperature: 0.3}"),
        ("top_p: 0.9", "{model: general, extra: {top_p: 0.9}}"),
        (
            "model_settings: {temperature: 0.2, top_p: 0.9}",
            "{model: general, temperature: 0.2, extra: {top_p: 0.9}}",
        ),
        (  # ADK's name of the limit is fim's max_tokens
            "generate_content_config: {temperature: 0.1, max_output_tokens: 250}",
            "{model: general, temperature: 0.1, max_tokens: 250}",
        ),
    ],
)
def test_sampling_settings_go_on_the_model_in_fims_fields(
    project: Path, line: str, model: str
) -> None:
    said = hint_for(project, line)
    assert f"write `model: {model}`" in said
    assert "valid keys" not in said and "did you mean" not in said


def test_max_tokens_on_the_agent_also_names_the_runs_budget(project: Path) -> None:
    said = hint_for(project, "max_tokens: 100")
    assert "`model: {model: general, max_tokens: 100}`" in said
    assert "`budget: {max_tokens: N}`" in said


@pytest.mark.parametrize(
    ("key", "event"),
    [
        ("before_tool_callback", "PreToolUse"),
        ("after_tool_callback", "PostToolUse"),
        ("before_agent_callback", "SessionStart"),
        ("input_guardrails", "SessionStart"),
        ("output_guardrails", "PostToolUse"),
    ],
)
def test_callbacks_and_guardrails_are_hooks_of_a_named_event(
    project: Path, key: str, event: str
) -> None:
    said = hint_for(project, f"{key}: guards.check")
    assert f"`hooks: [{{event: {event}, python: module:Class}}]`" in said
    assert "valid keys" not in said


def test_a_model_callback_says_fim_has_no_hook_around_a_model_call(project: Path) -> None:
    said = hint_for(project, "before_model_callback: guards.check")
    assert "fim has no hook around a model call" in said


def test_instruction_is_instructions(project: Path) -> None:
    (project / "agents" / "ported.yaml").write_text("instruction: be brief\n")
    with pytest.raises(ConfigError) as caught:
        compile_project(project)
    assert [str(p) for p in caught.value.problems] == [
        "agents/ported.yaml:1:1: unknown key 'instruction' (fim calls it `instructions:`)"
    ]


def test_a_comma_string_of_tools_gets_the_yaml_list_it_means(project: Path) -> None:
    # a Claude Code subagent's front matter, moved into an agent file as it was written
    said = hint_for(project, "tools: Read, Grep, Glob, Bash")
    assert said == (
        "agents/ported.yaml:2:8: tools: expected a list, got 'Read, Grep, Glob, Bash' "
        "(write a YAML list: [Read, Grep, Glob, Bash], or one `- item` a line)"
    )


# ------------------------------------------------------------------ pasted hook items


def test_a_pasted_hooks_type_command_is_accepted_as_what_command_says() -> None:
    pasted = HookSpec.model_validate(
        {
            "event": "PreToolUse",
            "matcher": "Edit|Write",
            "type": "command",
            "command": "./hooks/guard.sh",
            "timeout": 10,
        }
    )
    assert pasted.command == "./hooks/guard.sh" and pasted.timeout == 10


def test_a_pasted_hook_item_with_type_command_validates_in_an_agent(project: Path) -> None:
    (project / "agents" / "ported.yaml").write_text(
        "instructions: hi\n"
        "hooks:\n"
        '  - {event: SessionStart, type: command, command: "true", timeout: 10}\n'
    )
    assert "ported" in compile_project(project).agents


@pytest.mark.parametrize("kind", ["prompt", "agent"])
def test_claude_codes_prompt_and_agent_hooks_are_refused_by_name(project: Path, kind: str) -> None:
    said = hint_for(project, f"hooks:\n  - {{event: PreToolUse, type: {kind}, prompt: x}}")
    assert said == (
        f"agents/ported.yaml:3:5: hooks.0: Claude Code's `type: {kind}` hooks are not "
        "supported by fim (fim runs `command:`, `python: module:Class` and builtin (`use:`) "
        "hooks; a `python:` hook may ask a model itself)"
    )


def test_type_command_on_a_hook_of_another_kind_is_a_problem(project: Path) -> None:
    said = hint_for(project, "hooks:\n  - {use: audit_log, type: command}")
    assert said.endswith("hooks.0: `type: command` goes with `command:`, not with 'use'")
