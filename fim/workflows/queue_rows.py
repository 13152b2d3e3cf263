"""fim's own rows beside procrastinate's, for the durable runs of `fim.workflows.durable`:
which worker waits how long before its jobs count as stalled (`fim_workers`, attack-17 #4),
the requests of queued agent runs kept out of the job's arguments until the run ends
(`fim_run_requests`, attack-17 #3), and the pruning of finished jobs with the runs'
retention. Plain SQL on procrastinate's own connector: every statement runs where the
queue's do.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from fim.errors import RunError
from fim.masking.keys import masked_url
from fim.store.retention import FINISHED
from fim.store.schema import normalize_url
from fim.store_url import store_kind

FINAL = list(FINISHED)
"""The statuses of a run that ended (`fim.store.retention.FINISHED`), as the queries' array."""

if TYPE_CHECKING:
    import procrastinate

QUEUE = "fim-workflows"
"""One queue for every fim job: workers take workflow steps and agent runs alike."""

STALLED_AFTER_MAX = 86400.0
"""The longest stalled bound (a day): `fim worker --stalled-after` refuses more, and a
`fim_workers` row (written by an older fim, or anything with the database's password) counts
for no more. Without a cap one row of `1e11` would keep every worker from pruning dead
workers, and `NaN` or `Infinity` would make procrastinate's interval arithmetic fail."""


def bounded(seconds: float) -> float:
    """A stalled bound as fim uses it: within 0 to `STALLED_AFTER_MAX`; NaN counts as the
    cap (the direction that re-queues and prunes nothing early)."""
    if math.isnan(seconds):
        return STALLED_AFTER_MAX
    return min(max(float(seconds), 0.0), STALLED_AFTER_MAX)


_ROW_BOUND = "LEAST(GREATEST(f.stalled_after, 0), %(cap)s)"
"""A `fim_workers` row's bound, capped in SQL as `bounded` does (PostgreSQL sorts NaN above
every number, so LEAST gives the cap for NaN and Infinity alike)."""

TABLES = (
    # a queued agent run's request, raw (the run needs the caller's words), until it ends
    "CREATE TABLE IF NOT EXISTS fim_run_requests (run_id varchar(64) PRIMARY KEY, "
    "request jsonb NOT NULL, created_at timestamptz NOT NULL DEFAULT now())",
    # each live worker's own stalled bound, gone with its procrastinate row
    "CREATE TABLE IF NOT EXISTS fim_workers (id bigint PRIMARY KEY "
    "REFERENCES procrastinate_workers(id) ON DELETE CASCADE, "
    "stalled_after double precision NOT NULL)",
)
"""fim's own tables beside procrastinate's, created with them
(`fim.workflows.durable.ensure_schema`)."""


async def record_worker(app: procrastinate.App, worker_id: int, stalled_after: float) -> None:
    """Record this worker's own stalled bound beside its procrastinate row (`fim_workers`):
    another worker retries its jobs only past that bound (`retry_stalled_jobs`)."""
    await app.connector.execute_query_async(
        "INSERT INTO fim_workers (id, stalled_after) SELECT %(id)s, %(after)s "
        "WHERE EXISTS (SELECT 1 FROM procrastinate_workers WHERE id = %(id)s) "
        "ON CONFLICT (id) DO UPDATE SET stalled_after = EXCLUDED.stalled_after",
        id=worker_id,
        after=bounded(stalled_after),
    )


async def retry_stalled_jobs(app: procrastinate.App, stalled_after: float) -> int:
    """Re-queue fim's stalled jobs (procrastinate's `get_stalled_jobs` and `retry_job`),
    except those whose worker still beat within its *own* recorded `--stalled-after`: one
    worker started with a short bound must not re-queue the live jobs of a worker whose
    heartbeat is slower (two workers on one run); a row's bound counts up to
    `STALLED_AFTER_MAX` (one hostile row must not break the check for everyone). The number
    re-queued."""
    stalled = list(
        await app.job_manager.get_stalled_jobs(
            seconds_since_heartbeat=bounded(stalled_after), queue=QUEUE
        )
    )
    if not stalled:
        return 0
    alive = await app.connector.execute_query_all_async(
        "SELECT job.id FROM procrastinate_jobs job "
        "JOIN procrastinate_workers w ON w.id = job.worker_id "
        "JOIN fim_workers f ON f.id = job.worker_id "
        "WHERE job.id = ANY(%(ids)s) "
        f"AND w.last_heartbeat >= NOW() - make_interval(secs => {_ROW_BOUND})",
        ids=[job.id for job in stalled],
        cap=STALLED_AFTER_MAX,
    )
    fresh = {row["id"] for row in alive}
    count = 0
    for job in stalled:
        if job.id in fresh:
            continue
        await app.job_manager.retry_job(job)
        count += 1
    return count


