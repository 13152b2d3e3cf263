"""Real Claude Code project files (tests/fixtures/claude_real/, copied from public
repositories with their licenses) in a fresh `fim init` project: `fim validate` warns about
each, and following its hints exactly loads the skills, runs the pasted hooks and declares
the pasted MCP servers. Each test states what a real file showed that a hand-made one did
not; all offline, through the real CLI.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fim.config.claude_hooks import yaml_string
from fim.config.yamlio import parse

runner = CliRunner()
REAL = Path(__file__).parents[1] / "fixtures" / "claude_real"
SDK = REAL / "claude-agent-sdk-python"
SHOWCASE = REAL / "claude-code-showcase"


def cli(*args: str) -> tuple[int, str, str]:
    # deferred: fim.cli.app builds every command module on first access
    from fim.cli import app

    result = runner.invoke(app, list(args))
    return result.exit_code, result.stdout, result.stderr


def warnings(err: str) -> list[str]:
    return [line for line in err.splitlines() if ": warning: " in line]


def project_with(tmp_path: Path, *sources: Path) -> Path:
    """A fresh `fim init` project with the real files of `sources` copied in (their
    LICENSE and README stay behind)."""
    root = tmp_path / "p"
    code, out, _ = cli("init", str(root))
    assert code == 0, out
    for source in sources:
        for item in source.iterdir():
            if item.name in ("LICENSE", "README.md"):
                continue
            if item.is_dir():
                shutil.copytree(item, root / item.name, dirs_exist_ok=True)
            else:
                shutil.copy(item, root / item.name)
    return root


def agent(
    root: Path, hooks: str, tools: str = "[calculator, file_ops]", skills: str = "[]"
) -> None:
    """The init project's agent on a script that writes one file, with `hooks`."""
    (root / "agents" / "assistant.yaml").write_text(
        "description: d\nmodel: scripted:evals/assistant.script.yaml\ninstructions: x\n"
        f"tools: {tools}\nskills: {skills}\nmax_iterations: 3\nhooks: {hooks}\n"
    )
    (root / "evals" / "assistant.script.yaml").write_text(
        "- tool_calls: [{name: file_ops, arguments: {operation: write, path: a.js, "
        "content: x}}]\n- text: done\n"
    )


def test_the_sdk_repository_files_are_warned_about_and_its_skill_loads(tmp_path: Path) -> None:
    """anthropics/claude-agent-sdk-python: a PostToolUse hook, a subagent, a project skill;
    each warned about, and the skill listed and shown to the agent once `paths.skills`
    names `.claude/skills` as the hint says."""
    root = project_with(tmp_path, SDK)
    code, _, err = cli("validate", "-p", str(root))
    assert code == 0
    assert [w.split(": warning: ")[0] for w in warnings(err)] == [
        ".claude/settings.json:12:3",
        ".claude/agents/test-agent.md:1:1",
        ".claude/skills/:1:1",
    ]
    assert "hooks: [{event: PostToolUse, matcher: 'Edit|Write|MultiEdit', command: \"...\"}]" in err
    with (root / "fim.yaml").open("a") as fh:
        fh.write("paths: {skills: [skills, .claude/skills]}\n")
    agent(root, "[]", skills="[verify]")
    code, out, err = cli("validate", "-p", str(root))
    assert code == 0 and "2 skills" in out and ".claude/skills/" not in err
    code, out, _ = cli("show", "agent", "assistant", "--prompt", "-p", str(root))
    assert code == 0 and "- verify: Drive this repo's build/release scripts" in out


def showcase_guard(root: Path) -> tuple[str, str]:
    """(how the warning quotes the PreToolUse command, the command's JSON string as it is
    written in settings.json, without its quotes): what a user copies."""
    _, _, err = cli("validate", "-p", str(root))
    (line,) = [w for w in warnings(err) if w.startswith(".claude/settings.json")]
    found = re.search(
        r"\{event: PreToolUse, matcher: '[^']*', command: ('\.\.\.'|\"\.\.\.\")\}", line
    )
    assert found is not None, line
    settings = json.loads((root / ".claude" / "settings.json").read_text())
    command = settings["hooks"]["PreToolUse"][0]["hooks"][0]["command"]
    return found.group(1), json.dumps(command)[1:-1]


