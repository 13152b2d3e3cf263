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

import logging
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from fim.errors import RunError
from fim.idempotency import idempotency_key as idempotency_key  # part of the contract
from fim.run.queued import execute_agent_run
from fim.run.services import Services
from fim.store import get_store
from fim.workflows.engine import WorkflowEngine
from fim.workflows.state import KIND, RunState, record_data

if TYPE_CHECKING:
    import procrastinate

    from fim.build.snapshot import Snapshot
    from fim.store import Store
    from fim.store.records import RunRecord
    from fim.types import Tool

log = logging.getLogger("fim.worker")

TASK = "fim.advance_workflow"
AGENT_TASK = "fim.run_agent"
QUEUE = "fim-workflows"
KIND_WORKFLOW = "workflow"
"""One queue for every fim job: workers take workflow steps and agent runs alike."""


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
    providers: tuple[str, ...] = (),
) -> procrastinate.App:
    """The procrastinate app over the state store's database, with the fim tasks.

    `snapshot_factory` and `providers` (the capability areas of the runs,
    `fim.capabilities.CAPABILITIES`) are needed only where jobs run (`fim worker`); a
    deferring process (`fim serve`) passes none. `stalled_after` is the heartbeat age after
    which a job of a silent worker is retried.
    """
    # deferred: loading psycopg costs hundreds of ms
    import procrastinate

    app = procrastinate.App(
        connector=procrastinate.PsycopgConnector(conninfo=postgres_dsn(state_url))
    )
    extra = list(tools)

    def current() -> Snapshot:
        if snapshot_factory is None:
            raise RuntimeError("this process defers jobs but does not run them")
        return snapshot_factory()

    @app.task(name=TASK, queue=QUEUE, pass_context=True)
    async def advance_workflow(
        context: procrastinate.JobContext, run_id: str, workflow: str, inputs: dict[str, Any]
    ) -> str:
        retried = bool(context.job.attempts) if context.job is not None else False
        return await advance(
            current(), state_url, run_id, workflow, inputs, extra, retried, providers
        )

    @app.task(name=AGENT_TASK, queue=QUEUE, pass_context=True)
    async def run_agent_job(
        context: procrastinate.JobContext, run_id: str, agent: str, request: dict[str, Any]
    ) -> str:
        snapshot = current()
        services = Services(root=snapshot.root, state_url=state_url, providers=providers)
        try:
            return await execute_agent_run(
                snapshot, services, run_id, agent, request, executor="worker",
                shutting_down=lambda: _shutdown(context),
            )  # fmt: skip
        finally:
            await services.aclose()

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


async def has_schema(app: procrastinate.App) -> bool:
    """Whether procrastinate's tables are in the state database (a job was ever queued)."""
    query = "SELECT to_regclass('procrastinate_jobs') IS NOT NULL AS present"
    return bool((await app.connector.execute_query_one_async(query))["present"])


async def ensure_schema(app: procrastinate.App) -> None:
    """Create procrastinate's tables in the state database once (its own `procrastinate_*`
    names); a concurrent creator that wins the race is fine."""
    if await has_schema(app):
        return
    try:
        await app.schema_manager.apply_schema_async()
    except Exception:
        if not await has_schema(app):
            raise


async def defer_workflow(
    app: procrastinate.App,
    run_id: str,
    workflow: str,
    inputs: dict[str, Any] | None = None,
    limit: int | None = None,
) -> int:
    """Queue "advance run R": one queued job per run (`queueing_lock`); `lock` keeps two
    workers off one run, or, for a workflow with a `concurrency` limit, is one of its lanes
    (`lane_lock`). A job of R already queued is enough: a second defer is a no-op."""
    # deferred: a third-party package, loaded only when this path runs
    from procrastinate.exceptions import AlreadyEnqueued

    lock = await lane_lock(app, "workflow", workflow, limit) if limit else run_id
    job = app.configure_task(TASK, lock=lock, queueing_lock=run_id)
    try:
        return await job.defer_async(run_id=run_id, workflow=workflow, inputs=dict(inputs or {}))
    except AlreadyEnqueued:
        return 0


async def defer_agent(
    app: procrastinate.App,
    run_id: str,
    agent: str,
    request: dict[str, Any],
    limit: int | None = None,
) -> int:
    """Queue one background agent run (`fim.run.queued`), in a lane of the agent's
    `concurrency` limit when it has one."""
    lock = await lane_lock(app, "agent", agent, limit) if limit else run_id
    job = app.configure_task(AGENT_TASK, lock=lock, queueing_lock=run_id)
    return await job.defer_async(run_id=run_id, agent=agent, request=request)


async def abort(app: procrastinate.App, run_id: str) -> str | None:
    """Stop run `run_id`'s job: `cancelled` when it had not started (it never will),
    `aborting` when a worker runs it (procrastinate cancels the job's task there, and the
    run records itself cancelled), None when the run has no job waiting or running."""
    rows = await app.connector.execute_query_all_async(
        "SELECT id, status FROM procrastinate_jobs "
        "WHERE queueing_lock = %(run)s AND status IN ('todo', 'doing')",
        run=run_id,
    )
    outcome = None
    for row in rows:
        await app.job_manager.cancel_job_by_id_async(row["id"], abort=True)
        outcome = "aborting" if row["status"] == "doing" else outcome or "cancelled"
    return outcome


def _shutdown(context: procrastinate.JobContext) -> bool:
    """Whether the job is aborted because its worker stops (it is delivered again), not
    because a user cancelled it."""
    # deferred: loading procrastinate costs hundreds of ms (this runs in a worker only)
    from procrastinate.job_context import AbortReason

    return context.abort_reason() is AbortReason.SHUTDOWN


