"""`fim worker`'s seconds are numbers in a range, and one worker's row cannot stall the
others; a version a worker held before is not taken as older (attack-18 #3, #4).

- `--heartbeat`, `--stalled-after` and `--skew-wait` are finite and bounded: click takes
  `nan` and `inf`, every comparison with NaN is False, and `--heartbeat nan` never beats
  (its live jobs would be re-queued and run twice). Every problem is said at once.
- What a worker reads from `fim_workers` (a row written by an older fim, or by anything
  holding the database's password) counts for at most a day: a row of `1e11`, `NaN` or
  `Infinity` neither stops the pruning of dead workers nor breaks the stalled-job check.
- Versions are content digests and content comes back (a lock-down reverted and
  re-applied): "this worker held that version before" says nothing about order.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from fim.build.compile import compile_project
from fim.build.reload import SnapshotHolder
from fim.cli import app as cli
from fim.commands.worker import check_stalled, worker_snapshots
from fim.errors import RunError
from fim.workflows.durable import ensure_schema, make_app
from fim.workflows.queue_rows import (
    QUEUE,
    STALLED_AFTER_MAX,
    prune_bound,
    record_worker,
    retry_stalled_jobs,
)
from fim.workflows.skew import WorkerSnapshots, accepted_under

PLAIN = 'name: w\nstate: "sqlite:///.fim/state.db"\n'


def _project(root: Path, text: str = PLAIN) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "fim.yaml").write_text(text)
    return root


# ----------------------------------------------------------------- flags (#3)


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        (["--heartbeat", "nan"], "--heartbeat: nan is not a number of seconds"),
        (["--heartbeat", "inf"], "--heartbeat: inf is not a number of seconds"),
        (["--heartbeat", "301", "--stalled-after", "1000"], "--heartbeat: 301 is not"),
        (["--stalled-after", "nan"], "--stalled-after: nan is not a number of seconds"),
        (["--stalled-after", "inf"], "--stalled-after: inf is not a number of seconds"),
        (["--stalled-after", "1e11"], "--stalled-after: 1e+11 is not a number of seconds"),
        (["--stalled-after", "86401"], "--stalled-after: 86401 is not"),
        (["--skew-wait", "inf"], "--skew-wait: inf is not a number of seconds"),
    ],
    ids=[
        "nan-heartbeat",
        "inf-heartbeat",
        "heartbeat-over-300",
        "nan-stalled",
        "inf-stalled",
        "stalled-of-3000-years",
        "stalled-over-a-day",
        "inf-skew-wait",
    ],
)
def test_a_worker_refuses_seconds_that_are_not_finite_or_out_of_range(
    tmp_path: Path, flags: list[str], said: str
) -> None:
    result = CliRunner().invoke(cli, ["-p", str(_project(tmp_path / "p")), "worker", *flags])
    assert result.exit_code != 0
    assert said in result.output
    assert "Traceback" not in result.output


def test_every_bad_worker_flag_is_named_at_once() -> None:
    with pytest.raises(RunError) as raised:
        check_stalled(float("inf"), float("nan"), float("nan"))
    message = raised.value.message
    assert "--heartbeat: nan" in message
    assert "--stalled-after: inf" in message
    assert "--skew-wait: nan" in message
    assert "86400" in (raised.value.hint or "")


def test_the_bounds_themselves_and_the_defaults_are_accepted() -> None:
    check_stalled(30.0, 10.0)  # the defaults
    check_stalled(STALLED_AFTER_MAX, 300.0, STALLED_AFTER_MAX)
    check_stalled(1.0, 0.1, 0.0)
    assert STALLED_AFTER_MAX == 86400.0


# ------------------------------------------------------- fim_workers rows (#3)


def _rows(url: str, query: str) -> list[Any]:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        cursor = conn.execute(query)
        return list(cursor) if cursor.description is not None else []


@pytest.mark.parametrize("written", ["'NaN'", "'Infinity'", "1e11"], ids=["nan", "inf", "huge"])
async def test_a_workers_row_beyond_a_day_counts_as_a_day(
    tmp_path: Path, pg_database: Any, written: str
) -> None:
    """A row written by an older fim or a hostile process: the start-up prune of every
    other worker still deletes dead workers past a day, and the every-second stalled-job
    check neither fails nor spares that worker's jobs for longer than a day."""
    db = pg_database("")
    snapshot = compile_project(_project(tmp_path / "p", f'name: s\nstate: "{db.owner_url}"\n'))
    app = make_app(snapshot.project.state)
    async with app.open_async():
        await ensure_schema(app)
        odd = await app.job_manager.register_worker()
        await record_worker(app, odd, 30.0)
        _rows(db.owner_url, f"UPDATE fim_workers SET stalled_after = {written} WHERE id = {odd}")
        await app.configure_task("fim.run_agent", queueing_lock="r1").defer_async(
            run_id="r1", agent="a", request={}
        )
        assert await app.job_manager.fetch_job([QUEUE], odd) is not None

        def beat(seconds_ago: int) -> None:
            _rows(
                db.owner_url,
                f"UPDATE procrastinate_workers SET last_heartbeat = now() - "
                f"interval '{seconds_ago} seconds' WHERE id = {odd}",
            )

        assert await prune_bound(app, 30.0) == STALLED_AFTER_MAX
        beat(3600)  # silent for an hour: within a day, spared
        assert await retry_stalled_jobs(app, 30.0) == 0
        beat(2 * 86400)  # silent for two days: dead, whatever its row says
        assert await retry_stalled_jobs(app, 30.0) == 1
    [(status,)] = _rows(db.owner_url, "SELECT status FROM procrastinate_jobs")
    assert status == "todo"


