"""Taking over a workflow run is a compare-and-set on its record: of two `fim workflow
resume` of one stopped or orphaned run, exactly one drives it (attack-39 F6: both passed the
checks on what they had read and ran the cut-off nodes twice)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from fim.build.compile import compile_project
from fim.capabilities import CAPABILITIES
from fim.errors import RunError
from fim.run.services import Services
from fim.store import get_store
from fim.workflows.engine import WorkflowEngine, load_run

TOOLS = '''
import asyncio
from pathlib import Path


async def pay(flag: str) -> str:
    """Wait for `flag`, then record one payment."""
    while not Path(flag).exists():
        await asyncio.sleep(0.01)
    with open("payments", "a") as f:
        f.write("paid\\n")
    return "paid"
'''

FLOW = """\
description: one payment
nodes:
  pay: {type: tool, tool: "mytools:pay", args: {flag: "go"}}
"""


@pytest.fixture
def both_read_first(monkeypatch: pytest.MonkeyPatch) -> None:
    """The race the claim closes, made certain: two resumes each read the run before
    either writes it (without it, a slower store lets one read after the other's claim,
    and the second is refused as "still running" instead)."""
    from fim.workflows import engine

    read, barrier = engine.load_run, asyncio.Barrier(2)

    async def read_together(services: Services, run_id: str) -> Any:
        state = await read(services, run_id)
        await barrier.wait()
        return state

    monkeypatch.setattr(engine, "load_run", read_together)


@pytest.fixture
def root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "workflows").mkdir()
    (tmp_path / "hooks").mkdir()
    (tmp_path / "hooks" / "mytools.py").write_text(TOOLS)
    (tmp_path / "fim.yaml").write_text('name: claim\nstate: "sqlite:///.fim/state.db"\n')
    (tmp_path / "workflows" / "pay.yaml").write_text(FLOW)
    monkeypatch.chdir(tmp_path)  # the function's files are relative to it
    return tmp_path


async def _stopped(services: Services, root: Path) -> str:
    """A run whose caller stopped listening while `pay` waited: recorded `cancelled`."""
    engine = WorkflowEngine(compile_project(root), "pay", services)
    events = engine.run({})
    async for event in events:
        if event.type == "node_started":
            break
    await events.aclose()
    return engine.run_id


async def _resume(services: Services, root: Path, run_id: str, **how: bool) -> str:
    engine = WorkflowEngine(compile_project(root), "pay", services)
    try:
        async for _ in engine.resume(run_id, None, **how):
            pass
    except RunError as exc:
        return exc.message
    return "drove it"


@pytest.mark.usefixtures("both_read_first")
async def test_two_resumes_of_a_stopped_run_pay_once(root: Path, store_url: str) -> None:
    services = Services(providers=CAPABILITIES, root=root, state_url=store_url)
    try:
        run_id = await _stopped(services, root)
        (root / "go").touch()

        outcomes = await asyncio.gather(
            _resume(services, root, run_id, cancelled=True),
            _resume(services, root, run_id, cancelled=True),
        )

        assert sorted(outcomes) == [
            "drove it",
            f"run '{run_id}' was taken over by another process while this one resumed it",
        ]
        assert (root / "payments").read_text() == "paid\n"
        assert (await load_run(services, run_id)).status == "ok"
    finally:
        await services.aclose()


@pytest.mark.usefixtures("both_read_first")
async def test_two_recoveries_of_an_orphaned_run_pay_once(root: Path, store_url: str) -> None:
    """A run recorded as running by a process that is gone (here: a pid no process has)."""
    services = Services(providers=CAPABILITIES, root=root, state_url=store_url)
    try:
        run_id = await _stopped(services, root)
        store = get_store(services)
        record = await store.get_run(run_id)
        assert record is not None
        owner = {**record.data["owner"], "pid": 2**22 + 1}  # above pid_max: never alive
        nodes = {"pay": {**record.data["nodes"]["pay"], "status": "running"}}
        await store.put_run(run_id, "workflow", "pay", "running", {
            **record.data, "status": "running", "error": None, "owner": owner, "nodes": nodes,
        })  # fmt: skip
        (root / "go").touch()

        outcomes = await asyncio.gather(
            _resume(services, root, run_id), _resume(services, root, run_id)
        )

        assert sorted(outcomes) == [
            "drove it",
            f"run '{run_id}' was taken over by another process while this one resumed it",
        ], outcomes
        assert (root / "payments").read_text() == "paid\n"
    finally:
        await services.aclose()


def test_the_time_a_state_was_read_is_never_stored() -> None:
    """`seen_at` says when the record was read; the record itself never holds it."""
    from fim.workflows.state import RunState

    state = RunState(run_id="r", workflow="w", decl={}, inputs={}, nodes={}, seen_at=12.5)
    assert "seen_at" not in state.to_dict()
