"""The transcript a command hook reads shows the calls hooks judge, whatever route they took
and whichever run made them (attack-59 F3 and F6).

A Claude Code guard that decides from `transcript_path` ("one deploy per conversation":
block `mcp__sh__run_command` when another `tool_use` block of that name is in the file)
reached different verdicts for the same calls: a progressive `mcp` meta-tool call was
written as `mcp` with the wrapper's input, so it hid from the guard, and a delegate's hook
read the caller's conversation alone, without the delegate's own calls. Now a call is
written as the target hooks see (the view recorded when the model made it), and a
delegate's file is the caller's conversation followed by the delegate's own lines, marked
as Claude Code marks a subagent's (`isSidechain`, `agentId`).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from fim.cli import app
from fim.hooks.command_input import write_transcript
from fim.testing.hooks import make_context
from fim.types import HookContext, Message, ToolCall

SHELL_SERVER = Path(__file__).parents[1] / "mcp_servers" / "shell.py"

GUARD = """\
import json, sys
event = json.load(sys.stdin)
with open({log!r}, "a") as log:
    seen = {{k: event.get(k) for k in ("tool_name", "tool_input", "transcript_path")}}
    log.write(json.dumps({{**seen, "run_id": event["fim"]["run_id"]}}) + "\\n")
if event["tool_name"] != "mcp__sh__run_command":
    sys.exit(0)
seen = 0
for line in open(event["transcript_path"], encoding="utf-8"):
    content = json.loads(line).get("message", {{}}).get("content")
    for block in content if isinstance(content, list) else []:
        if (
            block.get("type") == "tool_use"
            and block.get("name") == "mcp__sh__run_command"
            and block.get("id") != event.get("tool_use_id")
        ):
            seen += 1
if seen:
    print(f"already ran {{seen}}x in this conversation", file=sys.stderr)
    sys.exit(2)
"""
"""Claude Code's documented way to read the transcript, as a once-per-conversation guard."""


def _run(mode: str, root: Path, note: str) -> dict[str, Any]:
    """A call of the shell MCP tool that appends `note` to `ran.txt` when it really runs."""
    command = {"command": f"echo {note} >> {root / 'ran.txt'}"}
    if mode == "legacy":
        return {"id": note, "name": "sh__run_command", "arguments": command}
    call = {"subcommand": "call", "server": "sh", "tool": "run_command", "parameters": command}
    return {"id": note, "name": "mcp", "arguments": call}


DELEGATE = {"id": "d", "name": "call_agent", "arguments": {"agent": "helper", "task": "run it"}}

SCENARIOS: dict[str, tuple[list[list[str]], list[list[str]], list[str]]] = {
    # (the boss's turns, the helper's turns, what really ran); "delegate" is a call_agent
    "twice": ([["A"], ["B"]], [], ["A"]),
    "two in one turn": ([["A", "B"], ["C"]], [], []),
    "caller then delegate": ([["A"], ["delegate"]], [["H1"], ["H2"]], ["A"]),
    "delegate alone": ([["delegate"]], [["H1"], ["H2"]], ["H1"]),
}


def make_project(root: Path, mode: str, scenario: str) -> Path:
    boss_turns, helper_turns, _ = SCENARIOS[scenario]
    root.mkdir(parents=True)
    (root / "hooks").mkdir()
    (root / "hooks" / "guard.py").write_text(GUARD.format(log=str(root / "hook.jsonl")))

    def script(turns: list[list[str]]) -> str:
        steps: list[dict[str, Any]] = [
            {"tool_calls": [DELEGATE if n == "delegate" else _run(mode, root, n) for n in turn]}
            for turn in turns
        ]
        return json.dumps([*steps, {"text": "done"}])

    (root / "boss.script.yaml").write_text(script(boss_turns))
    (root / "helper.script.yaml").write_text(script(helper_turns))
    project = {
        "name": "tr",
        "state": "sqlite:///.fim/state.db",
        "tool_modes": {"mcp": mode},
        "mcp_servers": {"sh": {"command": sys.executable, "args": [str(SHELL_SERVER)]}},
    }
    (root / "fim.yaml").write_text(json.dumps(project))
    (root / "agents").mkdir()
    hook = {"event": "PreToolUse", "matcher": "", "command": "python3 hooks/guard.py"}
    boss = {
        "description": "Guarded by the transcript",
        "model": "scripted:boss.script.yaml",
        "mcp": ["sh"],
        "delegates": ["helper"],
        "hooks": [hook],
    }
    helper = {"description": "Runs the tool", "model": "scripted:helper.script.yaml", "mcp": ["sh"]}
    (root / "agents" / "boss.yaml").write_text(json.dumps(boss))
    (root / "agents" / "helper.yaml").write_text(json.dumps(helper))
    return root


