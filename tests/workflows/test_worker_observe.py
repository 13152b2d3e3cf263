"""`fim worker` is watched like `fim serve` (newcomer-7 #9): `--log-format json` writes
every line as one JSON object (its start-up line a record with the store, fim's version,
the concurrency and the commit; procrastinate's lines; a snapshot-skew failure as a record
of its run with `outcome: skew`), and `--metrics-port` serves `/healthz` and `/metrics`
(jobs running, jobs by outcome). `fim serve`'s `/metrics` counts the queue's waiting and
running runs (`fim_queue_jobs`), so runs piling up with no worker can be alerted on."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import pytest

from fim.errors import RunError

WORKFLOW = """\
description: adds
nodes:
  add: {type: tool, tool: calculator, args: {expression: "1+1"}}
outputs:
  sum: "{{ nodes.add.output }}"
"""


def project(root: Path, state: str) -> Path:
    (root / "workflows").mkdir(parents=True)
    (root / "fim.yaml").write_text(f'name: watched\nstate: "{state}"\n')
    (root / "workflows" / "add.yaml").write_text(WORKFLOW)
    return root


async def queue_two_runs(root: Path) -> None:
    """One run accepted on a snapshot no worker has (it fails for snapshot skew), one on
    the project's own."""
    from fim.build.compile import compile_project
    from fim.workflows.durable import defer_workflow, ensure_schema, make_app

    app = make_app(compile_project(root).project.state)
    async with app.open_async():
        await ensure_schema(app)
        elsewhere = {"snapshot": "0" * 40, "origin": "elsewhere:/project"}
        await defer_workflow(app, "skewed", "add", {}, accepted=elsewhere)
        await defer_workflow(app, "fine", "add", {})


def ended(record: dict[str, Any]) -> str | None:
    """The run id of a job procrastinate reports as ended, else None."""
    if record.get("action") not in ("job_success", "job_error"):
        return None
    return str(record["job"]["task_kwargs"].get("run_id"))


def test_a_json_worker_logs_records_and_serves_health_and_job_outcomes(tmp_path, pg_database):
    db = pg_database("")
    root = project(tmp_path / "p", db.owner_url)
    asyncio.run(queue_two_runs(root))
    command = [
        sys.executable, "-m", "fim", "worker", "-p", str(root), "--no-reload",
        "--skew-wait", "0", "--log-format", "json", "--metrics-port", "0",
    ]  # fmt: skip
    worker = subprocess.Popen(command, stderr=subprocess.PIPE, text=True, env=os.environ)
    records: list[dict[str, Any]] = []
    try:
        assert worker.stderr is not None
        deadline = time.monotonic() + 60  # a bound on a hung worker, not a timing check
        done: set[str] = set()
        while done != {"skewed", "fine"} and time.monotonic() < deadline:
            line = worker.stderr.readline()
            assert line, "the worker ended early: " + json.dumps(records[-3:])
            records.append(json.loads(line))  # every line is JSON
            done.add(ended(records[-1]) or "")
            done.discard("")
        assert done == {"skewed", "fine"}
        banner = next(r for r in records if r["logger"] == "fim.worker")
        assert banner["message"].startswith("fim worker: ")
        assert banner["concurrency"] == 4 and banner["commit"] is None
        assert banner["store"].startswith("postgresql") and banner["fim_version"]
        url = banner["metrics_url"]
        assert url.startswith("http://127.0.0.1:")
        skew = [r for r in records if r.get("outcome") == "skew"]
        assert len(skew) == 1 and skew[0]["run_id"] == "skewed"
        assert skew[0]["level"] == "warning" and "snapshot skew" in skew[0]["message"]
        assert any(r["logger"].startswith("procrastinate") for r in records)
        health = httpx.get(url + "/healthz")
        assert health.status_code == 200 and health.json()["ok"] is True
        metrics = httpx.get(url + "/metrics").text
        assert 'fim_worker_jobs_total{outcome="skew"} 1.0' in metrics
        assert 'fim_worker_jobs_total{outcome="ok"} 1.0' in metrics
        assert "fim_worker_jobs_running 0.0" in metrics
    finally:
        worker.terminate()
        worker.wait(timeout=30)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_health_is_ok_only_while_the_loop_runs_and_its_heartbeat_is_recent():
    from starlette.testclient import TestClient

    from fim.observe.metrics import WorkerMetrics
    from fim.workflows.worker_watch import Health, endpoint_app

    clock = Clock()
    health = Health(stale_after=30.0, clock=clock)
    client = TestClient(endpoint_app(health, WorkerMetrics()))
    assert client.get("/healthz").status_code == 503  # not started yet
    health.start()
    assert client.get("/healthz").json()["ok"] is True
    clock.now += 31  # no heartbeat reached the queue for longer than --stalled-after
    stale = client.get("/healthz")
    assert stale.status_code == 503 and "no heartbeat for 31 s" in stale.json()["reason"]
    health.beat()
    assert client.get("/healthz").status_code == 200
    health.stop()
    assert client.get("/healthz").status_code == 503
    assert "fim_worker_jobs_running" in client.get("/metrics").text


