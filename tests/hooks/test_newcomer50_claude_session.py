"""A Claude Code hook sees one session across the turns of a fim session, and reads the
transcript in Claude Code's own shapes (newcomer-50 finding 3).

Claude Code sends one `session_id` for a whole conversation, `source: "resume"` when it
continues one, and a `transcript_path` whose lines are Anthropic messages: `tool_use`
blocks with Claude's tool names, tool results as `user` lines with `tool_result` blocks.
fim sent the run id (new at every turn), `startup` at every turn, and its own message dump.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fim.cli import app
from fim.hooks.command_input import event_payload, write_transcript
from fim.testing.hooks import make_context
from fim.types import HookContext, Message, ToolCall

LOG_STDIN = "cat >> {logs}/{name}.jsonl; echo >> {logs}/{name}.jsonl"
"""Appends the hook's stdin to a log outside the project (a file of the project the
command names is pinned as its script)."""


def session_project(root: Path) -> Path:
    """An agent whose (scripted) model runs a shell command and reads a file, with Claude
    Code hooks that log what they read on stdin."""
    root.mkdir(parents=True)
    (root / "fim.yaml").write_text(json.dumps({"name": "p", "state": "sqlite:///.fim/state.db"}))
    calls = [
        {"id": "c1", "name": "shell", "arguments": {"command": "echo hi"}},
        {"id": "c2", "name": "file_ops", "arguments": {"operation": "read", "path": "n.txt"}},
    ]
    script = [{"tool_calls": [calls[0]]}, {"tool_calls": [calls[1]]}, {"text": "done"}]
    (root / "a.script.yaml").write_text(json.dumps(script))
    (root / "agents").mkdir()
    agent = {
        "description": "Has a shell",
        "model": "scripted:a.script.yaml",
        "tools": ["shell", "file_ops"],
        "hooks": [
            {"event": "SessionStart", "command": LOG_STDIN.format(logs=root.parent, name="start")},
            {
                "event": "PreToolUse",
                "matcher": "",
                "command": LOG_STDIN.format(logs=root.parent, name="pre"),
            },
        ],
    }
    (root / "agents" / "a.yaml").write_text(json.dumps(agent))
    return root


def logged(root: Path, name: str) -> list[dict]:
    text = (root.parent / f"{name}.jsonl").read_text()
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def turn(root: Path, prompt: str) -> None:
    args = ["--project", str(root), "run", "a", prompt, "--session", "s1", "--json"]
    result = CliRunner().invoke(app, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output


def test_every_turn_of_a_session_has_the_sessions_id_and_a_later_turn_resumes(
    tmp_path: Path,
) -> None:
    root = session_project(tmp_path / "p")
    turn(root, "first")
    turn(root, "second")
    starts, pres = logged(root, "start"), logged(root, "pre")
    assert [s["source"] for s in starts] == ["startup", "resume"]
    assert {e["session_id"] for e in starts + pres} == {"s1"}  # one id, every turn and event
    run_ids = [s["fim"]["run_id"] for s in starts]
    assert len(set(run_ids)) == 2 and "s1" not in run_ids  # the run id is fim's own field
    assert {p["fim"]["run_id"] for p in pres} == set(run_ids)


def test_a_run_without_a_session_is_its_own_session() -> None:
    context = HookContext(point="SessionStart", agent="a", run_id="r1")
    data = event_payload(context, "/p", None)
    assert data["session_id"] == "r1" and data["source"] == "startup"
    assert data["fim"]["run_id"] == "r1"


def test_the_transcript_holds_claude_codes_lines(tmp_path: Path) -> None:
    """What the hook before the second call reads: the prompt, the answers' `tool_use`
    blocks named as Claude Code names them (a `file_ops` read is `Read` with an absolute
    `file_path`), the first call's result a `user` line with a `tool_result` block."""
    root = session_project(tmp_path / "p")
    turn(root, "first")
    path = Path(logged(root, "pre")[-1]["transcript_path"])
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert lines[0] == {
        "type": "user",
        "message": {"role": "user", "content": "first"},
        "sessionId": "s1",
    }
    uses = [
        block
        for line in lines
        if line["type"] == "assistant"
        for block in line["message"]["content"]
        if block["type"] == "tool_use"
    ]
    sandbox = (root / ".fim" / "sandbox").resolve()
    assert uses == [
        {"type": "tool_use", "id": "c1", "name": "Bash", "input": {"command": "echo hi"}},
        {
            "type": "tool_use",
            "id": "c2",
            "name": "Read",
            "input": {"file_path": f"{sandbox}/n.txt"},
        },
    ]
    results = [
        block
        for line in lines
        if line["type"] == "user" and isinstance(line["message"]["content"], list)
        for block in line["message"]["content"]
    ]
    assert [(r["type"], r["tool_use_id"]) for r in results] == [("tool_result", "c1")]
    assert "hi" in results[0]["content"]
    assert [line["type"] for line in lines] == ["user", "assistant", "user", "assistant"]
    assert {line["sessionId"] for line in lines} == {"s1"}


def test_a_continued_sessions_answers_are_text_blocks(tmp_path: Path) -> None:
    root = session_project(tmp_path / "p")
    turn(root, "first")
    turn(root, "second")
    path = Path(logged(root, "start")[1]["transcript_path"])
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert [line["message"]["content"] for line in lines[:3]] == [  # then this turn's calls
        "first",
        [{"type": "text", "text": "done"}],
        "second",
    ]


@pytest.mark.skipif(shutil.which("jq") is None, reason="jq is not installed")
def test_the_usual_jq_query_finds_the_tool_calls(tmp_path: Path) -> None:
    run = make_context(tmp_path, project={"mcp_servers": {"gh": {"command": "gh-mcp"}}})
    run.transcript[:] = [
        Message(role="user", content="go"),
        Message(
            role="assistant",
            content="Looking.",
            tool_calls=[
                ToolCall(id="t1", name="shell", arguments={"command": "ls"}),
                ToolCall(id="t2", name="gh__list_issues", arguments={"repo": "x"}),
            ],
        ),
        Message(role="tool", content="a.txt", tool_call_id="t1"),
    ]
    context = HookContext(point="PreToolUse", agent="tester", run_id="r1")
    path = write_transcript(run, context)
    assert path is not None
    query = '.message.content[]? | select(.type == "tool_use") | .name'
    found = subprocess.run(["jq", "-r", query, path], capture_output=True, text=True, check=True)
    assert found.stdout.split() == ["Bash", "mcp__gh__list_issues"]


def test_a_session_start_hooks_matcher_is_matched_against_its_source(tmp_path: Path) -> None:
    """Claude Code matches a SessionStart hook's matcher against `source`: a hook meant for
    a new conversation (`startup`) does not run again on every later turn."""
    root = session_project(tmp_path / "p")
    agent = json.loads((root / "agents" / "a.yaml").read_text())
    agent["hooks"] += [
        {
            "event": "SessionStart",
            "matcher": source,
            "command": LOG_STDIN.format(logs=root.parent, name=source),
        }
        for source in ("startup", "resume")
    ]
    (root / "agents" / "a.yaml").write_text(json.dumps(agent))
    turn(root, "first")
    turn(root, "second")
    turn(root, "third")
    assert [s["source"] for s in logged(root, "start")] == ["startup", "resume", "resume"]
    assert [s["source"] for s in logged(root, "startup")] == ["startup"]
    assert [s["source"] for s in logged(root, "resume")] == ["resume", "resume"]
