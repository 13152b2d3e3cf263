"""A command hook's `session_id` is the conversation's, decided once for everything one
request starts (attack-59 F1).

Claude Code gives a subagent's tool calls the main conversation's `session_id`, and hook
scripts keep per-session state under it ("allow this once per session"). fim gave every
delegate (`call_agent`), every workflow an agent started (`run_workflow`) and every
workflow node a `session_id` of its own when the request had no session, so such a
guard started counting again in each of them: a tool allowed once ran three times.

The project: agent `boss` has the guard (a Claude Code script allowing
`mcp__sh__run_command` once per `session_id`, logging every call it sees). Its model
runs the tool itself, delegates to `helper` (which runs it), then starts workflow `wf`,
whose `agent` node runs `helper` again and whose `mcp` node runs the tool. Whatever the
surface and the tool mode, every hook call sees one id -- the session's, or the id of
the run the request started -- and the tool runs once.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient
from typer.testing import CliRunner

from fim.build.compile import compile_project
from fim.build.reload import SnapshotHolder
from fim.cli import app
from fim.server.app import create_app

SHELL_SERVER = Path(__file__).parents[1] / "mcp_servers" / "shell.py"

GUARD = """\
import json, os, sys
event = json.load(sys.stdin)
with open({log!r}, "a") as log:
    seen = {{k: event.get(k) for k in ("session_id", "tool_name", "transcript_path")}}
    log.write(json.dumps({{**seen, "run_id": event["fim"]["run_id"]}}) + "\\n")
if event["tool_name"] != "mcp__sh__run_command":
    sys.exit(0)
state = os.path.join({state!r}, event["session_id"])
if os.path.exists(state):
    print("run_command already ran in this session", file=sys.stderr)
    sys.exit(2)
