"""A command hook that exits without reading its event decides by its exit code and output,
on `fim serve`'s uvloop as on the stdlib loop (attack-59 F2: under uvloop the write to the
exited hook's closed pipe raised `RuntimeError`, the hook "failed", and an allow-all `true`
blocked 40-78% of calls). The event is larger than a pipe's buffer, so it is never read
whole: every run meets the unread pipe. A hook that blocks without reading still blocks."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from fim.hooks import build_hooks
from fim.testing.hooks import CallOutcome, call_tool, make_context
from fim.tools.base import FunctionTool

uvloop = pytest.importorskip("uvloop")

LOOPS = {"asyncio": None, "uvloop": uvloop.new_event_loop}
LARGE = {"text": "a" * 200_000}
"""Arguments whose event (on the hook's stdin) is over 64 KiB."""
RUNS = 25


def calls(root: Path, loop: str, hooks: list[dict[str, Any]]) -> list[CallOutcome]:
    """`RUNS` calls of an echo tool behind `hooks`, on `loop`; each call's outcome."""

    async def echo(**kwargs: Any) -> str:
        return "ran"

    async def main() -> list[CallOutcome]:
        tool = FunctionTool("echo", "Echo", {"type": "object"}, echo)
        runner = build_hooks(make_context(root, hooks))
        return [await call_tool(runner, tool, LARGE) for _ in range(RUNS)]

    with asyncio.Runner(loop_factory=LOOPS[loop]) as runner:
        return runner.run(main())


@pytest.mark.parametrize("loop", LOOPS)
@pytest.mark.parametrize("command", ["true", "exit 0", "echo ok"])
def test_an_allowing_hook_that_ignores_stdin_allows_every_call(
    tmp_path: Path, loop: str, command: str
) -> None:
    outcomes = calls(tmp_path, loop, [{"event": "PreToolUse", "command": command}])
    assert [o.observation for o in outcomes if o.blocked] == []
    assert all(o.ran and o.observation == "ran" for o in outcomes)


@pytest.mark.parametrize("loop", LOOPS)
def test_a_post_tool_use_hook_that_ignores_stdin_withholds_no_result(
    tmp_path: Path, loop: str
) -> None:
    """A logging PostToolUse hook (`true`) leaves the result of a call that ran as it is:
    "withheld" would have the model repeat a call whose side effect happened."""
    outcomes = calls(tmp_path, loop, [{"event": "PostToolUse", "command": "true"}])
    assert [(o.ran, o.blocked, o.observation) for o in outcomes] == [(True, False, "ran")] * RUNS


@pytest.mark.parametrize("loop", LOOPS)
def test_a_blocking_hook_that_ignores_stdin_still_blocks_every_call(
    tmp_path: Path, loop: str
) -> None:
    command = "echo 'no writes here' >&2; exit 2"
    outcomes = calls(tmp_path, loop, [{"event": "PreToolUse", "command": command}])
    assert all(o.blocked and not o.ran for o in outcomes)
    assert all("no writes here" in o.observation for o in outcomes)
