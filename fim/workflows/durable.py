"""Durable workflow runs on procrastinate (issue 24, docs/scale-out.md).

One procrastinate job = "advance workflow run R": it runs R from the start when the store
has no record of it, resumes it when it is recorded as running (its worker died: the engine
re-runs only the nodes that were in flight, finished nodes are read from the store), or
continues it after a decided human node. It returns when the run finishes or pauses, so a
paused run holds no worker; resolving the approval defers a new job. Crash re-delivery is
procrastinate's: workers heartbeat, and a periodic task retries the jobs of workers whose
heartbeat stopped (`retry_stalled`). fim writes no lease: `lock=R` keeps two workers off one
run and `queueing_lock=R` keeps one run from being queued twice.

Tools therefore run at least once: a node interrupted after its side effect but before its
result was recorded runs again on the next worker. Side-effecting nodes get an idempotency
key (`idempotency_key`) so the far side can deduplicate.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from fim.errors import RunError

if TYPE_CHECKING:
    import procrastinate

    from fim.build.snapshot import Snapshot
    from fim.types import Tool

TASK = "fim.advance_workflow"
QUEUE = "fim-workflows"


def idempotency_key(run_id: str, node_id: str) -> str:
    """The key a side-effecting node sends as `Idempotency-Key`: the same on every attempt
    of one node of one run, different across runs and nodes."""
    return hashlib.sha256(f"{run_id}\x00{node_id}".encode()).hexdigest()[:32]


def postgres_dsn(state_url: str) -> str:
    """The libpq DSN of a `postgresql://` state store; anything else is refused (SQLite
    runs in process: a queue needs the shared database)."""
    state_url = state_url.replace("postgresql+psycopg://", "postgresql://", 1)
    if not state_url.startswith(("postgresql://", "postgres://")):
        raise RunError(
            f"durable runs need a PostgreSQL state store, not '{state_url.split(':', 1)[0]}'",
            hint="set `state: postgresql://...` in fim.yaml (SQLite runs workflows in process)",
        )
    return state_url


def make_app(
    state_url: str,
    snapshot_factory: Callable[[], Snapshot] | None = None,
    tools: Iterable[Tool] = (),
    stalled_after: float = 30.0,
) -> procrastinate.App:
    """The procrastinate app over the state store's database, with the fim tasks.

    `snapshot_factory` is needed only where jobs run (`fim worker`); a deferring process
    (`fim serve`) passes none. `stalled_after` is the heartbeat age after which a job of a
    silent worker is retried.
    """
    # deferred: loading psycopg costs hundreds of ms
    import procrastinate

    app = procrastinate.App(
        connector=procrastinate.PsycopgConnector(conninfo=postgres_dsn(state_url))
    )
    extra = list(tools)

    @app.task(name=TASK, queue=QUEUE, pass_context=True)
    async def advance_workflow(
        context: procrastinate.JobContext, run_id: str, workflow: str, inputs: dict[str, Any]
    ) -> str:
        if snapshot_factory is None:
            raise RuntimeError("this process defers jobs but does not run them")
        return await advance(snapshot_factory(), state_url, run_id, workflow, inputs, extra)

    @app.periodic(cron="* * * * * *")  # every second: procrastinate's cron has seconds
    @app.task(name="fim.retry_stalled", queue=QUEUE, queueing_lock="fim.retry_stalled")
    async def retry_stalled(timestamp: int) -> int:
        """Re-queue the jobs of workers whose heartbeat stopped (a SIGKILLed worker)."""
        stalled = await app.job_manager.get_stalled_jobs(seconds_since_heartbeat=stalled_after)
        count = 0
        for job in stalled:
            await app.job_manager.retry_job(job)
            count += 1
        return count

    return app


async def ensure_schema(app: procrastinate.App) -> None:
    """Create procrastinate's tables in the state database once (its own `procrastinate_*`
    names); a concurrent creator that wins the race is fine."""
    query = "SELECT to_regclass('procrastinate_jobs') IS NOT NULL AS present"
    row = await app.connector.execute_query_one_async(query)
    if row["present"]:
        return
    try:
        await app.schema_manager.apply_schema_async()
    except Exception:
        row = await app.connector.execute_query_one_async(query)
        if not row["present"]:
            raise


async def defer_workflow(
    app: procrastinate.App, run_id: str, workflow: str, inputs: dict[str, Any] | None = None
) -> int:
    """Queue "advance run R" (one queued job per run; two workers never hold one run)."""
    job = app.configure_task(TASK, lock=run_id, queueing_lock=run_id)
    return await job.defer_async(run_id=run_id, workflow=workflow, inputs=dict(inputs or {}))


async def advance(
    snapshot: Snapshot,
    state_url: str,
    run_id: str,
    workflow: str,
    inputs: dict[str, Any],
    tools: Iterable[Tool] = (),
) -> str:
    """Start, recover or continue run `run_id` until it finishes or pauses; its status."""
    # deferred: loading fim.types costs hundreds of ms
    from fim.run.services import Services
    from fim.store import get_store
    from fim.workflows.engine import WorkflowEngine
    from fim.workflows.state import KIND

    services = Services(root=snapshot.root, state_url=state_url)
    engine = WorkflowEngine(snapshot, workflow, services, run_id=run_id, tools=tools)
    record = await get_store(services).get_run(run_id)
    if record is None:
        events = engine.run(inputs)
    elif record.kind != KIND or record.status in {"ok", "failed", "cancelled", "error"}:
        return record.status  # delivered again after it finished: nothing to do
    elif record.status == "paused":
        events = engine.resume(run_id, None, by="worker")
    else:  # recorded as running: the worker that held it died (procrastinate retried it)
        events = engine.resume(run_id, None, by="worker", force=True)
    from fim.store.live import recorded

    async for _ in recorded(get_store(services), run_id, KIND, workflow, events):
        pass  # every event is in the store: any replica streams the run (fim.store.live)
    return engine.state.status if engine.state is not None else "unknown"
