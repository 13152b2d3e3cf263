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

from fim.build.compile import compile_project
from fim.build.reload import SnapshotHolder
from fim.cli import app
from fim.server.app import create_app
from fim.testing.server import ServerThread

HERE = Path(__file__).parents[1]
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


AMBIGUOUS = ["bom", "stringy", "denyword", "garbage"]


def guarded_project(root: Path, mode: str, extra_hooks: list[dict], calls: list[str]) -> Path:
    make_project(root, mode)
    turn = [{"tool_calls": [_call(mode, command, i) for i, command in enumerate(calls)]}]
    script = [*(turn if calls else []), {"text": "done"}]
    (root / "attack.script.yaml").write_text(json.dumps(script))
    agent = json.loads((root / "agents" / "ops.yaml").read_text())
    agent["hooks"] = extra_hooks
    (root / "agents" / "ops.yaml").write_text(json.dumps(agent))
    return root


def run_surface(root: Path, surface: str, agent: str = "ops", code: int = 0) -> list[dict]:
    if surface == "cli":
        result = CliRunner().invoke(
            app, ["--project", str(root), "run", agent, "go", "--json"], catch_exceptions=False
        )
        assert result.exit_code == code, result.output
        return [json.loads(line) for line in result.output.splitlines() if line.startswith("{")]
    holder = SnapshotHolder(compile_project(root))
    with ServerThread(create_app(holder)) as srv:
        reply = httpx.post(f"{srv.url}/v1/agents/{agent}/runs", json={"input": "go"}, timeout=60)
    assert reply.status_code == 200, reply.text
    return reply.json()["events"]