async def prune_bound(app: procrastinate.App, stalled_after: float) -> float:
    """The heartbeat age past which this worker, at its start, lets procrastinate delete
    other workers' rows (`stalled_worker_timeout`): never less than a live worker's own
    bound, or its jobs would lose their worker and look stalled to everyone. Each row counts
    up to `STALLED_AFTER_MAX`: a row of `1e11` (an older fim, a hostile writer) would
    otherwise keep every worker from pruning a dead one for as long as it exists."""
    row = await app.connector.execute_query_one_async(
        f"SELECT max({_ROW_BOUND}) AS bound FROM fim_workers f", cap=STALLED_AFTER_MAX
    )
    return bounded(max(bounded(stalled_after), float(row["bound"] or 0.0)))


async def store_request(app: procrastinate.App, run_id: str, request: dict[str, Any]) -> None:
    """Keep a queued agent run's request (`fim.run.queued.request_data`) until it ends."""
    await app.connector.execute_query_async(
        "INSERT INTO fim_run_requests (run_id, request) VALUES (%(run)s, %(request)s) "
        "ON CONFLICT (run_id) DO UPDATE SET request = EXCLUDED.request",
        run=run_id,
        request=request,
    )


async def load_request(app: procrastinate.App, run_id: str) -> dict[str, Any] | None:
    rows = await app.connector.execute_query_all_async(
        "SELECT request FROM fim_run_requests WHERE run_id = %(run)s", run=run_id
    )
    return dict(rows[0]["request"]) if rows else None


async def drop_request(app: procrastinate.App, run_id: str) -> None:
    """Forget a run's request: it ended (or will never start)."""
    await app.connector.execute_query_async(
        "DELETE FROM fim_run_requests WHERE run_id = %(run)s", run=run_id
    )


_OLD_JOBS = """
FROM procrastinate_jobs job
WHERE job.queue_name = %(queue)s
  AND job.status IN ('succeeded', 'failed', 'cancelled', 'aborted')
  AND NOT EXISTS (
    SELECT 1 FROM procrastinate_events e WHERE e.job_id = job.id AND e.at >= NOW() - (
      CASE WHEN job.task_name = 'fim.retry_stalled' THEN 1 ELSE %(hours)s END || ' HOUR'
    )::INTERVAL)
  AND NOT EXISTS (SELECT 1 FROM procrastinate_periodic_defers d WHERE d.job_id = job.id)
  AND NOT EXISTS (
    SELECT 1 FROM fim_runs run WHERE run.id = job.queueing_lock
    AND run.status <> ALL(%(final)s))
"""
"""fim's jobs that ended `hours` ago (procrastinate's `delete_old_jobs` rule: the last
event of the job), but never the last job of a run still paused or queued (its lane is
read back when the run continues: `last_lane`) nor the one procrastinate's periodic
bookkeeping points at; the every-second `retry_stalled` jobs, which hold nothing, after
an hour."""


async def prune_jobs(app: procrastinate.App, days: float, dry_run: bool = False) -> int:
    """Delete (or count) fim's procrastinate jobs that ended more than `days` ago
    (`_OLD_JOBS`; whole hours, rounded up: never earlier than `retention.runs` says), and
    the stored requests older than that of runs no longer waiting (`fim_run_requests`:
    a crashed run's). procrastinate's own `delete_old_jobs` cannot spare a paused run's
    job, hence the query. The number of jobs."""
    if not await has_schema(app):
        return 0
    hours = max(0, math.ceil(days * 24))
    if dry_run:
        row = await app.connector.execute_query_one_async(
            "SELECT count(*) AS n " + _OLD_JOBS, queue=QUEUE, hours=hours, final=FINAL
        )
        return int(row["n"])
    rows = await app.connector.execute_query_all_async(
        "DELETE FROM procrastinate_jobs WHERE id IN (SELECT job.id " + _OLD_JOBS + ") RETURNING id",
        queue=QUEUE,
        hours=hours,
        final=FINAL,
    )
    await app.connector.execute_query_async(
        "DELETE FROM fim_run_requests r WHERE created_at < NOW() - (%(hours)s || ' HOUR')"
        "::INTERVAL AND NOT EXISTS (SELECT 1 FROM fim_runs run WHERE run.id = r.run_id "
        "AND run.status <> ALL(%(final)s))",
        hours=hours,
        final=FINAL,
    )
    return len(rows)