def job(task: str = "fim.advance_workflow", shutdown: bool = False) -> Any:
    from procrastinate.job_context import AbortReason

    reason = AbortReason.SHUTDOWN if shutdown else AbortReason.USER_REQUEST
    return SimpleNamespace(
        job=SimpleNamespace(task_name=task, id=7, task_kwargs={"run_id": "r1"}),
        abort_reason=lambda: reason,
    )


def test_each_job_is_counted_by_its_outcome_as_fim_knows_it():
    from fim.observe.metrics import WorkerMetrics
    from fim.workflows.worker_watch import JobWatch, watch_resolve

    metrics = WorkerMetrics()
    watch = JobWatch(metrics)

    async def skewed(accepted: Any) -> Any:
        raise RunError("snapshot skew: ...")

    resolve = watch_resolve(skewed)

    async def refused() -> str:  # the task records the run failed, for skew
        with pytest.raises(RunError):
            await resolve({"snapshot": "x"})
        return "failed"

    async def returns(status: str) -> str:
        return status

    async def raises(exc: BaseException) -> str:
        raise exc

    async def scenario() -> None:
        await watch(lambda: returns("ok"), job(), None)
        await watch(lambda: returns("paused"), job(), None)
        await watch(lambda: returns("error"), job(), None)
        await watch(refused, job(), None)
        with pytest.raises(ValueError):
            await watch(lambda: raises(ValueError()), job(), None)
        with pytest.raises(asyncio.CancelledError):
            await watch(lambda: raises(asyncio.CancelledError()), job(), None)
        with pytest.raises(asyncio.CancelledError):  # the worker stops: delivered again
            await watch(lambda: raises(asyncio.CancelledError()), job(shutdown=True), None)
        await watch(lambda: returns(2), job("fim.retry_stalled"), None)  # type: ignore

    asyncio.run(scenario())

    def count(outcome: str) -> float:
        value = metrics.registry.get_sample_value("fim_worker_jobs_total", {"outcome": outcome})
        return value or 0.0

    assert {o: count(o) for o in ("ok", "paused", "failed", "skew", "cancelled", "retried")} == {
        "ok": 1, "paused": 1, "failed": 2, "skew": 1, "cancelled": 1, "retried": 1,
    }  # fmt: skip
    assert metrics.registry.get_sample_value("fim_worker_stalled_jobs_requeued_total") == 2
    assert metrics.registry.get_sample_value("fim_worker_jobs_running") == 0


def test_serve_metrics_count_the_queues_waiting_runs(tmp_path, pg_database):
    """No worker runs: the queued run waits in `todo`, and the server's scrape says so."""
    from fim.build.compile import compile_project
    from fim.build.reload import SnapshotHolder
    from fim.server.app import create_app
    from fim.testing.server import ServerThread

    db = pg_database("")
    root = project(tmp_path / "p", db.owner_url)
    asyncio.run(queue_two_runs(root))
    with ServerThread(create_app(SnapshotHolder(compile_project(root)))) as srv:
        text = httpx.get(f"{srv.url}/metrics").text
    assert 'fim_queue_jobs{status="todo"} 2.0' in text
    assert 'fim_queue_jobs{status="doing"} 0.0' in text


def test_serve_metrics_on_sqlite_have_no_queue(tmp_path):
    from fim.build.compile import compile_project
    from fim.build.reload import SnapshotHolder
    from fim.server.app import create_app
    from fim.testing.server import ServerThread

    root = project(tmp_path / "p", f"sqlite:///{tmp_path}/state.db")
    with ServerThread(create_app(SnapshotHolder(compile_project(root)))) as srv:
        text = httpx.get(f"{srv.url}/metrics").text
    assert "fim_runs" in text and "fim_queue_jobs" not in text


def test_the_endpoint_redirects_nowhere_a_host_header_names():
    """`/metrics/` was a 307 to `http://<the request's Host>/metrics` (attack-45 F3)."""
    from starlette.testclient import TestClient

    from fim.observe.metrics import WorkerMetrics
    from fim.workflows.worker_watch import Health, endpoint_app

    app = endpoint_app(Health(stale_after=30), WorkerMetrics())
    with TestClient(app) as client:
        answer = client.get("/metrics/", headers={"Host": "evil.example"}, follow_redirects=False)
    assert answer.status_code == 404
    assert "location" not in answer.headers