@pytest.mark.parametrize("surface", ["cli", "serve"])
@pytest.mark.parametrize("mode", ["legacy", "progressive"])
def test_ambiguous_hook_output_blocks_and_hooks_get_no_secrets(
    tmp_path: Path, mode: str, surface: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MODEL_KEY", "sk-model-secret")
    monkeypatch.setenv("FIM_API_KEY", "fim-server-secret")
    monkeypatch.setenv("DEPLOY_TOKEN", "declared-token")
    root = tmp_path / "p"
    hooks = [
        {"event": "PreToolUse", "matcher": "mcp__sh__.*", "command": "hooks/ambiguous.py"},
        {
            "event": "PreToolUse",
            "matcher": "Bash|sh__*",
            "command": "hooks/env_dump.py",
            "env": ["DEPLOY_TOKEN"],
        },
    ]
    calls = [f"touch {root}/{word}" for word in AMBIGUOUS] + [f"touch {root}/plain"]
    guarded_project(root, mode, hooks, calls)
    events = run_surface(root, surface)
    assert (root / "plain").exists()  # exit 0 with no output allows
    for word in AMBIGUOUS:
        assert not (root / word).exists(), word
    reasons = [e["reason"] for e in events if e["type"] == "hook" and e["decision"] == "block"]
    assert len(reasons) == len(AMBIGUOUS)
    assert all("hooks/ambiguous.py" in r and "fail closed" in r for r in reasons)
    env = json.loads((root / "hook-env.json").read_text())
    assert "MODEL_KEY" not in env and "FIM_API_KEY" not in env
    assert env["DEPLOY_TOKEN"] == "declared-token"
    assert env["CLAUDE_PROJECT_DIR"] == str(root) and "PATH" in env


@pytest.mark.parametrize("surface", ["cli", "serve"])
def test_a_session_start_context_loader_works_unchanged(tmp_path: Path, surface: str) -> None:
    root = tmp_path / "p"
    hooks = [
        {"event": "SessionStart", "command": '"$CLAUDE_PROJECT_DIR"/hooks/session_context.sh'},
        {"event": "PreToolUse", "matcher": "*", "command": "hooks/transcript_check.py"},
    ]
    guarded_project(root, "progressive", hooks, [f"touch {root}/x"])
    (root / "NOTES.md").write_text("deploys freeze on Fridays\n")
    (root / "hooks" / "transcript_check.py").write_text(
        "#!/usr/bin/env python3\nimport json, sys\n"
        "event = json.load(sys.stdin)\n"
        "lines = open(event['transcript_path']).read().splitlines()\n"
        "assert json.loads(lines[0])['message']['content'] == 'go', lines\n"
        "assert event['hook_event_name'] == 'PreToolUse' and event['session_id']\n"
    )
    (root / "hooks" / "transcript_check.py").chmod(0o755)
    events = run_surface(root, surface)
    context = [e for e in events if e["type"] == "hook" and e["point"] == "SessionStart"]
    assert context and context[0]["decision"] == "context"
    assert (root / "x").exists()  # the transcript check allowed: the JSONL file was right
    assert not [e for e in events if e["type"] == "hook" and e["decision"] == "block"]


def test_a_failing_session_start_hook_says_which_and_how_to_make_it_optional(
    tmp_path: Path,
) -> None:
    root = tmp_path / "p"
    failing = {"event": "SessionStart", "command": "exit 3"}
    guarded_project(root, "legacy", [failing], [])
    events = run_surface(root, "cli", code=1)
    [error] = [e for e in events if e["type"] == "error"]
    assert "SessionStart hook 'command: exit 3' failed" in error["message"]
    assert "optional: true" in error["message"]
    guarded_project(tmp_path / "q", "legacy", [{**failing, "optional": True}], [])
    events = run_surface(tmp_path / "q", "cli")
    assert next(e for e in events if e["type"] == "run_finished")["status"] == "ok"


@pytest.mark.parametrize("mode", ["legacy", "progressive"])
def test_an_approval_given_to_one_run_never_lets_another_run_through(
    tmp_path: Path, mode: str
) -> None:
    """Two clients make the very same call; a human approves the first. The second waits
    on its own approval (it does not ride on the first), and runs only if that is given."""
    import threading
    import time

    root = tmp_path / "p"
    confirm = {"use": "confirm", "matcher": "sh__*", "with": {"all": True, "poll": 0.02}}
    guarded_project(root, mode, [confirm], [f"touch {root}/made"])
    holder = SnapshotHolder(compile_project(root))
    replies: dict[str, dict] = {}

    def pending(url: str, count: int) -> list[dict]:
        for _ in range(1500):  # bounded: 30 s at most
            found = httpx.get(f"{url}/v1/approvals").json()["approvals"]
            if len(found) >= count:
                return found
            time.sleep(0.02)
        raise AssertionError(f"expected {count} pending approvals")

    def run(url: str, who: str) -> None:
        reply = httpx.post(f"{url}/v1/agents/ops/runs", json={"input": "go"}, timeout=60)
        replies[who] = reply.json()

    with ServerThread(create_app(holder)) as srv:
        a = threading.Thread(target=run, args=(srv.url, "a"))
        a.start()
        [first] = pending(srv.url, 1)
        b = threading.Thread(target=run, args=(srv.url, "b"))
        b.start()
        both = pending(srv.url, 2)
        second = next(x for x in both if x["id"] != first["id"])
        assert second["run_id"] != first["run_id"]
        decided = httpx.post(f"{srv.url}/v1/approvals/{first['id']}", json={"decision": "approve"})
        assert decided.status_code == 200, decided.text
        a.join(30)
        still = httpx.get(f"{srv.url}/v1/approvals").json()["approvals"]
        assert [x["id"] for x in still] == [second["id"]]  # B still waits on its own
        httpx.post(f"{srv.url}/v1/approvals/{second['id']}", json={"decision": "deny"})
        b.join(30)

    def tool_results(who: str) -> list[dict]:
        return [e for e in replies[who]["events"] if e["type"] == "tool_result"]

    assert [r["is_error"] for r in tool_results("a")] == [False]
    [denied] = tool_results("b")
    assert denied["is_error"] and "denied" in denied["content"]


def test_file_ops_is_read_write_and_edit_to_claude_code_scripts(tmp_path: Path) -> None:
    root = tmp_path / "p"
    make_project(root, "legacy")

    def write(path: str, n: int, op: str = "write") -> dict:
        arguments = {"operation": op, "path": path, "content": "X=1"}
        return {"id": f"f{n}", "name": "file_ops", "arguments": arguments}

    script = [
        {"tool_calls": [write(".env", 1), write("notes.txt", 2), write("app/.env", 3, "append")]},
        {"text": "done"},
    ]
    (root / "files.script.yaml").write_text(json.dumps(script))
    agent = {
        "description": "Writes files",
        "model": "scripted:files.script.yaml",
        "tools": ["file_ops"],
        "hooks": [
            {"event": "PreToolUse", "matcher": "Write|Edit", "command": "hooks/protect_env.py"},
            {"event": "PreToolUse", "matcher": "Read", "command": "exit 2"},  # never fires
        ],
    }
    (root / "agents" / "files.yaml").write_text(json.dumps(agent))
    events = run_surface(root, "cli", agent="files")
    results = {e["call_id"]: e for e in events if e["type"] == "tool_result"}
    said = results["f1"]["content"]  # the path as Claude Code gives it: absolute
    assert results["f1"]["is_error"] and "/.fim/sandbox/.env is not allowed" in said
    assert not results["f2"]["is_error"]
    assert results["f3"]["is_error"] and "app/.env" in results["f3"]["content"]


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")
def test_the_shell_tool_is_bash_to_claude_code_scripts(tmp_path: Path) -> None:
    """The builtin `shell`: the Bash validator blocks `rm -rf` (matcher `Bash`), and what a
    SessionStart hook exported through CLAUDE_ENV_FILE is in the command's environment."""
    root = tmp_path / "p"
    make_project(root, "legacy")
    calls = [
        {"id": "s1", "name": "shell", "arguments": {"command": "rm -rf /tmp/anything"}},
        {"id": "s2", "name": "shell", "arguments": {"command": "echo stage=$DEPLOY_STAGE"}},
    ]
    (root / "shell.script.yaml").write_text(json.dumps([{"tool_calls": calls}, {"text": "ok"}]))
    agent = {
        "description": "Has a shell",
        "model": "scripted:shell.script.yaml",
        "tools": ["shell"],
        "hooks": [
            {"event": "SessionStart", "command": "hooks/session_context.sh"},
            {"event": "PreToolUse", "matcher": "Bash", "command": "hooks/bash_validator.py"},
        ],
    }
    (root / "agents" / "sh.yaml").write_text(json.dumps(agent))
    events = run_surface(root, "cli", agent="sh")
    results = {e["call_id"]: e for e in events if e["type"] == "tool_result"}
    assert results["s1"]["is_error"] and "deletes recursively" in results["s1"]["content"]
    assert "stage=staging" in results["s2"]["content"]