async def test_a_worker_records_no_bound_beyond_a_day(tmp_path: Path, pg_database: Any) -> None:
    """An embedding app's `make_app(stalled_after=...)` is not checked by the CLI: what it
    records is the bound that counts."""
    db = pg_database("")
    snapshot = compile_project(_project(tmp_path / "p", f'name: s\nstate: "{db.owner_url}"\n'))
    app = make_app(snapshot.project.state)
    async with app.open_async():
        await ensure_schema(app)
        for given in (float("nan"), float("inf"), 1e11):
            worker = await app.job_manager.register_worker()
            await record_worker(app, worker, given)
            [(kept,)] = _rows(
                db.owner_url, f"SELECT stalled_after FROM fim_workers WHERE id = {worker}"
            )
            assert kept == STALLED_AFTER_MAX


# ------------------------------------------------------------ skew, ABA (#4)


def _locked_down(root: Path) -> tuple[Any, Any]:
    """The open project, then the operator's `read_only: true`."""
    opened = compile_project(root)
    (root / "fim.yaml").write_text(PLAIN + "read_only: true\n")
    return opened, compile_project(root)


async def _behind() -> bool:
    """A refresh that brings nothing new: its watcher or fetch has not seen the change."""
    return False


async def test_a_lock_down_reapplied_after_a_revert_is_not_run_on_the_reverted_snapshot(
    tmp_path: Path,
) -> None:
    """The worker went open -> locked -> open (a revert); the operator locks down again and
    the server, first to reload, accepts a job under the lock-down: the worker, still on
    the open snapshot, has held the locked version before but must not run the job there."""
    opened, locked = _locked_down(_project(tmp_path / "p"))
    holder = SnapshotHolder(opened)
    snapshots = WorkerSnapshots(holder, _behind, origin="elsewhere", wait=0.0)
    holder.swap(locked)
    holder.swap(opened)
    with pytest.raises(RunError, match="snapshot skew"):
        await snapshots.for_job(accepted_under(locked))


async def test_a_version_the_worker_moved_on_from_may_be_the_newest_again(
    tmp_path: Path,
) -> None:
    """The server went locked -> open -> locked (a revert of the opening) while this
    worker saw locked -> open only: a job accepted under the re-applied lock-down names a
    version the worker held before, and is still not run on the open snapshot."""
    opened, locked = _locked_down(_project(tmp_path / "p"))
    holder = SnapshotHolder(locked)
    snapshots = WorkerSnapshots(holder, _behind, origin="elsewhere", wait=0.0)
    holder.swap(opened)
    with pytest.raises(RunError, match="snapshot skew"):
        await snapshots.for_job(accepted_under(locked))


async def test_a_worker_on_the_jobs_folder_recompiles_and_runs_a_reapplied_lock_down(
    tmp_path: Path,
) -> None:
    """The sound rule for `-p`: the worker recompiles the folder the job came from, after
    the job existed, and runs it on what that folder says now (locked down)."""
    root = _project(tmp_path / "p")
    opened, locked = _locked_down(root)
    holder = SnapshotHolder(opened)
    snapshots = worker_snapshots(holder, None, reload=True, wait=5.0)
    holder.swap(locked)
    holder.swap(opened)  # a revert its watcher applied; the lock-down is back on disk
    ran_on = await snapshots.for_job(accepted_under(locked))
    assert ran_on.project.read_only
    assert ran_on.version == locked.version
