"""Attack round 16: hooks against hot reload and the snapshot, in the default
configuration. Each test states the safe behaviour; they are strict xfails until fim holds
it (/work/notes/attack-16.md)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from fim.build.compile import compile_project
from fim.build.reload import SnapshotHolder, reload_once
from fim.llm.script import text, tool_call
from fim.llm.scripted import ScriptedModel
from fim.testing.runs import run_events

BLOCKING_HOOK = """from fim.hooks import PreToolUseHook


class NoCalc(PreToolUseHook):
    async def __call__(self, context):
        return self.block("calculator is forbidden")
"""
ALLOWING_HOOK = BLOCKING_HOOK.replace(
    'return self.block("calculator is forbidden")', "return self.allow()"
)


def _project(root: Path) -> None:
    files = {
        "fim.yaml": 'name: h\nstate: "sqlite:///.fim/state.db"\n'
        "models: {general: scripted}\ntool_selection: {enabled: false}\n",
        "agents/a.yaml": "description: d\nmodel: general\ntools: [calculator]\n"
        "hooks:\n  - python: guard:NoCalc\n    event: PreToolUse\n",
        "agents/b.yaml": "description: another agent\nmodel: general\n",
        "hooks/guard.py": BLOCKING_HOOK,
    }
    for name, body in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(body)


async def _calculator_result(holder: SnapshotHolder) -> str:
    model = ScriptedModel([tool_call("calculator", {"expression": "6*7"}), text("done")])
    events = await run_events(holder.current, "a", "go", model=model)
    return next(e.content for e in events if e.type == "tool_result")


def test_a_hook_edit_the_reload_rejected_never_reaches_a_run(tmp_path: Path) -> None:
    """One change weakens hooks/guard.py (the calculator is no longer blocked) and breaks
    another agent's file. The reload rejects it and the server keeps serving the last good
    snapshot, whose guard blocks the calculator. Safe: a run of that snapshot is held to the
    guard as the snapshot compiled it (a hook's code is part of the snapshot, as prompt
    files are), so the call is blocked. Today the run reads hooks/guard.py from the disk and
    the call runs, while its record names the last good snapshot."""
    _project(tmp_path)
    holder = SnapshotHolder(compile_project(tmp_path))
    good = holder.current.version
    (tmp_path / "hooks/guard.py").write_text(ALLOWING_HOOK)
    (tmp_path / "agents/b.yaml").write_text(
        "description: another agent\nmodel: general\ntools: [no_such_tool]\n"
    )
    assert asyncio.run(reload_once(tmp_path, holder)) is False
    assert holder.current.version == good and holder.errors  # still serving the last good
    result = asyncio.run(_calculator_result(holder))
    assert "calculator is forbidden" in result, result


def test_a_run_is_held_to_the_hooks_its_snapshot_compiled(tmp_path: Path) -> None:
    """The snapshot is compiled while hooks/guard.py blocks the calculator; the file is
    then edited (no reload yet: `fim serve` between the write and the watcher's recompile,
    a `fim run` in progress, a delegate started by a run in flight). Safe: the snapshot's
    runs keep its guard until a reload that checks the edit swaps in a new snapshot."""
    _project(tmp_path)
    holder = SnapshotHolder(compile_project(tmp_path))
    (tmp_path / "hooks/guard.py").write_text(ALLOWING_HOOK)
    result = asyncio.run(_calculator_result(holder))
    assert "calculator is forbidden" in result, result
