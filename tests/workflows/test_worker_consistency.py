"""`fim worker` and the servers that queue its jobs stay consistent (attack-17 #2, #3, #4).

- A queued run never runs on a snapshot older than the one that accepted it: the worker
  reloads like `fim serve`, runs on a snapshot it knows is not older, and otherwise fails
  the run with `snapshot skew` (fim.workflows.skew).
- A background run's request (the caller's words, secrets included) is not in the job's
  arguments, which procrastinate keeps; it waits in `fim_run_requests` until the run ends,
  and finished jobs go with `retention.runs`.
- One worker's `--stalled-after` never re-queues the live jobs of a worker with a slower
  heartbeat: each job is judged by its own worker's recorded bound.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

from fim.build.compile import compile_project
from fim.build.reload import SnapshotHolder
from fim.capabilities import CAPABILITIES
from fim.cli import app as cli
from fim.commands.worker import worker_snapshots
from fim.config.schema import Retention
from fim.run.queued import mark_queued, request_data
from fim.run.services import Services
from fim.server.app import create_app
from fim.store import get_store
from fim.store.retention import prune
from fim.testing.server import ServerThread
from fim.types import Message
from fim.workflows.admission import run_queued_agent
from fim.workflows.durable import (
    advance,
    defer_workflow,
    ensure_schema,
    make_app,
    queue_pruner,
)
from fim.workflows.queue_rows import QUEUE, prune_bound, record_worker, retry_stalled_jobs
from fim.workflows.skew import WorkerSnapshots, accepted_under

PLAIN = 'name: w\nstate: "sqlite:///.fim/state.db"\n'
WRITER = {
    "fim.yaml": PLAIN,
    "w.yaml": (
        "- tool_calls: [{name: file_ops, arguments: "
        '{operation: write, path: pwned.txt, content: "x"}}]\n'
        "- text: done\n"
    ),
    "agents/writer.yaml": "description: d\nmodel: scripted:w.yaml\ntools: [file_ops]\n",
    "workflows/f.yaml": (
        "nodes:\n  write: {type: agent, agent: writer, input: go}\n"
        'outputs:\n  said: "{{ nodes.write.output }}"\n'
    ),
}


def _write(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def _locked_down(root: Path) -> tuple[Any, Any]:
    """The worker's start-up snapshot, then the operator's `read_only: true` the server
    reloaded (and accepts jobs under)."""
    started = compile_project(root)
    (root / "fim.yaml").write_text(PLAIN + "read_only: true\n")
    return started, compile_project(root)


async def _run_agent(
    root: Path, snapshot: Any, request: dict[str, Any], resolve: Any = None
) -> Any:
    services = Services(providers=CAPABILITIES, root=root, state_url=snapshot.project.state)
    try:
        await mark_queued(services, "r1", "agent", "writer", {"output": None, "events": []})
        await run_queued_agent(snapshot, services, "r1", "writer", request, resolve=resolve)
        return await get_store(services).get_run("r1")
    finally:
        await services.aclose()


def _wrote(root: Path, record: Any) -> bool:
    results = [e["content"] for e in record.data.get("events", []) if e["type"] == "tool_result"]
    return bool(list((root / ".fim").rglob("pwned.txt"))) or any(
        r.startswith("wrote") for r in results
    )


async def test_a_worker_behind_reloads_its_folder_and_runs_the_job_on_the_accepting_snapshot(
    tmp_path: Path,
) -> None:
    root = _write(tmp_path / "p", WRITER)
    started, served = _locked_down(root)
    holder = SnapshotHolder(started)  # its watcher has not seen the edit yet
    snapshots = worker_snapshots(holder, None, reload=True, wait=5.0)
    request = {
        **request_data([Message(role="user", content="go")], None, "", served),
        **accepted_under(served),
    }
    record = await _run_agent(root, started, request, snapshots.for_job)
    assert holder.current.version == served.version  # reloaded before the job ran
    assert record.data["snapshot"] == served.version
    assert not _wrote(root, record)  # read_only held: the write was blocked


async def test_a_job_from_a_snapshot_the_worker_cannot_reach_fails_with_snapshot_skew(
    tmp_path: Path,
) -> None:
    server_root = _write(tmp_path / "server", WRITER)
    _, served = _locked_down(server_root)
    worker_root = _write(tmp_path / "worker", WRITER)  # another host's copy, not updated
    stale = compile_project(worker_root)
    snapshots = worker_snapshots(SnapshotHolder(stale), None, reload=True, wait=0.05)
    accepted = {"snapshot": served.version, "origin": f"other-host:{server_root}"}
    request = {**request_data([Message(role="user", content="go")], None, "", served), **accepted}
    record = await _run_agent(worker_root, stale, request, snapshots.for_job)
    assert record.status == "failed"
    assert record.data["error"].startswith(f"snapshot skew: the run was accepted on snapshot "
                                           f"{served.version} (from other-host:")  # fmt: skip
    assert not [e for e in record.data.get("events", []) if e["type"] == "llm_call"]
    assert not _wrote(worker_root, record)


async def test_a_job_accepted_before_an_edit_runs_on_the_workers_newer_snapshot(
    tmp_path: Path,
) -> None:
    root = _write(tmp_path / "p", WRITER)
    before, after = _locked_down(root)
    holder = SnapshotHolder(before)
    snapshots = worker_snapshots(holder, None, reload=True, wait=0.0)
    holder.swap(after)  # its watcher applied the edit after the server accepted the job
    # having held `before` proves nothing (content comes back: attack-18 #4); it recompiles
    # the folder the job was accepted from, after the job existed, so it is not older
    assert (await snapshots.for_job(accepted_under(before))).version == after.version
    # the same once restarted (no memory of `before`)
    restarted = worker_snapshots(SnapshotHolder(after), None, reload=True, wait=0.0)
    assert await restarted.for_job(accepted_under(before)) is restarted.holder.current


async def test_a_no_reload_worker_runs_only_jobs_of_its_own_snapshot(tmp_path: Path) -> None:
    root = _write(tmp_path / "p", WRITER)
    started, served = _locked_down(root)
    snapshots = worker_snapshots(SnapshotHolder(started), None, reload=False, wait=60.0)
    assert await snapshots.for_job(accepted_under(started)) is started
    assert await snapshots.for_job(None) is started  # a job queued by an older fim
    with pytest.raises(Exception, match="snapshot skew"):
        await snapshots.for_job(accepted_under(served))


async def test_a_workflow_job_accepted_on_a_newer_snapshot_fails_before_any_node(
    tmp_path: Path,
) -> None:
    root = _write(tmp_path / "p", WRITER)
    started, served = _locked_down(root)
    state = started.project.state
    accepted = {"snapshot": served.version, "origin": f"other-host:{root}"}
    status = await advance(started, state, "w1", "f", {}, providers=CAPABILITIES, accepted=accepted)
    services = Services(providers=CAPABILITIES, root=root, state_url=state)
    try:
        record = await get_store(services).get_run("w1")
    finally:
        await services.aclose()
    assert status == "failed" and record is not None and record.status == "failed"
    assert record.data["error"].startswith("snapshot skew:")
    assert not record.data.get("nodes") and not list((root / ".fim").rglob("pwned.txt"))


def test_a_worker_refuses_a_stalled_bound_shorter_than_three_heartbeats(tmp_path: Path) -> None:
    root = _write(tmp_path / "p", WRITER)
    said = CliRunner().invoke(
        cli, ["-p", str(root), "worker", "--heartbeat", "10", "--stalled-after", "5"]
    )
    assert said.exit_code != 0
    assert "--stalled-after 5 is less than 3 heartbeats (--heartbeat 10)" in said.output


# --------------------------------------------------------------------- PostgreSQL


def _pg_project(root: Path, url: str) -> Path:
    return _write(
        root,
        {
            "fim.yaml": f'name: s\nstate: "{url}"\nserver: {{api_keys: [key-a]}}\n',
            "s.yaml": '- text: "hi"\n',
            "agents/a.yaml": "description: d\nmodel: scripted:s.yaml\n",
            "connectors/crm.yaml": (
                "kind: http\ndescription: crm\nbase_url: http://127.0.0.1:9\n"
                'auth: {type: bearer, token: "${WC_CRM_TOKEN}"}\n'
                "actions:\n  get: {description: get, method: GET, path: /x}\n"
            ),
        },
    )


def _rows(url: str, query: str) -> list[Any]:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        cursor = conn.execute(query)
        return list(cursor) if cursor.description is not None else []


async def test_a_background_runs_request_waits_outside_the_job_and_goes_when_the_run_ends(
    tmp_path: Path, pg_database: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = "sk-live-worker-consistency-0123456789"
    monkeypatch.setenv("WC_CRM_TOKEN", secret)
    db = pg_database("")
    root = _pg_project(tmp_path / "p", db.owner_url)
    snapshot = compile_project(root)
    with ServerThread(create_app(SnapshotHolder(snapshot))) as srv:
        answer = httpx.post(
            f"{srv.url}/v1/agents/a/runs",
            json={"input": f"my token is {secret}", "background": True},
            headers={"Authorization": "Bearer key-a"},
            timeout=30,
        )
    assert answer.status_code == 202, answer.text
    run_id = answer.json()["run_id"]
    [args] = [str(r[0]) for r in _rows(db.owner_url, "SELECT args::text FROM procrastinate_jobs")]
    assert secret not in args and "my token" not in args  # ids and the snapshot only
    assert snapshot.version in args
    [request] = [str(r[0]) for r in _rows(db.owner_url, "SELECT request FROM fim_run_requests")]
    assert secret in request  # the run needs the caller's words: kept until it ends

    holder = SnapshotHolder(snapshot)
    snapshots = WorkerSnapshots(holder, origin="worker-host:/srv/p", wait=0.0)
    app = make_app(
        snapshot.project.state, lambda: holder.current, providers=CAPABILITIES,
        resolve=snapshots.for_job,
    )  # fmt: skip
    async with app.open_async():
        await app.run_worker_async(queues=[QUEUE], wait=False, install_signal_handlers=False)
    services = Services(providers=CAPABILITIES, root=root, state_url=snapshot.project.state)
    try:
        record = await get_store(services).get_run(run_id)
    finally:
        await services.aclose()
    assert record is not None and record.status == "ok", record
    assert _rows(db.owner_url, "SELECT run_id FROM fim_run_requests") == []


async def test_finished_queue_jobs_go_with_the_runs_retention(
    tmp_path: Path, pg_database: Any
) -> None:
    db = pg_database("")
    root = _pg_project(tmp_path / "p", db.owner_url)
    snapshot = compile_project(root)
    app = make_app(snapshot.project.state, lambda: snapshot, providers=CAPABILITIES)
    async with app.open_async():
        await ensure_schema(app)
        for run_id in ("old", "new"):
            request = request_data([Message(role="user", content="hi")], None, "", snapshot)
            await mark_queued(
                Services(root=root, state_url=snapshot.project.state), run_id, "agent", "a", {}
            )
            await app.configure_task("fim.run_agent", queueing_lock=run_id).defer_async(
                run_id=run_id, agent="a", request={**request, **accepted_under(snapshot)}
            )
        await app.run_worker_async(queues=[QUEUE], wait=False, install_signal_handlers=False)
    _rows(
        db.owner_url,
        "UPDATE procrastinate_events SET at = at - interval '3 days' WHERE job_id IN "
        "(SELECT id FROM procrastinate_jobs WHERE args->>'run_id' = 'old')",
    )
    store = get_store(Services(root=root, state_url=snapshot.project.state))
    pruner = queue_pruner(store.url)
    assert pruner is not None
    counted = await prune(store, Retention(runs=2), dry_run=True, jobs=pruner)
    assert counted.jobs == 1
    done = await prune(store, Retention(runs=2), jobs=pruner)
    assert done.jobs == 1 and done.as_dict()["jobs"] == 1
    left = _rows(
        db.owner_url,
        "SELECT args->>'run_id', status FROM procrastinate_jobs WHERE task_name = 'fim.run_agent'",
    )
    assert left == [("new", "succeeded")]


async def test_a_short_stalled_bound_never_requeues_a_live_job_of_a_slower_worker(
    tmp_path: Path, pg_database: Any
) -> None:
    db = pg_database("")
    root = _pg_project(tmp_path / "p", db.owner_url)
    snapshot = compile_project(root)
    app = make_app(snapshot.project.state)
    async with app.open_async():
        await ensure_schema(app)
        slow = await app.job_manager.register_worker()  # --heartbeat 20 --stalled-after 60
        await record_worker(app, slow, 60.0)
        await app.configure_task("fim.run_agent", queueing_lock="r1").defer_async(
            run_id="r1", agent="a", request={}
        )
        job = await app.job_manager.fetch_job([QUEUE], slow)
        assert job is not None

        def beat(seconds_ago: int) -> None:
            _rows(
                db.owner_url,
                f"UPDATE procrastinate_workers SET last_heartbeat = now() - "
                f"interval '{seconds_ago} seconds' WHERE id = {slow}",
            )

        beat(15)  # between two of its heartbeats
        # another worker started with --stalled-after 5 takes the periodic retry
        assert await retry_stalled_jobs(app, 5.0) == 0
        assert await prune_bound(app, 5.0) == 60.0  # its start-up prune spares it too
        beat(90)  # silent past its own bound: dead
        assert await retry_stalled_jobs(app, 5.0) == 1
    [(status,)] = _rows(db.owner_url, "SELECT status FROM procrastinate_jobs")
    assert status == "todo"


async def test_a_queued_workflows_inputs_wait_outside_its_job(
    tmp_path: Path, pg_database: Any
) -> None:
    db = pg_database("")
    root = _pg_project(tmp_path / "p", db.owner_url)
    app = make_app(compile_project(root).project.state)
    async with app.open_async():
        await ensure_schema(app)
        await defer_workflow(app, "w1", "f", {"token": "sk-live-inputs-0123456789"})
    [args] = [str(r[0]) for r in _rows(db.owner_url, "SELECT args::text FROM procrastinate_jobs")]
    assert "sk-live-inputs" not in args
    [request] = [str(r[0]) for r in _rows(db.owner_url, "SELECT request FROM fim_run_requests")]
    assert "sk-live-inputs" in request  # read by the job that starts the run, then deleted
