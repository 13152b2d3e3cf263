"""Attack round 18 (today's changes: hooks pinned in the snapshot, the sandbox memory cgroup,
approvals decided once, worker skew and stalled bounds): each confirmed finding is pinned
here as a strict xfail that asserts the safe behaviour. A fix turns its test into a pass
(and the strict xfail into a failure that asks for the marker to go). `/work/notes/attack-18.md`
has the reproduction and the fix location of each."""

from __future__ import annotations

import asyncio
import os
import sys
import threading
from pathlib import Path

import pytest

from fim.build.compile import compile_project
from fim.build.reload import SnapshotHolder
from fim.build.snapshot import Snapshot
from fim.commands.worker import check_stalled
from fim.errors import ConfigError, RunError
from fim.llm.script import text, tool_call
from fim.llm.scripted import ScriptedModel
from fim.testing.runs import run_events
from fim.tools import sandbox
from fim.tools.sandbox import cgroup
from fim.workflows.skew import WorkerSnapshots, accepted_under

FIM_YAML = (
    'name: a18\nstate: "sqlite:///.fim/state.db"\n'
    "models: {general: scripted}\ntool_selection: {enabled: false}\n"
)

SCRIPT = """#!/usr/bin/env python3
import sys
sys.stdin.read()
print("calculator is forbidden by the script (v1)", file=sys.stderr)
sys.exit(2)
"""

GUARD = """import hooks.words
from fim.hooks import PreToolUseHook


class NoCalc(PreToolUseHook):
    async def __call__(self, context):
        return self.block(hooks.words.REASON)
"""


def write(root: Path, files: dict[str, str]) -> Path:
    for name, body in {"fim.yaml": FIM_YAML, **files}.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(body)
    return root


def first_tool_result(snapshot: Snapshot) -> str:
    model = ScriptedModel([tool_call("calculator", {"expression": "6*7"}), text("done")])
    events = asyncio.run(run_events(snapshot, "a", "go", model=model))
    return str(next(e.content for e in events if e.type == "tool_result"))


def command_hooked(root: Path, command: str, script: str) -> Path:
    write(
        root,
        {
            "agents/a.yaml": "description: d\nmodel: general\ntools: [calculator]\nhooks:\n"
            f"  - command: '{command}'\n    event: PreToolUse\n",
            script: SCRIPT,
        },
    )
    (root / script).chmod(0o755)
    return root


# ------------------------------------------------------------ #1 command hook pins


@pytest.mark.parametrize(
    ("command", "script"),
    [
        ('"$CLAUDE_PROJECT_DIR"/.claude/hooks/check-calc', ".claude/hooks/check-calc"),
        ("cd hooks && ./check-calc", "hooks/check-calc"),
    ],
    ids=["claude-hooks-folder", "cd-then-run"],
)
def test_an_edited_command_hook_script_never_runs_under_the_old_snapshot(
    tmp_path: Path, command: str, script: str
) -> None:
    snapshot = compile_project(command_hooked(tmp_path, command, script))
    assert "forbidden by the script (v1)" in first_tool_result(snapshot)
    (tmp_path / script).write_text(SCRIPT.replace("(v1)", "(v2)"))
    assert "(v2)" not in first_tool_result(snapshot)  # blocked, or refused at compile


# ------------------------------------------------------------ #2 python hook disk imports


def test_importing_a_hooks_file_as_hooks_dot_module_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "p"
    write(
        root,
        {
            "agents/a.yaml": "description: d\nmodel: general\ntools: [calculator]\n"
            "hooks:\n  - python: guard:NoCalc\n",
            "hooks/guard.py": GUARD,
            "hooks/words.py": 'REASON = "words (v1)"\n',
        },
    )
    monkeypatch.syspath_prepend(str(root))
    try:
        with pytest.raises(ConfigError, match=r"through sys\.path"):
            compile_project(root)
    finally:  # the project's `hooks` namespace package must not outlive the test
        for name in ("hooks.words", "hooks"):
            sys.modules.pop(name, None)


# ------------------------------------------------------------ #3 worker stalled bound


@pytest.mark.parametrize(
    ("stalled_after", "heartbeat"),
    [(30.0, float("nan")), (float("nan"), 10.0), (float("inf"), 10.0)],
    ids=["nan-heartbeat", "nan-stalled", "inf-stalled"],
)
def test_a_worker_refuses_a_stalled_bound_or_heartbeat_that_is_not_finite(
    stalled_after: float, heartbeat: float
) -> None:
    with pytest.raises(RunError):
        check_stalled(stalled_after, heartbeat)


# ------------------------------------------------------------ #4 snapshot skew ABA


async def test_a_version_held_before_a_revert_is_not_taken_as_older(tmp_path: Path) -> None:
    root = write(tmp_path / "p", {})
    unlocked = compile_project(root)
    (root / "fim.yaml").write_text(FIM_YAML + "read_only: true\n")
    locked = compile_project(root)
    holder = SnapshotHolder(unlocked)

    async def behind() -> bool:  # its watcher has not seen the re-lock yet
        return False

    snapshots = WorkerSnapshots(holder, behind, origin="elsewhere", wait=0.0)
    holder.swap(locked)  # the operator locks down...
    holder.swap(unlocked)  # ...reverts...
    # ...and locks down again: the server reloads first and accepts a job under `locked`
    try:
        ran_on = await snapshots.for_job(accepted_under(locked))
    except RunError:
        return  # snapshot skew: failing closed is safe
    assert ran_on.project.read_only


# ------------------------------------------------------------ #5 cgroup leak on cancel

_NO_CGROUP = sandbox.unavailable() or cgroup.why_not()


@pytest.mark.skipif(_NO_CGROUP is not None, reason=f"no sandbox memory cgroup: {_NO_CGROUP}")
async def test_a_call_cancelled_while_its_cgroup_is_made_leaves_no_cgroup(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    base = cgroup.base()
    assert base is not None
    made = threading.Event()
    real = cgroup.create

    def slow(found: cgroup.Base, limit_bytes: int) -> cgroup.MemoryCgroup | None:
        group = real(found, limit_bytes)
        made.set()
        threading.Event().wait(0.3)  # a loaded host: the cgroupfs writes take a while
        return group

    monkeypatch.setattr(cgroup, "create", slow)
    before = set(base.path.glob(f"{cgroup.PREFIX}{os.getpid()}-*"))
    call = asyncio.ensure_future(
        sandbox.run(["true"], scratch=tmp_path / "scratch", limits=sandbox.Limits(timeout=10))
    )
    while not made.is_set():
        await asyncio.sleep(0.01)
    call.cancel()  # the engine's tool timeout, a cancelled run, a client gone
    with pytest.raises(asyncio.CancelledError):
        await call
    await asyncio.sleep(0.5)  # the creating thread has returned by now
    left = set(base.path.glob(f"{cgroup.PREFIX}{os.getpid()}-*")) - before
    for group in left:  # clean up what the bug leaves, whatever the assertion says
        cgroup.MemoryCgroup(group, base.version).remove(within=1.0)
    assert not left
