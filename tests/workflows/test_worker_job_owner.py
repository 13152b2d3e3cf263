"""A worker writes a job's end only while the job is still its own.

A worker whose store hung sends its cut job's end into the held connection; meanwhile the
stalled-job retry of another worker hands the job on and that worker fetches it. The held
write landing afterwards used to end the other worker's run of the job under it, or queue
it a third time (`retry_job_v2` takes a `failed` job too). The writes now name the worker
that fetched the job, and a job another worker holds is left as it is."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
from procrastinate.jobs import Status

from fim.build.compile import compile_project
from fim.workflows.durable import ensure_schema, make_app
from fim.workflows.job_owner import own_writes
from fim.workflows.queue_rows import QUEUE


def _rows(url: str, query: str) -> list[Any]:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        cursor = conn.execute(query)
        return list(cursor) if cursor.description is not None else []


def _app(tmp_path: Path, db: Any) -> Any:
    """The queue of a project whose state store is `db`."""
    root = tmp_path / "p"
    root.mkdir()
    (root / "fim.yaml").write_text(f'name: owner\nstate: "{db.owner_url}"\n')
    return make_app(compile_project(root).project.state)


@pytest.mark.parametrize("write", ["finish", "retry"])
async def test_a_late_write_of_a_job_another_worker_took_leaves_it_to_that_worker(
    tmp_path: Path, pg_database: Any, write: str, caplog: pytest.LogCaptureFixture
) -> None:
    db = pg_database("")
    app = _app(tmp_path, db)
    async with app.open_async():
        await ensure_schema(app)
        own_writes(app)
        a = await app.job_manager.register_worker()
        b = await app.job_manager.register_worker()
        await app.configure_task("fim.run_agent", queueing_lock="r1").defer_async(
            run_id="r1", agent="a", request={}
        )
        on_a = await app.job_manager.fetch_job([QUEUE], a)
        assert on_a is not None and on_a.worker_id == a
        # A went silent; the stalled-job retry queued the job again and B fetched it
        _rows(db.owner_url, "UPDATE procrastinate_jobs SET status = 'todo'")
        on_b = await app.job_manager.fetch_job([QUEUE], b)
        assert on_b is not None and on_b.id == on_a.id

        with caplog.at_level(logging.WARNING, logger="fim.worker"):
            if write == "finish":  # A's held write lands
                await app.job_manager.finish_job(job=on_a, status=Status.FAILED, delete_job=False)
            else:
                await app.job_manager.retry_job(job=on_a)
        [(status, worker)] = _rows(db.owner_url, "SELECT status, worker_id FROM procrastinate_jobs")
        assert (status, worker) == ("doing", b)  # still B's run, going on
        assert f"job {on_a.id} is no longer this worker's" in caplog.text

        await app.job_manager.finish_job(job=on_b, status=Status.SUCCEEDED, delete_job=False)
        [(status,)] = _rows(db.owner_url, "SELECT status FROM procrastinate_jobs")
        assert status == "succeeded"  # the owner's own write lands


async def test_a_worker_still_holding_its_job_retries_it(tmp_path: Path, pg_database: Any) -> None:
    db = pg_database("")
    app = _app(tmp_path, db)
    async with app.open_async():
        await ensure_schema(app)
        own_writes(app)
        a = await app.job_manager.register_worker()
        await app.configure_task("fim.run_agent", queueing_lock="r2").defer_async(
            run_id="r2", agent="a", request={}
        )
        job = await app.job_manager.fetch_job([QUEUE], a)
        assert job is not None
        await app.job_manager.retry_job(job=job, priority=5)
    [(status, priority, attempts)] = _rows(
        db.owner_url, "SELECT status, priority, attempts FROM procrastinate_jobs"
    )
    assert (status, priority, attempts) == ("todo", 5, 1)
