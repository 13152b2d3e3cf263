"""Hooks hold in every mode and on every surface: the attack cases of the hook view.

A project with a shell MCP server (`mcp: [sh]`) and Claude Code hook scripts that know
nothing about fim. The model (scripted) tries to delete a directory, touch a secret, and
touch a file a hook rewrites — once through the legacy tool `sh__run_command`, once
through the progressive `mcp` meta-tool — from the CLI and from `fim serve`. Whatever the
route, the scripts see `mcp__sh__run_command` with `{"command": ...}` and decide alike.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from fim.cli import app
from fim.compile import compile_project
from fim.reload import SnapshotHolder
from fim.server.app import create_app
from fim.server.testing import ServerThread

HERE = Path(__file__).parent
HOOKS = HERE / "fixtures" / "claude_hooks"
SHELL_SERVER = HERE / "mcp_servers" / "shell.py"


def _call(mode: str, command: str, n: int) -> dict:
    if mode == "legacy":
        return {"id": f"c{n}", "name": "sh__run_command", "arguments": {"command": command}}
    return {
        "id": f"c{n}",
        "name": "mcp",
        "arguments": {
            "subcommand": "call",
            "server": "sh",
            "tool": "run_command",
            "parameters": {"command": command},
        },
    }


def make_project(root: Path, mode: str) -> Path:
    """The attack project: its agent's model tries three commands in one turn."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "victim").mkdir()
    (root / "victim" / "keep.txt").write_text("precious")
    (root / "secret.txt").write_text("s3cr3t")
    hooks = root / "hooks"
    shutil.copytree(HOOKS, hooks)
    calls = [
        _call(mode, f"rm -rf {root / 'victim'}", 1),
        _call(mode, f"rm {root / 'secret.txt'}", 2),
        _call(mode, f"touch {root / 'made'}", 3),
    ]
    script = [{"tool_calls": calls}, {"text": "done"}]
    (root / "attack.script.yaml").write_text(json.dumps(script))
    (root / "fim.yaml").write_text(
        json.dumps(
            {
                "name": "attack",
                "state": "sqlite:///.fim/state.db",
                "tool_modes": {"mcp": mode},
                "mcp_servers": {"sh": {"command": sys.executable, "args": [str(SHELL_SERVER)]}},
            }
        )
    )
    (root / "agents").mkdir()
    agent = {
        "description": "Runs shell commands",
        "model": "scripted:attack.script.yaml",
        "mcp": ["sh"],
        "hooks": [
            # Claude Code's own matcher words; each script is used as Claude Code runs it.
            {
                "event": "PreToolUse",
                "matcher": "Bash|mcp__.*",
                "command": "${CLAUDE_PROJECT_DIR}/hooks/bash_validator.py",
            },
            {
                "event": "PreToolUse",
                "matcher": "sh__run_command",
                "command": "hooks/deny_secrets.py",
            },
            {
                "event": "PreToolUse",
                "matcher": "mcp__sh__run_command",
                "command": "hooks/dry_run.py",
            },
        ],
    }
    (root / "agents" / "ops.yaml").write_text(json.dumps(agent))
    return root


def assert_guarded(root: Path, events: list[dict]) -> None:
    assert (root / "victim" / "keep.txt").read_text() == "precious"  # exit 2 held
    assert (root / "secret.txt").exists()  # permissionDecision: deny held
    assert (root / "made.dry-run").exists() and not (root / "made").exists()  # rewrite applied
    hooks = [e for e in events if e["type"] == "hook"]
    blocked = [e for e in hooks if e["decision"] == "block"]
    assert {e["tool_name"] for e in hooks} == {"sh__run_command"}
    assert len(blocked) == 2 and any("deletes recursively" in e["reason"] for e in blocked)
    assert any("secret files" in e["reason"] for e in blocked)
    assert any(e["decision"] == "modify" for e in hooks)


