"""A key's runs queued for `fim worker` (PostgreSQL) keep the key's rules after the request
that queued them was answered (attack-9, docs/security.md):

- `server.key_limits.max_parallel_runs` is a number of procrastinate lanes: a worker never
  runs more of one key's jobs at once, and another key's job is taken next rather than
  queued behind the first key's backlog;
- a run whose key was removed from fim.yaml before it started does not start: it ends
  `cancelled`, saying why; a tenant's run survives the rotation of the tenant's key;
- an MCP call of a workflow node sends the node's idempotency key in `_meta`;
- a workflow run resumed on another snapshot says so in its record.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from fim.build.compile import compile_project
from fim.build.reload import SnapshotHolder
from fim.capabilities import CAPABILITIES
from fim.commands.workflow_view import finish as _finish
from fim.config.schema import ServerSettings
from fim.idempotency import idempotent
from fim.mcp.calls import IDEMPOTENCY_META, request_meta
from fim.run.services import Services
from fim.server.app import create_app
from fim.store import get_store
from fim.store.owners import REVOKED, claim, key_owner, still_configured
from fim.testing.server import ServerThread
from fim.workflows.durable import (
    advance,
    defer_agent,
    defer_workflow,
    ensure_schema,
    make_app,
    requeue_decided,
)
from fim.workflows.engine import WorkflowEngine, load_run

A, B = key_owner(b"key-a"), key_owner(b"key-b")


def _write(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def _keyed(root: Path, state: str, limits: str, agent: str = "") -> Path:
    return _write(
        root,
        {
            "fim.yaml": (
                f'name: q\nstate: "{state}"\n'
                f"server: {{api_keys: [key-a, key-b], key_limits: {{{limits}}}}}\n"
            ),
            "s.yaml": '- text: "hi"\n',
            "agents/slow.yaml": f"description: d\nmodel: scripted:s.yaml\n{agent}",
        },
    )


def _post(url: str, key: str, times: int) -> list[int]:
    return [
        httpx.post(
            f"{url}/v1/agents/slow/runs",
            json={"input": "x", "background": True},
            headers={"Authorization": f"Bearer {key}"},
            timeout=30,
        ).status_code
        for _ in range(times)
    ]


async def _jobs(url: str) -> list[dict[str, Any]]:
    app = make_app(url)
    async with app.open_async():
        return list(
            await app.connector.execute_query_all_async(
                "SELECT id, lock, args, status FROM procrastinate_jobs ORDER BY id"
            )
        )


def _owner(job: dict[str, Any]) -> str:
    return str(job["args"]["request"]["owner"])


async def test_a_worker_takes_another_keys_run_before_the_backlog_of_a_key_at_its_limit(
    tmp_path: Path, pg_database: Any
) -> None:
    db = pg_database("")
    root = _keyed(tmp_path / "p", db.owner_url, "max_parallel_runs: 1")
    with ServerThread(create_app(SnapshotHolder(compile_project(root)))) as srv:
        assert _post(srv.url, "key-a", 3) + _post(srv.url, "key-b", 1) == [202] * 4
    app = make_app(db.owner_url)
    async with app.open_async():
        worker = await app.job_manager.register_worker()
        first = await app.job_manager.fetch_job(None, worker)
        second = await app.job_manager.fetch_job(None, worker)
        third = await app.job_manager.fetch_job(None, worker)
    assert first is not None and second is not None
    assert first.task_kwargs["request"]["owner"] == A  # the oldest job ...
    assert second.task_kwargs["request"]["owner"] == B  # ... then B's, not A's second
    assert third is None  # A's other runs wait for its one lane


async def test_a_keys_queued_runs_share_as_many_lanes_as_its_max_parallel_runs(
    tmp_path: Path, pg_database: Any
) -> None:
    db = pg_database("")
    root = _keyed(tmp_path / "p", db.owner_url, "max_parallel_runs: 2")
    with ServerThread(create_app(SnapshotHolder(compile_project(root)))) as srv:
        assert _post(srv.url, "key-a", 5) + _post(srv.url, "key-b", 2) == [202] * 7
    jobs = await _jobs(db.owner_url)
    lanes = {owner: {j["lock"] for j in jobs if _owner(j) == owner} for owner in (A, B)}
    assert lanes[A] == {f"fim:key:{A}:0", f"fim:key:{A}:1"}
    assert lanes[B] == {f"fim:key:{B}:0", f"fim:key:{B}:1"}


async def test_an_agent_with_its_own_concurrency_gives_each_key_its_share_of_its_lanes(
    tmp_path: Path, pg_database: Any
) -> None:
    db = pg_database("")
    root = _keyed(tmp_path / "p", db.owner_url, "max_parallel_runs: 1", "concurrency: 3\n")
    with ServerThread(create_app(SnapshotHolder(compile_project(root)))) as srv:
        assert _post(srv.url, "key-a", 4) == [202] * 4
    jobs = await _jobs(db.owner_url)
    locks = {j["lock"] for j in jobs}
    assert len(locks) == 1  # the key's share: one lane ...
    assert locks <= {f"fim:agent:slow:{i}" for i in range(3)}  # ... of the agent's three


async def test_a_decided_run_continues_in_the_lane_its_key_had(
    tmp_path: Path, pg_database: Any
) -> None:
    # deferred: a third-party package, needed by this test only
    from procrastinate.jobs import Status

    db = pg_database("")
    services = Services(root=tmp_path, state_url=db.owner_url, providers=CAPABILITIES)
    app = make_app(db.owner_url)
    try:
        store = get_store(services)
        paused = {"run_id": "r1", "workflow": "f", "decl": {}, "inputs": {}, "nodes": {}}
        await store.put_run("r1", "workflow", "f", "paused", {**paused, "queued": True})
        async with app.open_async():
            await ensure_schema(app)
            job = await defer_workflow(app, "r1", "f", {}, owner=A, key_limit=3)
            await app.job_manager.finish_job_by_id_async(job, Status.SUCCEEDED, False)
            await defer_workflow(app, "other", "f", {}, owner=A, key_limit=3)  # lane 0 busy
            assert await requeue_decided(app, store, "r1")
            rows = await app.connector.execute_query_all_async(
                "SELECT lock FROM procrastinate_jobs WHERE queueing_lock = 'r1' ORDER BY id"
            )
    finally:
        await services.aclose()
    assert [row["lock"] for row in rows] == [f"fim:key:{A}:0"] * 2


async def test_an_agent_run_without_any_limit_keeps_its_own_lock(
    tmp_path: Path, pg_database: Any
) -> None:
    db = pg_database("")
    app = make_app(db.owner_url)
    async with app.open_async():
        await ensure_schema(app)
        await defer_agent(app, "r1", "slow", {"owner": A})
        [row] = await app.connector.execute_query_all_async("SELECT lock FROM procrastinate_jobs")
    assert row["lock"] == "r1"


REVOKED_PROJECT = {
    "s.yaml": '- text: "spent"\n',
    "agents/a.yaml": "description: d\nmodel: scripted:s.yaml\n",
    "workflows/f.yaml": "nodes:\n  work: {type: agent, agent: a, input: go}\n",
}


async def _queued_workflow(root: Path, keys: str, owner: str) -> tuple[str, Any]:
    """A queued workflow run claimed for `owner`, advanced as `fim worker` does once
    fim.yaml's `server:` is `keys`; the status and the record."""
    _write(root, {**REVOKED_PROJECT, "fim.yaml": f'name: r\nstate: "sqlite:///s.db"\n{keys}'})
    snapshot = compile_project(root)
    services = Services(providers=CAPABILITIES, root=root, state_url=snapshot.project.state)
    try:
        store = get_store(services)
        queued = {"run_id": "w1", "workflow": "f", "decl": {}, "inputs": {}, "nodes": {}}
        await store.put_run("w1", "workflow", "f", "queued", {**queued, "queued": True})
        if owner:
            await claim(store, "w1", owner)
        state = snapshot.project.state
        status = await advance(snapshot, state, "w1", "f", {}, providers=CAPABILITIES)
        return status, await store.get_run("w1")
    finally:
        await services.aclose()


