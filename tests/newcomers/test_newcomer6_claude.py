"""Newcomer review 6, finding 4: what a Claude Code user puts in a project first
(`.claude/settings.json` hooks, `.claude/skills/`, subagent Markdown files, `.mcp.json`)
was silently ignored and `fim validate` said ok. Now each is one warning at the file, saying
what fim does instead; `paths.skills` takes a list, so `.claude/skills/` loads next to
`skills/`. Stated as the behaviour fixed, through the real CLI.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

runner = CliRunner()

SETTINGS = """\
{
  "permissions": {"allow": ["Bash(ls)"]},
  "hooks": {
    "PreToolUse": [{"matcher": "calculator",
                    "hooks": [{"type": "command", "command": ".claude/hooks/guard.py"}]}]
  }
}
"""

SUBAGENT = """\
---
name: reviewer
description: Reviews code
tools: Read, Grep
model: sonnet
---
You review code.
"""

MCP_JSON = {"mcpServers": {"notes": {"type": "stdio", "command": "python", "args": ["m.py"]}}}


def cli(*args: str) -> tuple[int, str, str]:
    # deferred: fim.cli.app builds every command module on first access
    from fim.cli import app

    result = runner.invoke(app, list(args))
    return result.exit_code, result.stdout, result.stderr


def skill(folder: Path, name: str) -> None:
    (folder / name).mkdir(parents=True)
    (folder / name / "SKILL.md").write_text(
        f"---\nname: {name}\ndescription: The {name} skill.\n---\nDo {name}.\n"
    )


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A valid project with a Claude Code user's files copied in."""
    root = tmp_path / "p"
    (root / "agents").mkdir(parents=True)
    (root / ".claude").mkdir()
    (root / "fim.yaml").write_text("name: p\nmodels: {general: scripted:s.yaml}\n")
    (root / "s.yaml").write_text("- text: done\n")
    (root / "agents" / "dev.yaml").write_text("description: d\nmodel: general\n")
    (root / "agents" / "reviewer.md").write_text(SUBAGENT)
    (root / "agents" / "README.md").write_text("# Our agents\n")  # not front matter: quiet
    (root / ".claude" / "settings.json").write_text(SETTINGS)
    skill(root / ".claude" / "skills", "haiku")
    skill(root / "skills", "limerick")
    (root / ".mcp.json").write_text(json.dumps(MCP_JSON))
    return root


def warnings(err: str) -> list[str]:
    return [line for line in err.splitlines() if ": warning: " in line]


def test_validate_warns_once_per_claude_code_file_fim_does_not_read(project: Path) -> None:
    code, out, err = cli("validate", "-p", str(project))
    assert code == 0 and out.startswith("ok: 1 agent, 1 skill")
    assert warnings(err) == [
        ".claude/settings.json:3:3: warning: Claude Code hooks are not read by fim (paste "
        "them into an agent's hooks: as a list, one item per hook, each with its event: "
        'hooks: [{event: PreToolUse, matcher: \'calculator\', command: "..."}]; a "..." '
        "command: copy its JSON string with the double quotes (in '...' YAML keeps \\n and "
        '\\" as typed, and a command starting with # becomes one comment))',
        "agents/reviewer.md:1:1: warning: not an agent file: a Claude Code subagent is not "
        "loaded by fim (write agents/reviewer.yaml: {description: 'Reviews code', model: "
        "general, tools: [file_ops], read_only: true}; 'sonnet' is Claude Code's "
        "model alias: fim's models are fim.yaml's model roles (general), or a litellm string "
        "such as anthropic/claude-sonnet-4-5; file_ops sees only the sandbox folder, not the "
        "repository (reading it at /project takes shell, which read_only: true blocks); "
        "tools: is a YAML list in fim, not a comma string; the Markdown body (line 7 "
        "on) goes under instructions: |)",
        ".claude/skills/:1:1: warning: 1 skill fim does not load: haiku (set paths: "
        "{skills: [skills, .claude/skills]} in fim.yaml to load them)",
        ".mcp.json:1:2: warning: 1 MCP server not declared: notes (copy mcpServers into "
        "fim.yaml's mcp_servers:, the entries are accepted as they are)",
    ]


def test_the_warnings_do_not_fail_strict(project: Path) -> None:
    """A repository developed with Claude Code keeps its `.claude/` for Claude Code: a CI
    gate on `fim validate --strict` must not turn red for it."""
    code, _, err = cli("validate", "--strict", "-p", str(project))
    assert code == 0 and len(warnings(err)) == 4


def test_following_the_hints_loads_both_skill_folders_and_the_pasted_servers(
    project: Path,
) -> None:
    """`paths: {skills: [skills, .claude/skills]}` loads both; `.mcp.json`'s entries pasted
    into `mcp_servers:` as they are validate, and their warnings go."""
    servers = json.dumps(MCP_JSON["mcpServers"])
    with (project / "fim.yaml").open("a") as fh:
        fh.write(f"paths: {{skills: [skills, .claude/skills]}}\nmcp_servers: {servers}\n")
    code, out, err = cli("validate", "-p", str(project))
    assert code == 0, out
    assert "2 skills" in out
    assert [w.split(":")[0] for w in warnings(err)] == [
        ".claude/settings.json",
        "agents/reviewer.md",
    ]
    code, out, _ = cli("list", "skills", "-p", str(project))
    assert code == 0 and "haiku" in out and "limerick" in out


def test_a_skill_in_two_listed_folders_is_a_duplicate(project: Path) -> None:
    skill(project / ".claude" / "skills", "limerick")
    with (project / "fim.yaml").open("a") as fh:
        fh.write("paths: {skills: [skills, .claude/skills]}\n")
    code, out, _ = cli("validate", "-p", str(project))
    assert code == 1
    assert ".claude/skills/limerick/SKILL.md:2:7: duplicate skill name 'limerick' " in out


def test_an_mcp_json_entry_fim_rejects_is_named_in_the_hint(project: Path) -> None:
    broken = {"mcpServers": {"odd": {"type": "websocket", "url": "ws://x"}}}
    (project / ".mcp.json").write_text(json.dumps(broken))
    _, _, err = cli("validate", "-p", str(project))
    (line,) = [w for w in warnings(err) if w.startswith(".mcp.json")]
    assert line.endswith(
        "1 MCP server not declared: odd (copy mcpServers into fim.yaml's mcp_servers:; "
        "fim rejects odd as it is: `fim validate` says why)"
    )


def test_a_project_without_claude_code_files_has_no_such_warnings(tmp_path: Path) -> None:
    root = tmp_path / "q"
    (root / "agents").mkdir(parents=True)
    (root / "fim.yaml").write_text("name: q\nmodels: {general: scripted:s.yaml}\n")
    (root / "s.yaml").write_text("- text: done\n")
    (root / "agents" / "dev.yaml").write_text("description: d\nmodel: general\n")
    (root / ".claude").mkdir()
    (root / ".claude" / "settings.json").write_text('{"permissions": {"allow": []}}')
    code, _, err = cli("validate", "-p", str(root))
    assert code == 0 and warnings(err) == []
