"""`fim validate` on a Claude Code project being moved into fim (newcomer-50 findings 6, 7
and 11): a subagent is answered with the agent file to write, a CLAUDE.md / AGENTS.md no
agent includes is named, `@path` imports of an included one are named, and the
settings.json warning counts what is migrated and goes once every hook fim can run is an
agent's.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fim.cli import app

REVIEWER = """---
name: code-reviewer
description: Expert code review specialist.
tools: Read, Grep, Glob, Bash
model: sonnet
---

You are a senior code reviewer.
"""

HOOK = "uv run $CLAUDE_PROJECT_DIR/.claude/hooks/{}.py"
SETTINGS = {
    "hooks": {
        "PreToolUse": [
            {"matcher": "", "hooks": [{"type": "command", "command": HOOK.format("pre")}]}
        ],
        "PostToolUse": [{"hooks": [{"type": "command", "command": HOOK.format("post")}]}],
        "Stop": [{"hooks": [{"type": "command", "command": HOOK.format("stop")}]}],
        "Notification": [{"hooks": [{"type": "command", "command": HOOK.format("notify")}]}],
    }
}


def project(root: Path, instructions: str = "Help.", hooks: tuple[str, ...] = ()) -> Path:
    (root / "agents").mkdir(parents=True)
    (root / "fim.yaml").write_text(
        "name: p\nmodels: {general: scripted:s.yaml, fast: scripted:s.yaml}\n"
    )
    (root / "s.yaml").write_text("- text: done\n")
    agent = {
        "description": "d",
        "instructions": instructions,
        "hooks": [
            {"event": "PreToolUse" if "pre" in c else "PostToolUse", "command": c} for c in hooks
        ],
    }
    (root / "agents" / "assistant.yaml").write_text(json.dumps(agent))
    return root


def warnings(root: Path) -> list[str]:
    result = CliRunner().invoke(app, ["validate", "-p", str(root)])
    assert result.exit_code == 0, result.stdout + result.stderr
    return [line for line in result.stderr.splitlines() if ": warning: " in line]


def test_a_subagent_is_answered_with_the_agent_file_to_write(tmp_path: Path) -> None:
    root = project(tmp_path / "p")
    (root / ".claude" / "agents").mkdir(parents=True)
    (root / ".claude" / "agents" / "code-reviewer.md").write_text(REVIEWER)
    (line,) = [w for w in warnings(root) if "subagent" in w]
    assert line.startswith(
        ".claude/agents/code-reviewer.md:1:1: warning: not an agent file: a Claude Code subagent"
        " is not loaded by fim (write agents/code-reviewer.yaml: {description: 'Expert code "
        "review specialist.', model: general, tools: [file_ops, shell], sandbox: {project: read}}"
    )
    assert "'sonnet' is Claude Code's model alias: fim's models are fim.yaml's model roles" in line
    assert "file_ops sees only the sandbox folder: shell reads the repository at /project" in line
    assert "tools: is a YAML list in fim, not a comma string" in line
    assert line.endswith("the Markdown body (line 7 on) goes under instructions: |)")


def test_a_subagents_tools_without_a_fim_equivalent_are_named(tmp_path: Path) -> None:
    """A list, with an MCP tool and Claude Code's own Task: only readers, so the agent is
    read-only and the note says the repository is out of reach; the single MCP tool is
    left out (attack-59 F4: `mcp:` would grant the whole server)."""
    from fim.config.claude_subagent import converted

    text = "---\ntools: [Read, Task, mcp__github__list_issues, WebFetch]\nmodel: inherit\n---\nx\n"
    hint = converted(text, "agents/a.yaml", ["general"])
    assert hint is not None
    assert hint.startswith(
        "write agents/a.yaml: {model: general, tools: [file_ops, web_fetch], read_only: true}; "
        "'inherit' is Claude Code's model alias"
    )
    assert "not the repository (reading it at /project takes shell" in hint
    assert "left out mcp__github__list_issues" in hint
    assert "no fim tool for Task" in hint and "comma string" not in hint


@pytest.mark.parametrize("name", ["CLAUDE.md", "AGENTS.md"])
def test_a_memory_file_no_agent_includes_is_named(tmp_path: Path, name: str) -> None:
    root = project(tmp_path / "p")
    (root / name).write_text("- Always answer in British English.\n")
    assert [w for w in warnings(root) if name in w] == [
        f"{name}:1:1: warning: {name} is not read by fim "
        f"(add {{% include '{name}' %}} to an agent's instructions)"
    ]


def test_a_memory_file_an_agent_includes_is_quiet_even_through_a_prompt_file(
    tmp_path: Path,
) -> None:
    root = project(tmp_path / "p", "{% include 'prompts/system.md' %}")
    (root / "prompts").mkdir()
    (root / "prompts" / "system.md").write_text('Be brief.\n{% include "CLAUDE.md" %}\n')
    (root / "CLAUDE.md").write_text("- Always answer in British English.\n")
    assert not [w for w in warnings(root) if "CLAUDE.md" in w]


def test_claude_codes_import_lines_in_an_included_file_are_named(tmp_path: Path) -> None:
    """`@docs/refund.md` is Claude Code's import; fim's include leaves it as text. A mention,
    an address and code are not imports."""
    root = project(tmp_path / "p", "{% include 'CLAUDE.md' %}")
    (root / "CLAUDE.md").write_text(
        "Ask @alice, or mail help@example.com.\n"
        "Run `npm i @types/node` first.\n"
        "For refunds see @docs/refund.md and @README.md.\n"
    )
    assert [w for w in warnings(root) if "CLAUDE.md" in w] == [
        "CLAUDE.md:3:17: warning: Claude Code's import @docs/refund.md is not followed by fim: "
        "the model reads the line as written (and 1 more) (include the file in the agent's "
        "instructions too: {% include 'docs/refund.md' %})"
    ]


def test_the_settings_warning_goes_once_every_hook_fim_runs_is_an_agents(tmp_path: Path) -> None:
    """The team keeps settings.json for Claude Code: with its PreToolUse and PostToolUse
    hooks in an agent, its Stop and Notification hooks (fim has no such events) were warned
    about at every validate."""
    root = project(tmp_path / "p", hooks=(HOOK.format("pre"), HOOK.format("post")))
    (root / ".claude").mkdir()
    (root / ".claude" / "settings.json").write_text(json.dumps(SETTINGS))
    assert not [w for w in warnings(root) if "settings.json" in w]


def test_a_partly_migrated_settings_file_says_what_is_where(tmp_path: Path) -> None:
    root = project(tmp_path / "p", hooks=(HOOK.format("pre"),))
    (root / ".claude").mkdir()
    (root / ".claude" / "settings.json").write_text(json.dumps(SETTINGS))
    (line,) = [w for w in warnings(root) if "settings.json" in w]
    assert (
        "Claude Code hooks are not read by fim (1 of 4 are in agents/assistant.yaml; 1 not "
        "yet; 2 use events fim does not support) (paste the rest into an agent's hooks: as a "
        "list, one item per hook, each with its event: "
        'hooks: [{event: PostToolUse, command: "..."}]'
    ) in line
    # quoted as the README says a command is copied: its JSON string, double quotes and all
    assert "command: '...'" not in line and "copy its JSON string with the double quotes" in line