def run_boss(root: Path) -> list[dict[str, Any]]:
    args = ["--project", str(root), "run", "boss", "go", "--json"]
    result = CliRunner().invoke(app, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return [json.loads(line) for line in (root / "hook.jsonl").read_text().splitlines()]


def ran(root: Path) -> list[str]:
    path = root / "ran.txt"
    return path.read_text().split() if path.exists() else []


@pytest.mark.parametrize("mode", ["legacy", "progressive"])
@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_a_transcript_guard_decides_alike_in_every_mode_and_in_a_delegate(
    tmp_path: Path, mode: str, scenario: str
) -> None:
    root = make_project(tmp_path / "p", mode, scenario)
    run_boss(root)
    assert ran(root) == SCENARIOS[scenario][2]


def _lines(path: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in Path(path).read_text().splitlines()]


def _uses(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        {**block, "sidechain": line.get("isSidechain", False)}
        for line in lines
        if line["type"] == "assistant"
        for block in line["message"]["content"]
        if block["type"] == "tool_use"
    ]


def test_a_meta_tool_call_is_written_as_its_target_with_its_own_arguments(
    tmp_path: Path,
) -> None:
    """What the hook reads on stdin and what the transcript says of the same call agree."""
    root = make_project(tmp_path / "p", "progressive", "twice")
    calls = run_boss(root)
    second = [c for c in calls if c["tool_name"] == "mcp__sh__run_command"][-1]
    uses = _uses(_lines(second["transcript_path"]))
    assert [(u["id"], u["name"]) for u in uses] == [
        ("A", "mcp__sh__run_command"),
        ("B", "mcp__sh__run_command"),
    ]
    assert uses[1]["input"] == second["tool_input"] == {"command": f"echo B >> {root}/ran.txt"}


def test_a_delegates_hook_reads_the_callers_conversation_then_the_delegates_own(
    tmp_path: Path,
) -> None:
    """Claude Code's shape: the caller's lines, then the subagent's marked `isSidechain`
    with its `agentId`; the file is the delegate run's, whoever's hook wrote it."""
    root = make_project(tmp_path / "p", "progressive", "caller then delegate")
    calls = run_boss(root)
    boss_run = calls[0]["run_id"]
    h2 = [c for c in calls if c["tool_name"] == "mcp__sh__run_command"][-1]
    assert h2["run_id"] != boss_run
    assert Path(h2["transcript_path"]).name == f"{h2['run_id']}.jsonl"
    lines = _lines(h2["transcript_path"])
    assert [(u["id"], u["name"], u["sidechain"]) for u in _uses(lines)] == [
        ("A", "mcp__sh__run_command", False),
        ("d", "call_agent", False),
        ("H1", "mcp__sh__run_command", True),
        ("H2", "mcp__sh__run_command", True),
    ]
    own = [line for line in lines if line.get("isSidechain")]
    assert own[0]["message"]["content"] == "run it"  # the delegate's task starts its lines
    assert {line["agentId"] for line in own} == {h2["run_id"]}
    assert {line["sessionId"] for line in lines} == {boss_run}


def test_each_record_is_one_line_for_splitlines_readers(tmp_path: Path) -> None:
    """U+2028, U+2029, U+0085 and the C0 separators are escaped: a reader splitting with
    `str.splitlines()` gets one record a line, with its text intact (attack-59 F6)."""
    run = make_context(tmp_path)
    tricky = "a\u2028b\u2029c\x85d\x0be\x0cf\x1cg\x1dh\x1ei"
    run.transcript[:] = [
        Message(role="user", content=tricky),
        Message(
            role="assistant",
            tool_calls=[ToolCall(id="t1", name="shell", arguments={"command": tricky})],
        ),
    ]
    path = write_transcript(run, HookContext(point="PreToolUse", agent="a", run_id="r1"))
    assert path is not None
    text = Path(path).read_text(encoding="utf-8")
    records = [json.loads(line) for line in text.splitlines()]
    assert len(records) == 2
    assert records[0]["message"]["content"] == tricky
    assert records[1]["message"]["content"][0]["input"] == {"command": tricky}