def test_a_multiline_guard_pasted_as_the_warning_quotes_it_blocks(tmp_path: Path) -> None:
    """claude-code-showcase's guard is `# Prevent editing on main branch\\n[ ... ] || {
    ...; exit 2; }`. The warning showed it as `command: '...'`; pasted between single
    quotes, YAML keeps `\\n` as typed, the whole command is one shell comment, and every
    write on main was allowed. Shown as `command: "..."`, the JSON string pastes as it is
    and the guard blocks."""
    root = project_with(tmp_path, SHOWCASE)
    subprocess.run(["git", "init", "-q", "-b", "main", str(root)], check=True)
    quoted, text = showcase_guard(root)
    # between single quotes, a quote is doubled (YAML's one escape there)
    single = "'" + text.replace("'", "''") + "'"
    pasted = single if quoted == "'...'" else f'"{text}"'
    agent(root, f"[{{event: PreToolUse, matcher: 'Edit|MultiEdit|Write', command: {pasted}}}]")
    code, out, err = cli("run", "assistant", "write it", "-v", "-p", str(root))
    assert code == 0, out + err
    assert "Cannot edit files on main branch" in out + err
    assert not (root / ".fim" / "sandbox" / "a.js").exists()


def test_the_warning_says_how_to_paste_a_command_json_escapes(tmp_path: Path) -> None:
    root = project_with(tmp_path, SHOWCASE)
    _, _, err = cli("validate", "-p", str(root))
    (line,) = [w for w in warnings(err) if w.startswith(".claude/settings.json")]
    assert line.endswith(
        "; a \"...\" command: copy its JSON string with the double quotes (in '...' YAML "
        'keeps \\n and \\" as typed, and a command starting with # becomes one comment))'
    )
    assert "Prevent editing" not in line  # still no command shown (attack-39 #3)


@pytest.mark.parametrize("source", [SDK, SHOWCASE], ids=lambda p: p.name)
def test_every_real_command_reads_back_from_its_yaml_form(source: Path) -> None:
    """The form a pasted settings.json block is answered with (`fim validate` on an agent)
    quotes each command so that YAML reads back the very command."""
    settings = json.loads((source / ".claude" / "settings.json").read_text())
    commands = [
        hook["command"]
        for groups in settings["hooks"].values()
        for group in groups
        for hook in group["hooks"]
    ]
    assert len(commands) >= 1
    for command in commands:
        assert parse(f"command: {yaml_string(command)}\n", "x.yaml").data == {"command": command}


