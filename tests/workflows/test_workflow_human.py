"""Human nodes: a run pauses, survives a process restart, and resumes with the decision."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from fim.build.compile import compile_project
from fim.build.snapshot import Snapshot
from fim.capabilities import CAPABILITIES
from fim.errors import RunError
from fim.events import Event
from fim.run.services import Services
from fim.store import get_store
from fim.testing.workflows import refund_above_100
from fim.workflows.engine import WorkflowEngine, load_run

SCHEMA = "{type: object, properties: {note: {type: string}}, additionalProperties: false}"


def write_project(root: Path, on_error: str = "fail") -> Path:
    (root / "workflows").mkdir(parents=True)
    (root / "fim.yaml").write_text('name: humans\nstate: "sqlite:///.fim/state.db"\n')
    (root / "workflows" / "refund.yaml").write_text(
        refund_above_100(f"    input_schema: {SCHEMA}\n    on_error: {on_error}\n")
    )
    return root


def services_for(snapshot: Snapshot) -> Services:
    return Services(providers=CAPABILITIES, root=snapshot.root, state_url=snapshot.project.state)


def approval_of(events: list[Event]) -> str:
    """The approval id announced by the notice of a waiting human node."""
    return next(e.data["approval_id"] for e in events if "approval_id" in getattr(e, "data", {}))


async def collect(events: Any) -> list[Event]:
    return [e async for e in events]


async def start_paused(snapshot: Snapshot, amount: float = 250) -> tuple[str, list[Event]]:
    services = services_for(snapshot)
    try:
        engine = WorkflowEngine(snapshot, "refund", services)
        events = await collect(engine.run({"amount": amount}))
    finally:
        await services.aclose()
    return engine.run_id, events


async def resume(
    snapshot: Snapshot,
    run_id: str,
    approved: bool | None,
    data: Any = None,
) -> tuple[WorkflowEngine, list[Event]]:
    services = services_for(snapshot)
    try:
        engine = WorkflowEngine(snapshot, "refund", services)
        events = await collect(engine.resume(run_id, approved, data))
    finally:
        await services.aclose()
    return engine, events


async def test_small_refund_needs_no_human(tmp_path):
    snapshot = compile_project(write_project(tmp_path))
    _, events = await start_paused(snapshot, amount=20)

    assert events[-1].status == "ok"
    assert events[-1].outputs == {"refunded": "-20", "approval": None}


async def test_human_node_pauses_the_run_with_a_pending_approval(tmp_path):
    snapshot = compile_project(write_project(tmp_path))
    run_id, events = await start_paused(snapshot)

    assert events[-1].type == "workflow_finished" and events[-1].status == "paused"
    waiting = next(e for e in events if e.type == "notice" and "approval_id" in e.data)
    assert waiting.data["prompt"] == "Approve a refund of 250?"
    assert not any(getattr(e, "node", None) == "refund" for e in events)

    services = services_for(snapshot)
    try:
        approvals = await get_store(services).list_approvals("pending")
        state = await load_run(services, run_id)
    finally:
        await services.aclose()
    assert len(approvals) == 1
    approval = approvals[0]
    assert approval.id == waiting.data["approval_id"]
    assert approval.kind == "workflow" and approval.run_id == run_id
    assert approval.data == {"workflow": "refund", "run_id": run_id, "node": "approve"}
    assert state.status == "paused" and state.nodes["approve"].status == "waiting"
    assert state.nodes["refund"].status == "pending"


async def test_paused_run_survives_a_process_restart(tmp_path):
    """The run starts in a child process that then exits; this process resumes it from the
    SQLite file alone, with new engine, store and services."""
    root = write_project(tmp_path)
    script = textwrap.dedent(
        f"""
        import asyncio, json
        from fim.build.compile import compile_project
        from fim.capabilities import CAPABILITIES
        from fim.run.services import Services
        from fim.workflows.engine import WorkflowEngine

        async def main():
            snapshot = compile_project({str(root)!r})
            state = snapshot.project.state
            services = Services(providers=CAPABILITIES, root=snapshot.root, state_url=state)
            engine = WorkflowEngine(snapshot, "refund", services)
            events = [e async for e in engine.run({{"amount": "250"}})]
            await services.aclose()
            print(json.dumps({{"run_id": engine.run_id, "status": events[-1].status}}))

        asyncio.run(main())
        """
    )
    child = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, cwd=tmp_path
    )
    assert child.returncode == 0, child.stderr
    started = json.loads(child.stdout.strip().splitlines()[-1])
    assert started["status"] == "paused"

    snapshot = compile_project(root)
    _, events = await resume(snapshot, started["run_id"], True, {"note": "ok by Ann"})

    assert [e.type for e in events[:2]] == ["notice", "node_finished"]
    assert events[1].node == "approve" and events[1].output == {"note": "ok by Ann"}
    assert events[-1].status == "ok"
    assert events[-1].outputs == {"refunded": "-250", "approval": {"note": "ok by Ann"}}
    services = services_for(snapshot)
    try:
        state = await load_run(services, started["run_id"])
        approval = await get_store(services).get_approval(state.nodes["approve"].approval_id)
    finally:
        await services.aclose()
    assert state.status == "ok" and state.nodes["refund"].status == "ok"
    assert approval.status == "approved" and approval.resolved_by == "cli"


async def test_approving_without_data_gives_approved_true(tmp_path):
    snapshot = compile_project(write_project(tmp_path))
    run_id, _ = await start_paused(snapshot)
    _, events = await resume(snapshot, run_id, True)

    assert events[-1].outputs["approval"] == {"approved": True}


async def test_deny_fails_the_human_node_and_the_run(tmp_path):
    snapshot = compile_project(write_project(tmp_path))
    run_id, _ = await start_paused(snapshot)
    engine, events = await resume(snapshot, run_id, False)

    failed = [e for e in events if e.type == "node_failed"]
    assert failed[0].node == "approve" and failed[0].error == "denied by cli"
    assert events[-1].status == "failed"
    assert engine.state.nodes["refund"].status == "pending"


async def test_deny_with_on_error_continue_lets_dependants_run(tmp_path):
    snapshot = compile_project(write_project(tmp_path, on_error="continue"))
    run_id, _ = await start_paused(snapshot)
    _, events = await resume(snapshot, run_id, False)

    assert events[-1].status == "ok"
    assert events[-1].outputs == {"refunded": "-250", "approval": {"error": "denied by cli"}}


async def test_a_decision_taken_elsewhere_is_picked_up_on_resume(tmp_path):
    snapshot = compile_project(write_project(tmp_path))
    run_id, events = await start_paused(snapshot)
    approval_id = approval_of(events)
    services = services_for(snapshot)
    try:
        await get_store(services).resolve_approval(approval_id, True, by="http", data={"note": "n"})
    finally:
        await services.aclose()

    _, events = await resume(snapshot, run_id, None)

    assert events[0].data["by"] == "http"
    assert events[-1].outputs["approval"] == {"note": "n"}


async def test_resume_checks_the_data_against_the_input_schema(tmp_path):
    snapshot = compile_project(write_project(tmp_path))
    run_id, _ = await start_paused(snapshot)

    with pytest.raises(RunError, match="invalid input for node 'approve'"):
        await resume(snapshot, run_id, True, {"colour": "red"})
    with pytest.raises(RunError, match="still waiting for a decision"):
        await resume(snapshot, run_id, None)
    _, events = await resume(snapshot, run_id, True, {"note": "fine"})
    assert events[-1].status == "ok"


async def test_only_paused_runs_can_be_resumed(tmp_path):
    snapshot = compile_project(write_project(tmp_path))
    run_id, _ = await start_paused(snapshot)
    await resume(snapshot, run_id, True)

    with pytest.raises(RunError, match="is ok, not paused"):
        await resume(snapshot, run_id, True)
    with pytest.raises(RunError, match="no workflow run 'missing'"):
        await resume(snapshot, "missing", True)


async def test_an_approval_resumes_a_run_only_once(tmp_path):
    """Two processes resuming the same approved run: the second is refused, since one
    approval allows one continuation."""
    snapshot = compile_project(write_project(tmp_path))
    run_id, events = await start_paused(snapshot)
    approval_id = approval_of(events)
    services = services_for(snapshot)
    try:
        store = get_store(services)
        await store.resolve_approval(approval_id, True, by="http")
        assert await store.consume_approval(approval_id)  # the other process got there first
    finally:
        await services.aclose()

    with pytest.raises(RunError, match="already resumed at 'approve' by another process"):
        await resume(snapshot, run_id, None)