@pytest.mark.parametrize("mode", ["legacy", "progressive"])
def test_claude_code_scripts_guard_the_cli_in_every_mode(tmp_path: Path, mode: str) -> None:
    root = make_project(tmp_path / "p", mode)
    result = CliRunner().invoke(
        app, ["--project", str(root), "run", "ops", "clean up", "--json"], catch_exceptions=False
    )
    assert result.exit_code == 0, result.output
    events = [json.loads(line) for line in result.output.splitlines() if line.startswith("{")]
    assert_guarded(root, events)


@pytest.mark.parametrize("mode", ["legacy", "progressive"])
def test_claude_code_scripts_guard_fim_serve_in_every_mode(tmp_path: Path, mode: str) -> None:
    root = make_project(tmp_path / "p", mode)
    holder = SnapshotHolder(compile_project(root))
    with (
        ServerThread(create_app(holder)) as srv,
        httpx.stream(
            "POST",
            f"{srv.url}/v1/agents/ops/runs",
            json={"input": "clean up", "stream": True},
            timeout=60,
        ) as response,
    ):
        assert response.status_code == 200
        events = [
            json.loads(line[5:]) for line in response.iter_lines() if line.startswith("data:")
        ]
    assert_guarded(root, [e for e in events if isinstance(e, dict) and "type" in e])


def test_a_delegate_and_a_workflow_run_under_the_callers_hooks(tmp_path: Path) -> None:
    """The two routes around a guard: hand the command to another agent (that has the
    shell but no hooks), or to a workflow's mcp node. The caller's hooks hold on both."""
    root = make_project(tmp_path / "p", "legacy")
    victim = root / "victim"
    script = [
        {
            "tool_calls": [
                {"id": "d1", "name": "call_agent", "arguments": {"agent": "helper", "task": "x"}},
                {
                    "id": "w1",
                    "name": "run_workflow",
                    "arguments": {"name": "wipe", "inputs": {"cmd": f"rm -rf {victim}"}},
                },
            ]
        },
        {"text": "done"},
    ]
    (root / "boss.script.yaml").write_text(json.dumps(script))
    helper = [{"tool_calls": [_call("legacy", f"rm -fr {victim}", 9)]}, {"text": "ok"}]
    (root / "helper.script.yaml").write_text(json.dumps(helper))
    ops = json.loads((root / "agents" / "ops.yaml").read_text())
    boss = {
        "description": "Delegates",
        "model": "scripted:boss.script.yaml",
        "delegates": ["helper"],
        "workflows": ["wipe"],
        "hooks": ops["hooks"][:1],  # the exit-2 validator only
    }
    (root / "agents" / "boss.yaml").write_text(json.dumps(boss))
    helper_decl = {"description": "Has a shell", "model": "scripted:helper.script.yaml"}
    (root / "agents" / "helper.yaml").write_text(json.dumps({**helper_decl, "mcp": ["sh"]}))
    (root / "workflows").mkdir()
    wipe = {
        "description": "Runs one command",
        "inputs": {"cmd": {"type": "string"}},
        "nodes": {
            "run": {
                "type": "mcp",
                "server": "sh",
                "tool": "run_command",
                "args": {"command": "{{ inputs.cmd }}"},
            }
        },
    }
    (root / "workflows" / "wipe.yaml").write_text(json.dumps(wipe))
    result = CliRunner().invoke(
        app, ["--project", str(root), "run", "boss", "go", "--json"], catch_exceptions=False
    )
    assert result.exit_code == 0, result.output
    assert (victim / "keep.txt").read_text() == "precious"
    events = [json.loads(line) for line in result.output.splitlines() if line.startswith("{")]
    results = {e["name"]: e["content"] for e in events if e["type"] == "tool_result"}
    assert results["call_agent"] == "ok"  # the helper ran, and its rm -fr was blocked
    assert "blocked by a hook" in results["run_workflow"]
    assert "deletes recursively" in results["run_workflow"]