async def has_schema(app: procrastinate.App) -> bool:
    """Whether procrastinate's tables are in the state database (a job was ever queued)."""
    query = "SELECT to_regclass('procrastinate_jobs') IS NOT NULL AS present"
    return bool((await app.connector.execute_query_one_async(query))["present"])


def postgres_dsn(state_url: str) -> str:
    """The libpq connection string of a `postgresql://` state store, as fim's store reads
    the URL: SQLAlchemy's parse, given to libpq as `key=value` pairs. libpq read the URL
    text by rules of its own (attack-47 F5): Azure's `user@server:pw@host` was user `user`
    at host `server`, a raw `/` in the password ended the host, a stray `%` was refused;
    each passed the store's start check, then the queue's pool failed for 30 s. Anything
    but PostgreSQL is refused (SQLite runs in process: a queue needs the shared database)."""
    state_url = state_url.strip()
    if store_kind(state_url) != "postgresql":
        raise RunError(
            f"durable runs need a PostgreSQL state store, not '{state_url.split(':', 1)[0]}'",
            hint="set `state: postgresql://...` in fim.yaml (SQLite runs workflows in process)",
        )
    # deferred: SQLAlchemy and psycopg are loaded where a queue is opened, not by `fim --help`
    from psycopg.conninfo import make_conninfo
    from sqlalchemy.dialects.postgresql.psycopg import PGDialect_psycopg
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    psycopg_dialect: Any = PGDialect_psycopg
    dialect = psycopg_dialect()  # its own reading: `?host=h1:5432&host=h2:5433` too
    try:
        args, options = dialect.create_connect_args(make_url(normalize_url(state_url)))
    except (ArgumentError, ValueError) as exc:  # the store's start refuses it alike
        raise RunError(
            f"state store {masked_url(state_url)} is no URL: {type(exc).__name__}",
            hint="postgresql://user:password@host:5432/database (percent-encode @ : / %)",
        ) from None
    return make_conninfo(*args, **options)


def is_postgres(state_url: str) -> bool:
    """Whether runs can be queued for workers (the queue lives in PostgreSQL)."""
    return store_kind(state_url) == "postgresql"


def recorded_limit(decl: dict[str, Any] | None) -> int | None:
    """The `concurrency` limit a run's recorded declaration carries (None: unlimited)."""
    value = (decl or {}).get("concurrency")
    return int(value) if isinstance(value, int) and value > 0 else None


class DeliverAgain(Exception):
    """What a job raises instead of its cancellation when its worker stops under it (past
    `--shutdown-timeout`): `redelivery()` puts the job back in the queue for another worker.
    procrastinate retries a job aborted by its worker's shutdown only through the task's
    retry strategy, and fim's tasks had none: the job ended `aborted` and its run stayed
    `running` for good (newcomer-8 A)."""


def redelivery() -> Any:
    """The retry strategy of fim's run tasks: at once, and only a `DeliverAgain` (a run that
    failed, or that its user cancelled, is never run again by the queue)."""
    # deferred: loading procrastinate costs hundreds of ms (only where jobs are defined)
    from procrastinate.retry import BaseRetryStrategy, RetryDecision

    class _Redelivery(BaseRetryStrategy):
        def get_retry_decision(self, *, exception: BaseException, job: Any) -> Any:
            return (
                RetryDecision(retry_in={"seconds": 0})
                if isinstance(exception, DeliverAgain)
                else None
            )

    return _Redelivery()


CUT = "fim.cut"
"""The job context's mark (`additional_context`) of a job its worker cut because its
heartbeat no longer reaches the store (`fim.workflows.worker_watch.Lease`)."""


def worker_stopping(context: Any) -> bool:
    """Whether a job (its procrastinate `JobContext`) is aborted because its worker stops,
    or cut because its heartbeat lapsed (it is delivered again), not because a user
    cancelled it."""
    # deferred: loading procrastinate costs hundreds of ms (this runs in a worker only)
    from procrastinate.job_context import AbortReason

    if context.abort_reason() is AbortReason.SHUTDOWN:
        return True
    return bool((getattr(context, "additional_context", None) or {}).get(CUT))
