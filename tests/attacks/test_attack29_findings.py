"""Attack round 29: the newest limits (paused workflow runs per key, human approval expiry,
workflow inputs) attacked for bypasses. Each test is a strict xfail that fails on its
assertion today (`pytest --runxfail`); notes in /work/notes/attack-29.md.

All offline and in process: SQLite, Starlette's TestClient or the handlers called directly.
No wall-clock assertions: interleavings are forced with a barrier the test holds (bounded,
never asserted on) and expiry is asked about a `now` the test picks."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from starlette.testclient import TestClient

import fim.server.limits
from fim.build.compile import compile_project
from fim.build.reload import SnapshotHolder
from fim.capabilities import CAPABILITIES
from fim.events import Notice
from fim.run.services import Services
from fim.server.app import create_app
from fim.server.bodies import MAX_INPUTS_BYTES
from fim.server.callers import CALLER, Caller
from fim.server.mcp_surface import call_workflow
from fim.store import Store, get_store
from fim.store.owners import paused_runs
from fim.workflows.engine import WorkflowEngine
from fim.workflows.expiry import end_expired

A = {"Authorization": "Bearer key-a"}

REFUND = (
    "inputs:\n  note: {type: string}\n"
    'nodes:\n  approve: {type: human, prompt: "Refund?"}\n'
    "  pay: {type: tool, tool: calculator, needs: [approve], args: {expression: '2+2'}}\n"
)


def project(root: Path, server: str = "{api_keys: [key-a, key-b]}") -> Path:
    (root / "workflows").mkdir(parents=True, exist_ok=True)
    (root / "fim.yaml").write_text(
        f'name: a29\nstate: "sqlite:///.fim/state.db"\nserver: {server}\n'
    )
    (root / "workflows" / "refund.yaml").write_text(REFUND)
    return root


# --------------------------------------------------------------------------- finding 1


def test_concurrent_starts_of_one_key_park_no_more_runs_than_its_cap(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two starts of one key arrive together under a cap of one: at most one parks, the
    other is a 429 (both refused is within the cap too: a fix that claims before it counts).

    The barrier holds each count until both requests have asked (at most 1 s, never
    asserted on): the interleaving a burst of requests gets on a loaded server. It wraps
    `fim.server.limits.paused_runs`; a fix that counts elsewhere moves it there."""
    monkeypatch.setattr(fim.server.limits, "MAX_PAUSED_RUNS", 1)
    arrived: list[int] = []
    both: dict[str, asyncio.Event] = {}

    async def barrier(store: Store, owner: str) -> int:
        found = await paused_runs(store, owner)
        gate = both.setdefault("gate", asyncio.Event())
        arrived.append(found)
        if len(arrived) >= 2:
            gate.set()
        # a start that waits for the other's end never meets it: on after 1 s
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(gate.wait(), 1.0)
        return found

    monkeypatch.setattr(fim.server.limits, "paused_runs", barrier)
    app = create_app(SnapshotHolder(compile_project(project(tmp_path))))
    body = {"inputs": {"note": "x"}}
    with TestClient(app) as client, ThreadPoolExecutor(2) as pool:
        started = [
            pool.submit(client.post, "/v1/workflows/refund/runs", json=body, headers=A)
            for _ in range(2)
        ]
        statuses = sorted(f.result().status_code for f in started)
        pending = client.get("/v1/approvals", headers=A).json()["approvals"]
    assert set(statuses) <= {200, 429} and 429 in statuses
    assert len(pending) <= 1, f"{len(pending)} runs parked under a cap of 1"


# --------------------------------------------------------------------------- finding 2


async def test_a_workflow_started_over_mcp_takes_no_more_inputs_than_over_http(
    tmp_path: Path,
) -> None:
    app = create_app(SnapshotHolder(compile_project(project(tmp_path))))
    api = app.state.api

    async def progress(*_: Any, **__: Any) -> None:
        return None

    request = SimpleNamespace(scope={CALLER: Caller(owner="a" * 64, key="a" * 64)})
    ctx = SimpleNamespace(request=request, session=SimpleNamespace(report_progress=progress))
    try:
        result = await call_workflow(api, "refund", {"note": "x" * (MAX_INPUTS_BYTES + 1)}, ctx)
        parked = await get_store(api.services).list_approvals("pending")
    finally:
        await api.services.aclose()
    said = "".join(getattr(part, "text", "") for part in result.content)
    assert (result.is_error, len(parked)) == (True, 0), said
    assert str(MAX_INPUTS_BYTES) in said


# --------------------------------------------------------------------------- finding 3


async def test_an_approval_decided_while_expiry_runs_is_not_ended_as_expired(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = project(tmp_path, "{}")
    snapshot = compile_project(root)
    services = Services(providers=CAPABILITIES, root=root, state_url=snapshot.project.state)
    try:
        engine = WorkflowEngine(snapshot, "refund", services)
        events = [e async for e in engine.run({"note": "n"})]
        approval_id = next(
            e.data["approval_id"]
            for e in events
            if isinstance(e, Notice) and "approval_id" in e.data
        )
        store = get_store(services)
        approval = await store.get_approval(approval_id)
        assert approval is not None and approval.expires_at is not None
        deadline = approval.expires_at

        read = store._read
        reads = 0

        async def decided_meanwhile(fn: Callable[[Any], Any]) -> Any:
            """end_expired's batch is read; the approver's decision lands before its write
            (by the approver's clock the deadline has not come: `decide_approval` agrees)."""
            nonlocal reads
            found = await read(fn)
            reads += 1
            if reads == 1:
                decided = await store.decide_approval(approval_id, True, by="approver")
                assert decided.approval is not None and decided.approval.status == "approved"
            return found

        with monkeypatch.context() as patch:
            patch.setattr(store, "_read", decided_meanwhile)
            ended = await end_expired(store, now=deadline + 1)
        record = await store.get_run(engine.run_id)
        assert record is not None
        # the approved run waits for its resume, which may still claim its decision
        assert (ended, record.status) == (0, "paused"), record.data.get("error")
        assert await store.claim_decision(approval_id)
    finally:
        await services.aclose()