open(state, "w").close()
"""
"""A Claude Code hook allowing `mcp__sh__run_command` once per `session_id`."""


def _run(mode: str, root: Path, note: str, n: int) -> dict[str, Any]:
    """A call of the shell MCP tool that appends `note` to `ran.txt` when it really runs."""
    command = {"command": f"echo {note} >> {root / 'ran.txt'}"}
    if mode == "legacy":
        return {"id": f"r{n}", "name": "sh__run_command", "arguments": command}
    call = {"subcommand": "call", "server": "sh", "tool": "run_command", "parameters": command}
    return {"id": f"r{n}", "name": "mcp", "arguments": call}


def make_project(root: Path, mode: str) -> Path:
    root.mkdir(parents=True)
    (root / "state").mkdir()
    (root / "hooks").mkdir()
    guard = GUARD.format(log=str(root / "hook.jsonl"), state=str(root / "state"))
    (root / "hooks" / "once.py").write_text(guard)
    boss = [
        {"tool_calls": [_run(mode, root, "direct", 1)]},
        {"tool_calls": [{"id": "d", "name": "call_agent", "arguments": {"agent": "helper",
                                                                         "task": "run it"}}]},
        {"tool_calls": [{"id": "w", "name": "run_workflow", "arguments": {"name": "wf"}}]},
        {"text": "done"},
    ]  # fmt: skip
    helper = [{"tool_calls": [_run(mode, root, "helper", 2)]}, {"text": "helped"}]
    (root / "boss.script.yaml").write_text(json.dumps(boss))
    (root / "helper.script.yaml").write_text(json.dumps(helper))
    project = {
        "name": "conv",
        "state": "sqlite:///.fim/state.db",
        "tool_modes": {"mcp": mode},
        "mcp_servers": {"sh": {"command": sys.executable, "args": [str(SHELL_SERVER)]}},
    }
    (root / "fim.yaml").write_text(json.dumps(project))
    (root / "agents").mkdir()
    agents = {
        "boss": {
            "description": "Guarded; delegates and starts a workflow",
            "model": "scripted:boss.script.yaml",
            "mcp": ["sh"],
            "delegates": ["helper"],
            "workflows": ["wf"],
            "hooks": [{"event": "PreToolUse", "matcher": "", "command": "python3 hooks/once.py"}],
        },
        "helper": {
            "description": "Runs the tool",
            "model": "scripted:helper.script.yaml",
            "mcp": ["sh"],
        },
    }
    for name, agent in agents.items():
        (root / "agents" / f"{name}.yaml").write_text(json.dumps(agent))
    (root / "workflows").mkdir()
    node_command = {"command": f"echo node >> {root / 'ran.txt'}"}
    workflow = {
        "description": "an agent node, then an mcp node",
        "nodes": {
            "a": {"type": "agent", "agent": "helper", "input": "run it"},
            "m": {
                "type": "mcp",
                "server": "sh",
                "tool": "run_command",
                "args": node_command,
                "needs": ["a"],
            },
        },
    }
    (root / "workflows" / "wf.yaml").write_text(json.dumps(workflow))
    return root


def hook_calls(root: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (root / "hook.jsonl").read_text().splitlines()]


def assert_one_conversation(root: Path, session: str | None = None) -> None:
    """The tool ran once; the guard judged it four times (the boss's own call, its
    delegate's, the workflow's agent node's and its mcp node's), made from four runs,
    and every hook call saw the one id: the session's, else the first run's."""
    assert (root / "ran.txt").read_text().split() == ["direct"]
    calls = hook_calls(root)
    guarded = [c for c in calls if c["tool_name"] == "mcp__sh__run_command"]
    assert len(guarded) == 4
    assert len({c["run_id"] for c in guarded}) == 4  # boss, helper, workflow, agent node
    first_run = calls[0]["run_id"]
    assert {c["session_id"] for c in calls} == {session or first_run}
    assert [p.name for p in (root / "state").iterdir()] == [session or first_run]


@pytest.mark.parametrize("mode", ["legacy", "progressive"])
@pytest.mark.parametrize("session", [None, "s1"])
def test_fim_run_gives_every_hook_call_of_the_tree_one_session(
    tmp_path: Path, mode: str, session: str | None
) -> None:
    root = make_project(tmp_path / "p", mode)
    args = ["--project", str(root), "run", "boss", "go", "--json"]
    result = CliRunner().invoke(
        app, args + (["--session", session] if session else []), catch_exceptions=False
    )
    assert result.exit_code == 0, result.output
    assert_one_conversation(root, session)


def _agent_runs(client: TestClient) -> None:
    answer = client.post("/v1/agents/boss/runs", json={"input": "go"})
    assert answer.status_code == 200, answer.text


def _chat(client: TestClient) -> None:
    body = {"model": "boss", "messages": [{"role": "user", "content": "go"}]}
    answer = client.post("/v1/chat/completions", json=body)
    assert answer.status_code == 200, answer.text


def _a2a(client: TestClient) -> None:
    message = {
        "role": "user",
        "parts": [{"kind": "text", "text": "go"}],
        "messageId": "m1",
        "kind": "message",
    }
    body = {"jsonrpc": "2.0", "id": 1, "method": "message/send", "params": {"message": message}}
    answer = client.post("/a2a/boss", json=body)
    assert answer.status_code == 200, answer.text
    assert answer.json()["result"]["status"]["state"] == "completed", answer.text


def _mcp(client: TestClient) -> None:
    headers = {"Accept": "application/json, text/event-stream"}
    hello = {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "t", "version": "1"},
    }
    opened = client.post(
        "/mcp",
        json={"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": hello},
        headers=headers,
    )
    assert opened.status_code == 200, opened.text
    if "mcp-session-id" in opened.headers:
        headers["Mcp-Session-Id"] = opened.headers["mcp-session-id"]
    headers["MCP-Protocol-Version"] = "2025-06-18"
    ready = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    assert client.post("/mcp", json=ready, headers=headers).status_code == 202
    call = {"name": "boss", "arguments": {"input": "go"}}
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": call}
    answer = client.post("/mcp", json=body, headers=headers)
    assert answer.status_code == 200, answer.text
    assert '"isError":false' in answer.text.replace(" ", ""), answer.text


SURFACES = {"agent_runs": _agent_runs, "chat": _chat, "a2a": _a2a, "mcp": _mcp}


@pytest.mark.parametrize("mode", ["legacy", "progressive"])
@pytest.mark.parametrize("surface", sorted(SURFACES))
def test_every_http_surface_gives_every_hook_call_of_the_tree_one_session(
    tmp_path: Path, mode: str, surface: str
) -> None:
    """Without a `session_id` (A2A always has one: its `contextId`), the id is the run's
    the request started; with one, the session's: one id either way."""
    pytest.importorskip("a2a") if surface == "a2a" else None
    root = make_project(tmp_path / "p", mode)
    with TestClient(create_app(SnapshotHolder(compile_project(root))), "http://localhost") as c:
        SURFACES[surface](c)
    calls = hook_calls(root)
    assert (root / "ran.txt").read_text().split() == ["direct"]
    assert len([c for c in calls if c["tool_name"] == "mcp__sh__run_command"]) == 4
    assert len({c["session_id"] for c in calls}) == 1
    if surface != "a2a":
        assert calls[0]["session_id"] == calls[0]["run_id"]  # the boss's run: no session
