"""Every decision on an approval takes effect exactly once (attack-17 #1).

Two deciders can both see an approval `pending` and decide it: a double click, a load
balancer retrying on the other replica, two shells. A denied human node was never
claimed, and a decider that lost the race read the winner's status back, which equalled
its own: both answered 200 and both resumed the workflow, so the nodes after an
`on_error: continue` denial ran twice and the run's event log collided. Now:

- the store's decision is one conditional `UPDATE ... WHERE status = 'pending'
  RETURNING` and reports whether *this* call changed the approval (SQLite and
  PostgreSQL);
- a workflow resume claims the decision whatever it is (approved or denied): one process
  continues the run;
- the decider that lost gets `approval already decided: <decision> by <by>` (HTTP 409
  `already_decided`, `fim approvals` exit 1, a RunError from a resume) and resumes or
  queues nothing, for a human node and for an agent's tool approval alike.

Each race is driven by making both deciders read the approval before either writes (a
barrier on `Store.get_approval`), never by timing.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import typer
from typer.testing import CliRunner

from fim.build.compile import compile_project
from fim.build.reload import SnapshotHolder
from fim.build.snapshot import Snapshot
from fim.capabilities import CAPABILITIES
from fim.commands import approvals as approvals_command
from fim.errors import RunError
from fim.run.services import Services
from fim.server import routes
from fim.server.app import create_app
from fim.store import Approval, Store, get_store
from fim.store import approvals as approvals_store
from fim.testing.server import ServerThread
from fim.workflows.decision import decide
from fim.workflows.engine import WorkflowEngine, load_run

DENIED_NOTIFIES = """\
description: Needs a human; the customer is told either way
inputs:
  amount: {type: number}
nodes:
  approve:
    type: human
    prompt: "Refund {{ inputs.amount }}?"
    on_error: continue
  notify:
    type: tool
    tool: calculator
    needs: [approve]
    args: {expression: "0 - {{ inputs.amount }}"}
"""


@pytest.fixture
def both_read_first(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The next two `Store.get_approval` calls each return only once both have read: two
    deciders (tasks, server threads) both see the approval pending before either decides,
    the window a double click or a retry on another replica opens. Later reads pass."""
    barrier = threading.Barrier(2, timeout=30)
    original = Store.get_approval
    calls = iter(range(2))

    async def read(self: Store, approval_id: str) -> Approval | None:
        found = await original(self, approval_id)
        if next(calls, None) is not None:
            await asyncio.to_thread(barrier.wait)
        return found

    monkeypatch.setattr(Store, "get_approval", read)
    yield
    barrier.abort()  # a test that failed early must not leave a reader waiting


def _project(root: Path) -> Snapshot:
    (root / "workflows").mkdir(parents=True)
    (root / "fim.yaml").write_text('name: once\nstate: "sqlite:///.fim/state.db"\n')
    (root / "workflows/refund.yaml").write_text(DENIED_NOTIFIES)
    return compile_project(root)


def _services(snapshot: Snapshot, store_url: str) -> Services:
    return Services(providers=CAPABILITIES, root=snapshot.root, state_url=store_url)


async def _paused(snapshot: Snapshot, services: Services) -> tuple[str, str]:
    """Run `refund` to its human node: (run id, the node's approval id)."""
    engine = WorkflowEngine(snapshot, "refund", services)
    async for _event in engine.run({"amount": 40}):
        pass
    assert engine.state is not None and engine.state.status == "paused"
    state = await load_run(services, engine.run_id)
    approval_id = state.nodes["approve"].approval_id
    assert approval_id is not None
    return engine.run_id, approval_id


# ------------------------------------------------------------------------------ store


async def test_of_two_stores_deciding_one_approval_at_once_exactly_one_changes_it(
    store_url: str,
) -> None:
    first, second = Store(store_url), Store(store_url)  # two replicas' views of one database
    try:
        approval_id = await first.create_approval("r", "a", "t", {}, "why", None, kind="x")
        a, b = await asyncio.gather(
            first.decide_approval(approval_id, False, by="api:a"),
            second.decide_approval(approval_id, False, by="api:b"),
        )
    finally:
        first.close()
        second.close()
    assert sorted([a.changed, b.changed]) == [False, True]
    winner, loser = (a, b) if a.changed else (b, a)
    assert winner.approval is not None and loser.approval is not None
    # the loser is shown what the winner decided, never its own decision
    assert loser.approval == winner.approval
    assert winner.approval.resolved_by in ("api:a", "api:b")