def test_mcp_json_servers_pasted_into_fim_yaml_are_declared_with_their_tokens_unset(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """claude-code-showcase's `.mcp.json`: 7 of its 8 servers need a token. Pasted into
    `mcp_servers:` as the hint says, they are unavailable here (a warning each, as for any
    unset `${VAR}`), and `.mcp.json` no longer says "7 MCP servers not declared"."""
    root = project_with(tmp_path, SHOWCASE)
    servers = json.loads((root / ".mcp.json").read_text())["mcpServers"]
    for server in servers.values():
        for value in server.get("env", {}).values():
            monkeypatch.delenv(value.strip("${}"), raising=False)
    _, _, err = cli("validate", "-p", str(root))
    assert "8 MCP servers not declared: jira, github, linear, ..." in err
    with (root / "fim.yaml").open("a") as fh:
        fh.write(f"mcp_servers: {json.dumps(servers)}\n")
    code, out, err = cli("validate", "-p", str(root))
    assert code == 0 and "7 unavailable" in out
    assert "MCP server 'jira' is unavailable" in err
    assert not [w for w in warnings(err) if w.startswith(".mcp.json")]


def test_subagents_in_subfolders_are_counted(tmp_path: Path) -> None:
    """Claude Code reads subagents from subfolders of `.claude/agents/`
    (disler/claude-code-hooks-mastery keeps 13 of its 19 in `crypto/` and `team/`); the
    warning counted the top level only."""
    root = project_with(tmp_path, SHOWCASE)
    team = root / ".claude" / "agents" / "team"
    team.mkdir()
    shutil.copy(SDK / ".claude" / "agents" / "test-agent.md", team)
    _, _, err = cli("validate", "-p", str(root))
    (line,) = [w for w in warnings(err) if "subagent" in w]
    assert line.startswith(
        ".claude/agents/code-reviewer.md:1:1: warning: not an agent file: a Claude Code "
        "subagent is not loaded by fim (and 2 more: .claude/agents/github-workflow.md, "
        ".claude/agents/team/test-agent.md)"
    )


def test_newer_claude_code_events_are_named_not_supported(tmp_path: Path) -> None:
    """disler/claude-code-hooks-mastery's settings.json has PermissionRequest,
    PostToolUseFailure, SubagentStart and Setup hooks: a block of only those was answered
    with a bare "paste them into an agent's hooks: as a list", and `event: Setup` in an
    agent with the generic literal error."""
    root = project_with(tmp_path, SDK)
    hook = {"type": "command", "command": "uv run .claude/hooks/setup.py"}
    (root / ".claude" / "settings.json").write_text(
        json.dumps({"hooks": {"Setup": [{"matcher": "", "hooks": [hook]}]}})
    )
    _, _, err = cli("validate", "-p", str(root))
    assert "Setup: not supported by fim (supported: SessionStart, PreToolUse, PostToolUse)" in err
    agent(root, "[{event: PermissionRequest, command: ./x.sh}]")
    code, out, _ = cli("validate", "-p", str(root))
    assert code == 1
    assert "'PermissionRequest' is a Claude Code event not supported by fim" in out


def test_what_was_followed_is_not_warned_about_again(tmp_path: Path) -> None:
    """The settings.json warning goes once every command it lists is an agent's hook, and a
    subagent's once an agent of its name replaces it: a warning that stays after it was
    followed teaches to ignore warnings."""
    from fim.build.compile import compile_project
    from fim.config.claude_files import claude_code_files

    (tmp_path / ".claude" / "agents").mkdir(parents=True)
    (tmp_path / "agents").mkdir()
    (tmp_path / ".claude" / "agents" / "reviewer.md").write_text("---\nname: reviewer\n---\nx\n")
    hooks = {
        "PreToolUse": [{"matcher": "Bash", "hooks": [{"type": "command", "command": "./g.sh"}]}]
    }
    (tmp_path / ".claude" / "settings.json").write_text(json.dumps({"hooks": hooks}))
    (tmp_path / "fim.yaml").write_text('name: f\nstate: "sqlite:///.fim/state.db"\n')
    (tmp_path / "a.yaml").write_text("- text: hi\n")
    (tmp_path / "agents" / "dev.yaml").write_text("model: scripted:a.yaml\n")

    def said() -> list[str]:
        snapshot = compile_project(tmp_path)
        return [p.message for p in claude_code_files(tmp_path, snapshot.project, snapshot.agents)]

    assert len(said()) == 2
    (tmp_path / "g.sh").write_text("#!/bin/sh\nexit 0\n")
    (tmp_path / "g.sh").chmod(0o755)
    (tmp_path / "agents" / "dev.yaml").write_text(
        "model: scripted:a.yaml\ntools: [shell]\n"
        "hooks: [{event: PreToolUse, matcher: Bash, command: ./g.sh}]\n"
    )
    assert said() == ["not an agent file: a Claude Code subagent is not loaded by fim"]
    (tmp_path / "agents" / "reviewer.yaml").write_text("model: scripted:a.yaml\n")
    assert said() == []