async def stop(app: procrastinate.App, store: Store, run_id: str) -> str | None:
    """Cancel run `run_id`'s job (`abort`): a job that never started leaves its record
    `cancelled` here (a running one records that itself as it stops), and what the run
    waited on for approval is denied. None: no job waiting or running for it."""
    outcome = await abort(app, run_id)
    if outcome == "cancelled":
        record = await store.get_run(run_id)
        if record is not None:
            data = {**record.data, "status": "cancelled", "error": "cancelled before it started"}
            await store.put_run(run_id, record.kind, record.name, "cancelled", data)
    if outcome is not None:
        await deny_waiting(store, run_id)
    return outcome


async def deny_waiting(store: Store, run_id: str) -> None:
    """Deny the approvals run `run_id` still waits on (it was cancelled: no one decides)."""
    for approval in await store.list_approvals("pending"):
        if approval.run_id == run_id:
            await store.resolve_approval(approval.id, False, by="cancel")


async def lane_lock(app: procrastinate.App, kind: str, name: str, limit: int) -> str:
    """The procrastinate `lock` of a new job of an agent or workflow limited to `limit`
    runs at once.

    procrastinate runs the jobs sharing a lock one after another, in the order they were
    queued, whichever worker takes them. A limit of N is N such lanes
    (`fim:<kind>:<name>:<i>`): at most N jobs of the name run at once, anywhere. The new
    job joins the lane with the fewest unfinished jobs; a race between two deferrers only
    makes lanes uneven, never exceeds the limit (that is procrastinate's lock).
    """
    lanes = [f"fim:{kind}:{name}:{i}" for i in range(limit)]
    rows = await app.connector.execute_query_all_async(
        "SELECT lock, count(*) AS n FROM procrastinate_jobs "
        "WHERE lock = ANY(%(lanes)s) AND status IN ('todo', 'doing') GROUP BY lock",
        lanes=lanes,
    )
    load = {row["lock"]: row["n"] for row in rows}
    return min(lanes, key=lambda lane: (load.get(lane, 0), lanes.index(lane)))


async def advance(
    snapshot: Snapshot,
    state_url: str,
    run_id: str,
    workflow: str,
    inputs: dict[str, Any],
    tools: Iterable[Tool] = (),
    retried: bool = False,
    providers: tuple[str, ...] = (),
) -> str:
    """Start, recover or continue run `run_id` until it finishes or pauses; its status.

    A run recorded as `running` is recovered only by a job procrastinate *retried* (its
    worker stopped heartbeating): a fresh job finding it running (a resume deferred while
    the job that paused it was still returning) leaves it to the job that holds it.
    """

    services = Services(root=snapshot.root, state_url=state_url, providers=providers)
    engine = WorkflowEngine(snapshot, workflow, services, run_id=run_id, tools=tools, queued=True)
    record: RunRecord | None = None
    looked = False  # whether `record` is what the store holds (None: no record at all)
    try:
        record = await get_store(services).get_run(run_id)
        looked = True
        if record is None or record.status == "queued":
            events = engine.run(inputs)
        elif record.kind != KIND or record.status in {"ok", "failed", "cancelled", "error"}:
            return record.status  # delivered again after it finished: nothing to do
        elif record.status == "paused":
            events = engine.resume(run_id, None, by="worker")
        elif not retried:
            return record.status
        else:  # recorded as running: the worker that held it died (procrastinate retried it)
            events = engine.resume(run_id, None, by="worker")
        from fim.store.live import recorded  # deferred: only where jobs run

        async for _ in recorded(get_store(services), run_id, KIND, workflow, events):
            pass  # every event is in the store: any replica streams the run (fim.store.live)
        return engine.state.status if engine.state is not None else "unknown"
    except RunError as exc:  # bad inputs, a workflow gone from the snapshot: a failed run
        log.warning("workflow run %s (%s): %s", run_id, workflow, exc.message)
        if engine.state is not None:  # the run had started: its record is the engine's
            return "failed"
        if looked and (record is None or record.status == "queued"):  # it never started
            data = {"run_id": run_id, "workflow": workflow, "error": exc.message, "queued": True}
            await get_store(services).put_run(run_id, KIND, workflow, "failed", data)
            return "failed"
        # A run with a record of its own (paused at a human node still undecided, say) is
        # left as it is: a bare failed record would destroy its nodes and declaration, and
        # a job queued for it by mistake could end a run it was never meant to touch.
        return record.status if record is not None else "unknown"
    finally:
        await services.aclose()


def recorded_limit(decl: dict[str, Any] | None) -> int | None:
    """The `concurrency` limit a run's recorded declaration carries (None: unlimited)."""
    value = (decl or {}).get("concurrency")
    return int(value) if isinstance(value, int) and value > 0 else None


async def requeue_decided(app: procrastinate.App, store: Any, run_id: str) -> bool:
    """After a decision on a human node of a queued run: queue the job that continues it.

    True when the run is a queued one (a worker continues it), False when it runs in
    process and the caller resumes it as before. A paused run holds no worker meanwhile.
    """

    record = await store.get_run(run_id)
    if record is None or record.kind != KIND_WORKFLOW:
        return False
    state = RunState.from_dict(record_data(record))
    if not state.queued:
        return False
    await defer_workflow(app, run_id, state.workflow, {}, recorded_limit(state.decl))
    return True


def is_postgres(state_url: str) -> bool:
    """Whether runs can be queued for workers (the queue lives in PostgreSQL)."""
    return state_url.startswith(("postgresql", "postgres://"))
