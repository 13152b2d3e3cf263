"""Command hooks speak the Claude Code hook protocol: a script written for Claude Code works
unchanged. Each test runs a real shell command (bash + jq, or python3) as a subprocess.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from fim.hooks import build_hooks
from fim.store import Store
from fim.testing.hooks import call_tool, make_context
from fim.tools.base import FunctionTool
from fim.types import HookContext

PY = sys.executable


def script(root: Path, name: str, body: str) -> str:
    """Write an executable hook script into hooks/ and return its command line."""
    path = root / "hooks" / name
    path.parent.mkdir(exist_ok=True)
    path.write_text(textwrap.dedent(body).lstrip())
    path.chmod(0o755)
    return f"./hooks/{name}"


def shell_tool(root: Path) -> FunctionTool:
    """A real shell tool, as a coding agent would have: runs `command` in the project."""

    async def run(command: str) -> str:
        done = subprocess.run(command, shell=True, cwd=root, capture_output=True, text=True)
        return done.stdout + done.stderr

    schema = {"type": "object", "properties": {"command": {"type": "string"}}}
    return FunctionTool("Bash", "Run a shell command", schema, run)


def python_exec_tool() -> tuple[FunctionTool, list[str]]:
    ran: list[str] = []

    async def run(code: str) -> str:
        ran.append(code)
        return "ok"

    schema = {"type": "object", "properties": {"code": {"type": "string"}}}
    return FunctionTool("python_exec", "Run Python", schema, run), ran


def echo_tool(name: str = "echo") -> tuple[FunctionTool, list[dict]]:
    ran: list[dict] = []

    async def run(**args: Any) -> str:
        ran.append(args)
        return json.dumps({"echo": args})

    return FunctionTool(name, "Echo", {"type": "object"}, run), ran


# The guard as it would sit in .claude/hooks/ of a Claude Code project, verbatim.
BLOCK_RM_RF_JQ = """
#!/usr/bin/env bash
# PreToolUse guard: refuse recursive force deletes, whatever tool carries them.
input=$(cat)
cmd=$(printf '%s' "$input" | jq -r '.tool_input.command // .tool_input.code // empty')
flags='-[a-zA-Z]*(r[a-zA-Z]*f|f[a-zA-Z]*r)'
if printf '%s' "$cmd" | grep -Eq "rm[[:space:]]+$flags"; then
  echo "Blocked: 'rm -rf' is not allowed in this project. Delete specific files instead." >&2
  exit 2
