"""Recovering a workflow run whose process died mid-node: `fim workflow resume RUN_ID`
runs the in-flight nodes again and finishes the run; finished nodes are not repeated, and
a run that is still alive (or whose liveness cannot be checked) is refused."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from fim.build.compile import compile_project
from fim.capabilities import CAPABILITIES
from fim.errors import RunError
from fim.run.services import Services
from fim.store import get_store
from fim.workflows.engine import WorkflowEngine, load_run
from fim.workflows.state import KIND, orphaned
from tests.inprocess_cli import run_fim

CRASHY = """\
description: The second node hangs the first time it runs
nodes:
  first:
    type: tool
    tool: python_exec
    args:
      code: |
        with open("first-runs", "a") as f:
            f.write("x")
        print("first")
  slow:
    type: tool
    tool: python_exec
    needs: [first]
    args:
      code: |
        import os, time
        if not os.path.exists("hung-once"):
            open("hung-once", "w").close()
            time.sleep(120)
        print("slow done")
outputs:
  first: "{{ nodes.first.output }}"
  slow: "{{ nodes.slow.output }}"
"""


@pytest.fixture
def root(tmp_path: Path) -> Path:
    (tmp_path / "workflows").mkdir()
    (tmp_path / "fim.yaml").write_text("name: recover\n")
    (tmp_path / "workflows" / "crashy.yaml").write_text(CRASHY)
    return tmp_path


def fim(root: Path, *args: str, **options) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "fim.cli", *args, "--project", str(root)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        **options,
    )


async def wait_until_running(services: Services, node: str, timeout: float = 30.0) -> str:
    store = get_store(services)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for record in await store.list_runs(kind=KIND, limit=5):
            state = await load_run(services, record.id)
            if state.nodes[node].status == "running":
                return state.run_id
        await asyncio.sleep(0.1)
    raise AssertionError(f"node {node} never started")


async def test_a_run_killed_mid_node_is_recovered_by_resume(root: Path):
    crashed = fim(root, "workflow", "run", "crashy")
    services = Services(
        providers=CAPABILITIES, root=root, state_url=compile_project(root).project.state
    )
    try:
        run_id = await wait_until_running(services, "slow")
        hung = root / ".fim" / "sandbox" / "scratch" / "hung-once"
        for _ in range(1000):  # the node runs, but its sandboxed process takes a moment
            if hung.exists():
                break
            await asyncio.sleep(0.01)
        os.killpg(crashed.pid, signal.SIGKILL)  # the run process and its python_exec child
        crashed.wait(timeout=10)
        state = await load_run(services, run_id)
        assert state.status == "running" and orphaned(state)
    finally:
        await services.aclose()

    # the commands that list and recover it, in this process (the run's process is gone)
    listing = await asyncio.to_thread(
        run_fim, "workflow", "runs", "--json", "--project", str(root), timeout=60
    )
    [row] = json.loads(listing.stdout)
    assert (row["run_id"], row["status"], row["orphaned"]) == (run_id, "running", True)

    resume = ("workflow", "resume", run_id, "--json", "--project", str(root))
    resumed = await asyncio.to_thread(run_fim, *resume, timeout=60)
    out, err = resumed.stdout, resumed.stderr
    assert resumed.returncode == 0, err + out
    doc = json.loads(out)
    assert doc["status"] == "ok"
    assert doc["outputs"]["first"].endswith("\nfirst")
    assert doc["outputs"]["slow"].endswith("\nslow done")
    scratch = root / ".fim" / "sandbox" / "scratch"
    assert (scratch / "first-runs").read_text() == "x", "finished nodes do not run again"


async def _orphan(
    root: Path, owner: dict, workflow: str = "crashy", in_flight: str = "slow", **options: Any
) -> tuple[Services, str]:
    """A run of `workflow` (its engine made with `options`) whose state says `in_flight`
    was running after `first` finished, owned by `owner`."""
    snapshot = compile_project(root)
    services = Services(providers=CAPABILITIES, root=root, state_url=snapshot.project.state)
    engine = WorkflowEngine(snapshot, workflow, services, **options)
    events = engine.run({})
    async for event in events:
        if event.type == "node_finished" and event.node == "first":
            break
    await events.aclose()
    state = engine.state
    assert state is not None
    # closing the run recorded it cancelled; a crash runs no `finally`: undone here
    state.status, state.owner, state.error = "running", owner, None
    state.nodes[in_flight].status = "running"
    await get_store(services).put_run(
        state.run_id, KIND, state.workflow, state.status, state.to_dict()
    )
    return services, state.run_id


async def _resume(root: Path, services: Services, run_id: str, **options) -> list:
    engine = WorkflowEngine(compile_project(root), "crashy", services)
    return [e async for e in engine.resume(run_id, None, **options)]


async def test_a_live_run_is_not_recovered(root: Path):
    services, run_id = await _orphan(root, {"host": os.uname().nodename, "pid": os.getpid()})
    try:
        with pytest.raises(RunError, match=rf"run '{run_id}' is still running \(process"):
            await _resume(root, services, run_id)
    finally:
        await services.aclose()


async def test_a_run_of_another_host_needs_force(root: Path):
    (root / ".fim" / "sandbox" / "scratch").mkdir(parents=True)
    (root / ".fim" / "sandbox" / "scratch" / "hung-once").touch()
    services, run_id = await _orphan(root, {"host": "worker-7", "pid": 4242})
    try:
        with pytest.raises(RunError, match="recorded as running on worker-7") as caught:
            await _resume(root, services, run_id)
        assert "--force" in (caught.value.hint or "")

        events = await _resume(root, services, run_id, force=True)
        notice = events[0]
        assert notice.message == "workflow 'crashy' recovered: running slow again"
        assert notice.data["rerun"] == ["slow"]
        state = await load_run(services, run_id)
        assert state.status == "ok" and state.nodes["slow"].output.endswith("slow done")
        assert state.owner["pid"] == os.getpid()
    finally:
        await services.aclose()


async def test_orphaned_runs_lists_runs_whose_process_is_gone(root: Path):
    from fim.workflows.engine import orphaned_runs

    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    services, run_id = await _orphan(root, {"host": os.uname().nodename, "pid": gone.pid})
    try:
        alive_services, _ = await _orphan(root, {"host": os.uname().nodename, "pid": os.getpid()})
        await alive_services.aclose()
        assert [s.run_id for s in await orphaned_runs(services)] == [run_id]
    finally:
        await services.aclose()


async def test_a_run_an_agent_started_is_recovered_under_that_agents_hooks(tmp_path: Path):
    """`run_workflow` runs a workflow under its agent's hooks, held in memory. If the
    process dies mid-run, `fim workflow resume` in another process ran the rest without
    them; they are built again from the agents in the run's chain."""
    (tmp_path / "workflows").mkdir()
    (tmp_path / "agents").mkdir()
    (tmp_path / "fim.yaml").write_text("name: recover\n")
    (tmp_path / "workflows" / "two.yaml").write_text(
        "nodes:\n"
        "  first: {type: tool, tool: calculator, args: {expression: '1+1'}}\n"
        "  second: {type: tool, tool: file_ops, needs: [first],"
        " args: {operation: write, path: planted.txt, content: x}}\n"
    )
    (tmp_path / "unused.yaml").write_text("- text: unused\n")
    (tmp_path / "agents" / "boss.yaml").write_text(
        "model: scripted:unused.yaml\ntools: [calculator]\nworkflows: [two]\n"
        "hooks:\n  - event: PreToolUse\n    matcher: file_ops\n"
        "    command: echo 'boss never writes files' >&2; exit 2\n"
    )
    gone = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    dead = {"host": os.uname().nodename, "pid": int(gone.stdout)}
    # the process "died" with `second` in flight, started by `boss` (`run_workflow`)
    services, run_id = await _orphan(tmp_path, dead, "two", "second", depth=1, parents=("boss",))
    for planted in tmp_path.rglob("planted.txt"):  # in case it ran before the "death"
        planted.unlink()
    try:
        again = WorkflowEngine(compile_project(tmp_path), "two", services)
        recovered = [e async for e in again.resume(run_id, None)]
    finally:
        await services.aclose()
    failed = [e for e in recovered if e.type == "node_failed"]
    assert failed and failed[0].node == "second"
    assert "boss never writes files" in failed[0].error  # boss's hook, built again
    assert not list(tmp_path.rglob("planted.txt"))
