"""Newcomer 52, finding 2: on a project fim cannot write to (a `:ro` volume, a ConfigMap, a
host folder another uid owns) every call a command hook guarded was blocked, because the
hook's transcript could not be written under `<project>/.fim/`; the run said `ok`, the log
said nothing and `fim_hook_blocks_total` counted it as the policy's block.

Now the transcripts go to a temp folder of the process's own (0700) when the project's
cannot be written, said once at WARNING; and a hook that *fails* to run (as opposed to one
that decides to block) still blocks the call (fail closed), but its event says `failed`,
the log has a WARNING with the run id and the reason, and it is counted in
`fim_hook_failures_total`, not in `fim_hook_blocks_total`.

A read-only mount cannot be made here without privileges (and chmod does not stop root):
the project's `.fim` is a file instead, which no folder can be made in either.
"""

from __future__ import annotations

import logging
import stat
import sys
from pathlib import Path
from typing import Any

import pytest

from fim import private
from fim.events import HookEvent
from fim.hooks import build_hooks
from fim.hooks.base import PreToolUseHook
from fim.hooks.runner import HookChain
from fim.observe.metrics import Metrics
from fim.testing.hooks import call_tool, make_context
from fim.tools.base import FunctionTool
from fim.types import HookContext, HookResult


def unwritable_project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    root.mkdir()
    (root / ".fim").write_text("not a folder\n")  # as a read-only mount: nothing made in it
    return root


def echo_tool() -> tuple[FunctionTool, list[dict[str, Any]]]:
    ran: list[dict[str, Any]] = []

    async def run(**args: Any) -> str:
        ran.append(args)
        return "ran"

    return FunctionTool("echo", "Echo", {"type": "object"}, run), ran


def test_a_project_that_cannot_be_written_gets_a_private_temp_folder(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    root = unwritable_project(tmp_path)
    with caplog.at_level(logging.WARNING, logger="fim.hooks"):
        folder = private.transcripts(root)
        again = private.transcripts(root)
    assert again == folder  # decided once per project folder
    assert root not in folder.parents and folder.is_dir()
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    said = [r.getMessage() for r in caplog.records if r.name == "fim.hooks"]
    assert len(said) == 1
    assert said[0].startswith(f"hook transcripts go to {folder} (this process's own")
    assert f"{root}/.fim/transcripts cannot be written" in said[0]


def test_a_writable_project_keeps_its_transcripts_in_its_fim_folder(tmp_path: Path) -> None:
    assert private.transcripts(tmp_path) == tmp_path / ".fim" / "transcripts"


async def test_a_command_hook_on_a_project_that_cannot_be_written_still_decides(
    tmp_path: Path,
) -> None:
    root = unwritable_project(tmp_path)
    (root / "hooks").mkdir()
    guard = root / "hooks" / "guard.py"
    guard.write_text(
        "import json, sys\n"
        "event = json.load(sys.stdin)\n"
        "open(event['transcript_path']).read()\n"
        "sys.exit(2 if 'prod-db' in json.dumps(event['tool_input']) else 0)\n"
    )
    hook = {"event": "PreToolUse", "matcher": "echo", "command": f"{sys.executable} {guard}"}
    ctx = make_context(root, [hook])
    tool, ran = echo_tool()

    allowed = await call_tool(build_hooks(ctx), tool, {"db": "staging"})
    refused = await call_tool(build_hooks(ctx), tool, {"db": "prod-db"})

    assert allowed.ran and not allowed.blocked, allowed.observation
    assert refused.blocked and ran == [{"db": "staging"}]
    assert not any(e.failed for e in refused.events)  # the policy's decision, not a failure


class Raises(PreToolUseHook):
    name = "broken"

    async def __call__(self, context: HookContext) -> HookResult:
        raise OSError(30, "Read-only file system")


class Refuses(PreToolUseHook):
    name = "policy"

    async def __call__(self, context: HookContext) -> HookResult:
        return self.block("not on prod")


async def test_a_hook_that_fails_blocks_and_is_logged_as_a_failure(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    tool, ran = echo_tool()
    with caplog.at_level(logging.WARNING, logger="fim.hooks"):
        outcome = await call_tool(HookChain([Raises()]), tool, {}, run_id="run-52")
    assert outcome.blocked and not ran  # hooks fail closed
    (event,) = outcome.events
    assert event.decision == "block" and event.failed
    said = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert said == [
        "run run-52: hook 'broken' failed at PreToolUse of 'echo': hook 'broken' failed "
        "(OSError: [Errno 30] Read-only file system), so the call was blocked (hooks fail "
        "closed)"
    ]


async def test_a_policy_block_is_not_a_failure_and_is_not_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    tool, _ = echo_tool()
    with caplog.at_level(logging.WARNING, logger="fim.hooks"):
        outcome = await call_tool(HookChain([Refuses()]), tool, {})
    (event,) = outcome.events
    assert event.decision == "block" and not event.failed
    assert not caplog.records


def test_failures_and_policy_blocks_are_counted_apart() -> None:
    metrics = Metrics()
    for failed in (True, True, False):
        event = HookEvent(run_id="r", hook="h", point="PreToolUse", decision="block", failed=failed)
        metrics.on("oncall", event, set())
    labels = {"agent": "oncall", "hook": "h", "point": "PreToolUse"}
    assert metrics.registry.get_sample_value("fim_hook_failures_total", labels) == 2
    assert metrics.registry.get_sample_value("fim_hook_blocks_total", labels) == 1
