"""A command hook's output is read up to `MAX_OUTPUT_BYTES` per stream (attack-12 #3): what a
hook prints is often sized by the model, and fim held all of it. A hook that writes more
is killed and the call is blocked naming the hook and the cap; its answer is never read
from a cut JSON."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from fim.hooks import build_hooks
from fim.hooks.command_process import MAX_OUTPUT_BYTES, HookOutputTooLarge, run_command
from fim.testing.hooks import CallOutcome, call_tool, make_context
from fim.tools.base import FunctionTool

ALLOW = '{"continue": true}'
"""An answer that allows the call; trailing whitespace is still the same JSON."""


async def guarded(root: Path, command: str, args: dict[str, Any]) -> tuple[CallOutcome, list]:
    """Call an echo tool behind a PreToolUse hook running `command`; the outcome and the
    arguments the tool ran with (none when blocked)."""
    ran: list[dict[str, Any]] = []

    async def echo(**kwargs: Any) -> str:
        ran.append(kwargs)
        return "ran"

    ctx = make_context(root, [{"event": "PreToolUse", "command": command}])
    tool = FunctionTool("echo", "Echo", {"type": "object"}, echo)
    return await call_tool(build_hooks(ctx), tool, args), ran


def padded(total: int) -> str:
    """A shell command printing the allowing answer, then spaces up to `total` bytes."""
    return f"printf '%s' '{ALLOW}'; head -c {total - len(ALLOW)} /dev/zero | tr '\\0' ' '"


async def test_an_allow_padded_past_the_cap_blocks_the_call_naming_hook_and_cap(
    tmp_path: Path,
) -> None:
    """Cut at the cap the answer would still parse as `continue: true`: the call is blocked
    instead (fail closed), and the reason names the hook and the limit."""
    outcome, ran = await guarded(tmp_path, padded(MAX_OUTPUT_BYTES + 1), {})
    assert outcome.blocked and ran == []
    assert "hook 'command: printf" in outcome.observation
    assert "more than 1 MiB to stdout" in outcome.observation
    assert "fail closed" in outcome.observation
    assert outcome.events[0].decision == "block"


async def test_an_answer_of_exactly_the_cap_is_read_and_decides(tmp_path: Path) -> None:
    outcome, ran = await guarded(tmp_path, padded(MAX_OUTPUT_BYTES), {"x": 1})
    assert not outcome.blocked and ran == [{"x": 1}]


async def test_a_flood_on_stderr_blocks_too(tmp_path: Path) -> None:
    command = f"head -c {MAX_OUTPUT_BYTES + 1} /dev/zero >&2; exit 2"
    outcome, ran = await guarded(tmp_path, command, {})
    assert outcome.blocked and ran == []
    assert "more than 1 MiB to stderr" in outcome.observation


async def test_a_hook_that_never_stops_writing_is_killed_at_the_cap() -> None:
    """`yes` would run until the hook's timeout; the cap stops it (the group is killed)."""
    with pytest.raises(HookOutputTooLarge, match="killed"):
        await run_command("yes", "", {"PATH": "/usr/bin:/bin"}, cwd=".", timeout=60)


async def test_a_hook_that_does_not_read_its_event_still_decides(tmp_path: Path) -> None:
    """A large event on stdin left unread (the command exits first) is no error."""
    outcome, ran = await guarded(tmp_path, "exit 0", {"text": "a" * 2_000_000})
    assert not outcome.blocked and len(ran) == 1


async def test_stdin_stdout_and_stderr_are_exchanged_whole_under_the_cap() -> None:
    """The event arrives whole on stdin while both streams are read at once (a command
    writing stderr while fim waited on stdout would deadlock on a full pipe)."""
    event = json.dumps({"tool_input": {"text": "b" * 500_000}})
    command = "cat; head -c 300000 /dev/zero >&2"
    code, out, err = await run_command(
        command, event, {"PATH": "/usr/bin:/bin"}, cwd=".", timeout=60
    )
    assert (code, out, len(err)) == (0, event, 300_000)


def test_the_cap_is_the_documented_one_mebibyte() -> None:
    assert MAX_OUTPUT_BYTES == 1 << 20