async def test_a_decision_made_between_the_read_and_the_write_is_reported_not_overwritten(
    store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = Store(store_url)
    try:
        approval_id = await store.create_approval("r", "a", "t", {}, "why", None, kind="x")
        stale = await store.get_approval(approval_id)
        assert await store.resolve_approval(approval_id, True, by="api:winner") is not None
        # this decider read the approval before the winner wrote: only the conditional
        # UPDATE can tell it lost
        real = approvals_store._approval
        reads = iter([stale])
        monkeypatch.setattr(
            approvals_store, "_approval", lambda conn, i: next(reads, None) or real(conn, i)
        )
        lost = await store.decide_approval(approval_id, False, by="api:loser", data={"n": 1})
        monkeypatch.undo()
        now = await store.get_approval(approval_id)
    finally:
        store.close()
    assert lost.changed is False
    assert lost.approval is not None and lost.approval.resolved_by == "api:winner"
    assert now is not None and (now.status, now.resolved_by) == ("approved", "api:winner")
    assert "n" not in now.data


async def test_a_decision_is_claimed_once_whatever_it_is(store_url: str) -> None:
    store = Store(store_url)
    try:
        denied = await store.create_approval("r", "a", "t", {}, "why", None, kind="workflow")
        assert await store.claim_decision(denied) is False  # pending: nothing to act on
        await store.resolve_approval(denied, False, by="api")
        claims = [await store.claim_decision(denied), await store.claim_decision(denied)]
        # a tool call's approval still allows one call only when approved
        tool = await store.create_approval("r", "a", "t", {}, "why", None, kind="x")
        await store.resolve_approval(tool, False, by="api")
        consumed = await store.consume_approval(tool)
    finally:
        store.close()
    assert claims == [True, False]
    assert consumed is False


# -------------------------------------------------------------------- workflow resume


@pytest.mark.parametrize(
    ("first", "second"), [(False, False), (True, False)], ids=["deny+deny", "approve+deny"]
)
async def test_two_processes_deciding_a_human_node_at_once_resume_it_once(
    tmp_path: Path, store_url: str, both_read_first: None, first: bool, second: bool
) -> None:
    snapshot = _project(tmp_path)
    services_a, services_b = _services(snapshot, store_url), _services(snapshot, store_url)
    try:
        run_id, approval_id = await _paused(snapshot, services_a)
        decl = snapshot.workflows["refund"]
        # `WorkflowEngine.resume` in replica A and in replica B, each given a decision
        outcomes = await asyncio.gather(
            decide(get_store(services_a), decl, run_id, "approve", approval_id, first, None, "a"),
            decide(get_store(services_b), decl, run_id, "approve", approval_id, second, None, "b"),
            return_exceptions=True,
        )
        stored = await get_store(services_a).get_approval(approval_id)
    finally:
        await services_a.aclose()
        await services_b.aclose()
    errors = [o for o in outcomes if isinstance(o, BaseException)]
    continued = [o for o in outcomes if not isinstance(o, BaseException)]
    assert len(continued) == 1 and len(errors) == 1, outcomes
    [(approval, _given)] = continued
    [error] = errors
    assert stored is not None and stored.consumed_at is not None
    assert approval.resolved_by == stored.resolved_by  # the winner continues its own decision
    assert isinstance(error, RunError)
    assert error.message == f"approval already decided: {stored.status} by {stored.resolved_by}"


async def test_a_second_resume_of_a_denied_node_is_refused(tmp_path: Path, store_url: str) -> None:
    snapshot = _project(tmp_path)
    services = _services(snapshot, store_url)
    try:
        run_id, approval_id = await _paused(snapshot, services)
        store, decl = get_store(services), snapshot.workflows["refund"]
        await store.resolve_approval(approval_id, False, by="api")  # e.g. `fim approvals deny`
        # `fim workflow resume RUN` in two shells, each with the decision recorded
        await decide(store, decl, run_id, "approve", approval_id, None, None, "cli:a")
        with pytest.raises(RunError, match="already resumed at 'approve' by another process"):
            await decide(store, decl, run_id, "approve", approval_id, None, None, "cli:b")
    finally:
        await services.aclose()


# ------------------------------------------------------------------------------- HTTP


def _post_both(urls: list[str], approval_id: str, decision: str) -> list[httpx.Response]:
    async def both() -> list[httpx.Response]:
        async with httpx.AsyncClient(timeout=60) as client:
            return list(
                await asyncio.gather(
                    *(
                        client.post(
                            f"{url}/v1/approvals/{approval_id}",
                            json={"decision": decision, "by": f"replica {n}"},
                        )
                        for n, url in enumerate(urls)
                    )
                )
            )

    return asyncio.run(both())


async def test_over_http_the_replica_that_lost_a_denial_answers_409_and_resumes_nothing(
    tmp_path: Path, store_url: str, both_read_first: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    snapshot = _project(tmp_path)
    setup = _services(snapshot, store_url)
    replicas = [_services(snapshot, store_url), _services(snapshot, store_url)]
    resumed: list[str] = []

    def resume(api: Any, approval: Approval, *args: Any) -> str:  # the run, continued here
        resumed.append(approval.run_id)
        return approval.run_id

    async def not_queued(api: Any, run_id: str) -> bool:
        return False

    monkeypatch.setattr(routes, "_resume_workflow", resume)
    monkeypatch.setattr(routes, "requeue_decided", not_queued)
    try:
        run_id, approval_id = await _paused(snapshot, setup)
        apps = [create_app(SnapshotHolder(snapshot), services) for services in replicas]
        with ServerThread(apps[0]) as a, ServerThread(apps[1]) as b:
            replies = await asyncio.to_thread(_post_both, [a.url, b.url], approval_id, "deny")
        stored = await get_store(setup).get_approval(approval_id)
    finally:
        for services in (setup, *replicas):
            await services.aclose()
    assert sorted(r.status_code for r in replies) == [200, 409], [r.text for r in replies]
    [won] = [r for r in replies if r.status_code == 200]
    [lost] = [r for r in replies if r.status_code == 409]
    assert stored is not None and stored.status == "denied"
    assert won.json()["resumed_run"] == run_id
    assert won.json()["approval"]["resolved_by"] == stored.resolved_by
    assert lost.json()["error"]["code"] == "already_decided"
    assert lost.json()["error"]["message"].startswith(
        f"approval already decided: denied by {stored.resolved_by}"
    )
    assert resumed == [run_id]  # one replica continues the run


async def test_an_agents_tool_approval_decided_twice_at_once_answers_one_200(
    tmp_path: Path, store_url: str, both_read_first: None
) -> None:
    snapshot = _project(tmp_path)
    setup, served = _services(snapshot, store_url), _services(snapshot, store_url)
    try:
        store = get_store(setup)  # the agent run's confirm hook asks (it waits in this process)
        approval_id = await store.create_approval(
            "r1", "support", "crm__create_lead", {"name": "Ada"}, "confirm", None, kind="tool"
        )
        # two requests interleaving on one server (a double click)
        with ServerThread(create_app(SnapshotHolder(snapshot), served)) as srv:
            replies = await asyncio.to_thread(_post_both, [srv.url, srv.url], approval_id, "deny")
        stored = await store.get_approval(approval_id)
    finally:
        await setup.aclose()
        await served.aclose()
    assert sorted(r.status_code for r in replies) == [200, 409], [r.text for r in replies]
    [lost] = [r for r in replies if r.status_code == 409]
    assert stored is not None and stored.status == "denied"
    assert lost.json()["error"]["message"].startswith(
        f"approval already decided: denied by {stored.resolved_by}"
    )


# -------------------------------------------------------------------------------- CLI


async def test_fim_approvals_deny_that_lost_the_race_says_so_and_queues_nothing(
    tmp_path: Path, store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    snapshot = _project(tmp_path)
    services = _services(snapshot, store_url)
    try:
        _run_id, approval_id = await _paused(snapshot, services)
        store = get_store(services)
        stale = await store.get_approval(approval_id)
        await store.resolve_approval(approval_id, False, by="api:key:1a2b")  # a replica won
    finally:
        await services.aclose()
    queued: list[str] = []

    async def requeue(store: Store, run_id: str) -> bool:
        queued.append(run_id)
        return True

    async def read(self: Store, approval_id: str) -> Approval | None:  # read before the win
        return stale

    monkeypatch.setattr(approvals_command, "_requeue", requeue)
    monkeypatch.setattr(Store, "get_approval", read)
    app = typer.Typer()
    approvals_command.register(app)
    args = ["approvals", "deny", approval_id, "--state", store_url]
    result = await asyncio.to_thread(CliRunner().invoke, app, args)
    assert result.exit_code == 1, result.output
    assert f"approval {approval_id} is already denied by api:key:1a2b" in result.output
    assert "nothing was changed" in result.output
    assert queued == []