async def test_a_queued_workflow_run_of_a_revoked_key_ends_cancelled_without_running(
    tmp_path: Path,
) -> None:
    status, record = await _queued_workflow(tmp_path, "server: {api_keys: [key-b]}\n", A)
    assert status == record.status == "cancelled"
    assert record.data["error"] == REVOKED
    assert record.data["nodes"] == {}  # no node ran


async def test_a_tenants_queued_run_survives_the_rotation_of_its_key(tmp_path: Path) -> None:
    rotated = "server: {api_keys: [{key: new-key, tenant: acme}]}\n"
    status, record = await _queued_workflow(tmp_path, rotated, key_owner(b"old-key", "acme"))
    assert status == "ok" and record.data["nodes"]["work"]["output"] == "spent"


async def test_a_run_queued_without_a_key_is_not_a_revoked_one(tmp_path: Path) -> None:
    status, _ = await _queued_workflow(tmp_path, "server: {api_keys: [key-b]}\n", "")
    assert status == "ok"


@pytest.mark.parametrize(
    ("server", "owner", "runs"),
    [
        ({"api_keys": ["key-a"]}, A, True),
        ({"api_keys": ["key-b"]}, A, False),
        ({"api_keys": [], "operator_keys": ["key-a"]}, A, True),
        ({"api_keys": [{"key": "key-b", "tenant": "t"}]}, key_owner(b"key-a", "t"), True),
        ({"api_keys": [{"key": "key-a", "tenant": "t"}]}, A, False),  # now the tenant's
        ({}, A, False),  # every key removed
        ({}, "", True),
    ],
)
def test_which_owners_a_fim_yaml_still_lets_run(
    server: dict[str, Any], owner: str, runs: bool
) -> None:
    assert still_configured(ServerSettings.model_validate(server), owner) is runs