fi
exit 0
"""


@pytest.mark.skipif(shutil.which("jq") is None, reason="jq is not installed")
async def test_a_claude_code_bash_jq_guard_blocks_rm_rf_before_it_runs(tmp_path: Path) -> None:
    command = script(tmp_path, "block_rm_rf.sh", BLOCK_RM_RF_JQ)
    ctx = make_context(tmp_path, [{"event": "PreToolUse", "matcher": "Bash", "command": command}])
    victim = tmp_path / "data"
    victim.mkdir()
    (victim / "precious.txt").write_text("keep me")
    runner = build_hooks(ctx)

    outcome = await call_tool(runner, shell_tool(tmp_path), {"command": "rm -rf data"})
    assert outcome.blocked and not outcome.ran
    assert "'rm -rf' is not allowed" in outcome.observation
    assert (victim / "precious.txt").read_text() == "keep me"

    allowed = await call_tool(runner, shell_tool(tmp_path), {"command": "ls data"})
    assert not allowed.blocked and allowed.observation.strip() == "precious.txt"


async def test_a_python3_guard_denies_rm_rf_in_python_exec_code(tmp_path: Path) -> None:
    command = script(
        tmp_path,
        "guard.py",
        f"""
        #!{PY}
        import json, re, sys
        event = json.load(sys.stdin)
        code = event["tool_input"].get("code", "")
        if re.search(r"rm\\s+-rf|shutil\\.rmtree", code):
            print(json.dumps({{"hookSpecificOutput": {{
                "hookEventName": "PreToolUse",
                "permissionDecision": "deny",
                "permissionDecisionReason": "recursive deletes are not allowed",
            }}}}))
        """,
    )
    ctx = make_context(
        tmp_path, [{"event": "PreToolUse", "matcher": "python_exec", "command": command}]
    )
    tool, ran = python_exec_tool()
    runner = build_hooks(ctx)
    denied = await call_tool(runner, tool, {"code": "import os; os.system('rm -rf /tmp/x')"})
    assert denied.blocked and "recursive deletes are not allowed" in denied.observation
    assert (await call_tool(runner, tool, {"code": "print(1 + 1)"})).observation == "ok"
    assert ran == ["print(1 + 1)"]


async def test_the_event_arrives_as_claude_code_json_with_the_project_env(tmp_path: Path) -> None:
    command = script(
        tmp_path,
        "dump.sh",
        """
        #!/usr/bin/env bash
        cat > "$CLAUDE_PROJECT_DIR/event-$(date +%s%N).json"
        echo "$FIM_PROJECT_DIR" > "$CLAUDE_PROJECT_DIR/env.txt"
        """,
    )
    ctx = make_context(
        tmp_path,
        [
            {"event": "PreToolUse", "command": command},
            {"event": "PostToolUse", "command": command},
        ],
    )
    tool, _ = echo_tool("crm__get_contact")
    await call_tool(build_hooks(ctx), tool, {"id": "42"}, metadata={"access": "read"})
    pre, post = (json.loads(p.read_text()) for p in sorted(tmp_path.glob("event-*.json")))
    assert pre["hook_event_name"] == "PreToolUse" and post["hook_event_name"] == "PostToolUse"
    assert pre["tool_name"] == "crm__get_contact" and pre["tool_input"] == {"id": "42"}
    assert pre["session_id"] == "run-1" and pre["cwd"] == str(tmp_path)
    assert pre["permission_mode"] == "default" and "tool_response" not in pre
    assert post["tool_response"] == {"echo": {"id": "42"}}  # JSON observations arrive parsed
    assert pre["fim"]["agent"] == "tester" and pre["fim"]["metadata"]["access"] == "read"
    assert (tmp_path / "env.txt").read_text().strip() == str(tmp_path)


@pytest.mark.parametrize(
    ("stdout", "blocked", "reason"),
    [
        ({"decision": "block", "reason": "not on weekends"}, True, "not on weekends"),
        ({"decision": "approve"}, False, None),
        ({"hookSpecificOutput": {"permissionDecision": "allow"}}, False, None),
        ({"continue": False, "stopReason": "maintenance window"}, True, "maintenance window"),
        ({"hookSpecificOutput": {"permissionDecision": "maybe"}}, True, "'allow', 'deny' or"),
        ({"hookSpecificOutput": {"updatedInput": "text"}}, True, "not the documented shape"),
        ({"continue": "false"}, True, "continue: Input should be a valid boolean"),
        ({"decision": "deny"}, True, "decision: Input should be 'approve' or 'block'"),
        ({"decison": "block"}, True, "decison: Extra inputs are not permitted"),
        ({"systemMessage": "fyi"}, False, None),
    ],
)
async def test_json_answers_decide_the_call(
    tmp_path: Path, stdout: dict, blocked: bool, reason: str | None
) -> None:
    (tmp_path / "answer.json").write_text(json.dumps(stdout))
    ctx = make_context(tmp_path, [{"event": "PreToolUse", "command": "cat answer.json"}])
    tool, ran = echo_tool()
    outcome = await call_tool(build_hooks(ctx), tool, {"x": 1})
    assert outcome.blocked is blocked and bool(ran) is not blocked
    if reason:
        assert reason in outcome.observation


async def test_updated_input_rewrites_the_arguments(tmp_path: Path) -> None:
    command = script(
        tmp_path,
        "limit.sh",
        """
        #!/usr/bin/env bash
        jq -c '{hookSpecificOutput: {hookEventName: "PreToolUse", permissionDecision: "allow",
                updatedInput: (.tool_input + {limit: 10})}}'
        """,
    )
    ctx = make_context(tmp_path, [{"event": "PreToolUse", "command": command}])
    tool, ran = echo_tool()
    outcome = await call_tool(build_hooks(ctx), tool, {"q": "shoes", "limit": 5000})
    assert ran == [{"q": "shoes", "limit": 10}]
    assert outcome.events[0].decision == "modify"


async def test_post_tool_use_can_replace_or_annotate_the_observation(tmp_path: Path) -> None:
    (tmp_path / "replace.json").write_text(
        json.dumps({"hookSpecificOutput": {"updatedMCPToolOutput": {"redacted": True}}})
    )
    (tmp_path / "note.json").write_text(
        json.dumps({"hookSpecificOutput": {"additionalContext": "Figures are in EUR."}})
    )
    ctx = make_context(
        tmp_path,
        [
            {"event": "PostToolUse", "command": "cat replace.json", "priority": 1},
            {"event": "PostToolUse", "command": "cat note.json", "priority": 2},
        ],
    )
    tool, _ = echo_tool()
    outcome = await call_tool(build_hooks(ctx), tool, {"x": 1})
    assert outcome.observation == '{"redacted": true}\n\nFigures are in EUR.'


@pytest.mark.parametrize(
    ("command", "reason"),
    [
        ("echo 'policy server unreachable' >&2; exit 1", "exit code 1: policy server unreachable"),
        ("echo '{\"decision\": '", "printed invalid JSON"),
        ("echo '[1, 2]'", "JSON that is not an object"),
        ("exit 2", "exited with code 2 without a reason"),
        ("./hooks/does-not-exist.sh", "exit code 127"),
    ],
)
async def test_a_failing_command_blocks_and_says_why(
    tmp_path: Path, command: str, reason: str
) -> None:
    ctx = make_context(tmp_path, [{"event": "PreToolUse", "command": command}])
    tool, ran = echo_tool()
    outcome = await call_tool(build_hooks(ctx), tool, {})
    assert ran == [] and outcome.blocked
    assert reason in outcome.observation and reason in (outcome.events[0].reason or "")


async def test_a_command_that_times_out_is_killed_with_its_children(tmp_path: Path) -> None:
    command = script(
        tmp_path,
        "slow.sh",
        """
        #!/usr/bin/env bash
        sleep 30 &
        echo $! > "$FIM_PROJECT_DIR/child.pid"
        wait
        """,
    )
    ctx = make_context(tmp_path, [{"event": "PreToolUse", "command": command, "timeout": 0.5}])
    tool, ran = echo_tool()
    outcome = await call_tool(build_hooks(ctx), tool, {})
    assert ran == [] and outcome.blocked and "timed out after 0.5s" in outcome.observation
    child = int((tmp_path / "child.pid").read_text())
    for _ in range(50):  # the kill is delivered at once; reaping by init may take a moment
        if not _alive(child):
            break
        await asyncio.sleep(0.02)
    assert not _alive(child)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    status = Path(f"/proc/{pid}/status")
    return not (status.exists() and "zombie" in status.read_text())


async def test_plain_stdout_at_session_start_becomes_context(tmp_path: Path) -> None:
    ctx = make_context(
        tmp_path, [{"event": "SessionStart", "command": "echo Branch: main; echo Tests: green"}]
    )
    result, events = await build_hooks(ctx).run(
        "SessionStart", HookContext(point="SessionStart", agent="tester", run_id="r")
    )
    assert result.additional_context == "Branch: main\nTests: green"
    assert events[0].hook == "command: echo Branch: main; echo Tests: green"


async def test_ask_waits_for_a_human_through_the_state_store(tmp_path: Path) -> None:
    (tmp_path / "ask.json").write_text(
        json.dumps(
            {
                "hookSpecificOutput": {
                    "permissionDecision": "ask",
                    "permissionDecisionReason": "refunds need a human",
                }
            }
        )
    )
    ctx = make_context(
        tmp_path, [{"event": "PreToolUse", "command": "cat ask.json", "with": {"ask_timeout": 20}}]
    )
    store = Store(ctx.services.state_url, root=tmp_path)

    async def human() -> None:
        while not (pending := await store.list_approvals()):
            await asyncio.sleep(0.02)
        assert pending[0].reason == "refunds need a human"
        await store.resolve_approval(pending[0].id, True, by="test")

    tool, ran = echo_tool("shop__refund")
    outcome, _ = await asyncio.gather(call_tool(build_hooks(ctx), tool, {"order": 7}), human())
    store.close()
    await ctx.services.aclose()
    assert not outcome.blocked and ran == [{"order": 7}]


def test_the_transcript_is_appended_to_not_rewritten_at_every_hook_call(tmp_path: Path) -> None:
    """Each hook call wrote the whole conversation again (masking every message) on the
    event loop: a long run with a hook on each tool call cost time quadratic in its length.
    Now a call writes what was added since the last one; the file is the whole transcript,
    masked, as before; a history replaced (or a file gone) is written whole again."""
    from fim.hooks.command_input import write_transcript
    from fim.types import Message

    run = make_context(tmp_path, secrets=frozenset({"s3cr3t-value"}))
    masked: list[Any] = []
    value = run.snapshot.masker.value

    def counting(entry: Any) -> Any:
        masked.append(entry)
        return value(entry)

    run.snapshot.masker.value = counting  # type: ignore[method-assign]
    call = HookContext(point="PreToolUse", agent="tester", run_id="r1")
    run.transcript[:] = [Message(role="user", content="deploy with s3cr3t-value")]
    for turn in range(5):
        run.transcript.append(Message(role="assistant", content=f"turn {turn}"))
        path = Path(write_transcript(run, call) or "")
    assert len(masked) == 6  # each message masked once, not 1 + 2 + ... + 6 times
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert [line["message"]["content"] for line in lines] == [
        "deploy with ***",
        *([{"type": "text", "text": f"turn {t}"}] for t in range(5)),  # Claude Code's blocks
    ]
    run.transcript[:] = [Message(role="user", content="a new history")]
    write_transcript(run, call)
    assert [json.loads(x)["message"]["content"] for x in path.read_text().splitlines()] == [
        "a new history"
    ]
    path.unlink()
    run.transcript.append(Message(role="assistant", content="after"))
    write_transcript(run, call)
    assert len(path.read_text().splitlines()) == 2