def test_only_a_workflow_nodes_mcp_call_carries_an_idempotency_key() -> None:
    assert request_meta() is None  # an agent's own call: no node, no key
    with idempotent("k" * 32):
        assert request_meta() == {IDEMPOTENCY_META: "k" * 32}


async def test_a_run_resumed_on_its_own_snapshot_records_no_other_version(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = _write(
        tmp_path,
        {
            "fim.yaml": 'name: v\nstate: "sqlite:///s.db"\n',
            "s.yaml": '- text: "done"\n',
            "agents/w.yaml": "description: d\nmodel: scripted:s.yaml\n",
            "workflows/f.yaml": (
                "nodes:\n  ok: {type: human, prompt: go?}\n"
                "  work: {type: agent, agent: w, input: hi, needs: [ok]}\n"
            ),
        },
    )
    v1 = compile_project(root)
    services = Services(providers=CAPABILITIES, root=root, state_url=v1.project.state)
    try:
        first = WorkflowEngine(v1, "f", services)
        async for _ in first.run({}):
            pass
        async for _ in WorkflowEngine(v1, "f", services).resume(first.run_id, True):
            pass
        state = await load_run(services, first.run_id)
    finally:
        await services.aclose()
    assert state.status == "ok" and state.resumed_on == []
    _finish(state, as_json=True)
    shown = json.loads(capsys.readouterr().out)
    assert shown["snapshot_version"] == v1.version and "resumed_on" not in shown


async def test_a_revoked_keys_paused_run_is_cancelled_not_resumed_when_its_approval_is_decided(
    tmp_path: Path,
) -> None:
    """On SQLite (no queue) a decision resumes a paused workflow in the server's process,
    not through a worker's `advance`: the route checks the run's key as `advance` does, so
    an operator approving a revoked key's run cannot make it spend (attack-10 #8)."""
    keys = 'name: r\nstate: "sqlite:///s.db"\nserver: {{api_keys: [{}], operator_keys: [ops]}}\n'
    gated = (
        "nodes:\n  ok: {type: human, prompt: go?}\n"
        "  work: {type: agent, agent: a, input: go, needs: [ok]}\n"
    )
    root = _write(
        tmp_path, {**REVOKED_PROJECT, "workflows/g.yaml": gated, "fim.yaml": keys.format("key-a")}
    )
    holder = SnapshotHolder(compile_project(root))
    ops = {"Authorization": "Bearer ops"}
    with ServerThread(create_app(holder)) as srv:
        started = httpx.post(
            f"{srv.url}/v1/workflows/g/runs",
            json={"inputs": {}},
            headers={"Authorization": "Bearer key-a"},
            timeout=30,
        ).json()
        assert started["status"] == "paused"
        _write(root, {"fim.yaml": keys.format("key-b")})  # key-a revoked
        holder.swap(compile_project(root))
        [approval] = httpx.get(f"{srv.url}/v1/approvals", headers=ops).json()["approvals"]
        answer = httpx.post(
            f"{srv.url}/v1/approvals/{approval['id']}",
            json={"decision": "approve"},
            headers=ops,
            timeout=30,
        )
        listed = httpx.get(f"{srv.url}/v1/approvals?status=all", headers=ops)
        [after] = listed.json()["approvals"]
        run = httpx.get(f"{srv.url}/v1/runs/{started['run_id']}", headers=ops).json()
    assert answer.status_code == 409 and answer.json()["error"]["code"] == "revoked"
    assert after["status"] == "denied"
    assert run["status"] == "cancelled" and run["data"]["error"] == REVOKED
    assert run["data"]["nodes"]["work"]["status"] == "pending"  # the agent never ran
