"""Durable workflow runs on procrastinate (issue 24, docs/scale-out.md).

One procrastinate job = "advance workflow run R": it runs R from the start when the store
has no record of it, resumes it when it is recorded as running (its worker died: the engine
re-runs only the nodes that were in flight, finished nodes are read from the store), or
continues it after a decided human node. It returns when the run finishes or pauses, so a
paused run holds no worker; resolving the approval defers a new job. Crash re-delivery is
procrastinate's: workers heartbeat, and a periodic task retries the jobs of workers whose
heartbeat stopped (`retry_stalled`). fim writes no lease: `lock=R` keeps two workers off one
run and `queueing_lock=R` keeps one run from being queued twice.

Limits are procrastinate locks too (`job_lock`): the jobs of an agent or workflow with a
`concurrency` limit, and the jobs of one API key when `server.key_limits.max_parallel_runs`
is set, share a few lanes, so at most that many run at once on all workers, and one key's
backlog never queues ahead of another key's runs. A job checks, before it starts, that the
key that queued it is still in fim.yaml (`revoked`): revoking a leaked key ends the runs it
queued.

Tools therefore run at least once: a node interrupted after its side effect but before its
result was recorded runs again on the next worker. Side-effecting nodes get an idempotency
key (`idempotency_key`) so the far side can deduplicate.

A job carries the snapshot that accepted it and never runs on an older one
(`fim.workflows.admission`); its arguments hold ids only, the request waiting beside it
(`fim.workflows.queue_rows`, with the per-worker stalled bounds).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING, Any

from fim.errors import RunError
from fim.idempotency import idempotency_key as idempotency_key  # part of the contract
from fim.store import get_store
from fim.store.owners import owner_of
from fim.workflows.admission import (
    deny_waiting,
    hand_back_job,
    job_services,
    request_gone,
    revoked,
    run_queued_agent,
    skewed,
)
from fim.workflows.engine import WorkflowEngine
from fim.workflows.lanes import job_lock, last_lane
from fim.workflows.queue_rows import (
    QUEUE,
    TABLES,
    DeliverAgain,
    drop_request,
    has_schema,
    is_postgres,
    load_request,
    postgres_dsn,
    prune_jobs,
    record_worker,
    recorded_limit,
    redelivery,
    retry_stalled_jobs,
    store_request,
    worker_stopping,
)
from fim.workflows.skew import check
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
KIND_WORKFLOW = "workflow"


def make_app(
    state_url: str,
    snapshot_factory: Callable[[], Snapshot] | None = None,
    tools: Iterable[Tool] = (),
    stalled_after: float = 30.0,
    providers: tuple[str, ...] = (),
    resolve: Callable[[dict[str, Any] | None], Awaitable[Snapshot]] | None = None,
    mcp: Any = None,
) -> procrastinate.App:
    """The procrastinate app over the state store's database, with the fim tasks.

    `snapshot_factory` and `providers` (the capability areas of the runs,
    `fim.capabilities.CAPABILITIES`) are needed only where jobs run (`fim worker`); a
    deferring process (`fim serve`) passes none. `resolve` gives the snapshot a job runs
    on (`fim.workflows.skew.WorkerSnapshots.for_job`; without it, only a job of the
    factory's own version runs). `stalled_after` is the heartbeat age after which this
    worker's jobs are retried if it goes silent (recorded per worker: `fim_workers`).
    `mcp` (an `McpManager`) is the worker's, shared by its jobs, as `fim serve`'s runs share
    one (attack-37 #8: a manager per job restarted every server, with a fresh budget)."""
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

    async def register(context: procrastinate.JobContext) -> None:
        worker = context.job.worker_id if context.job is not None else None
        if worker is not None:
            await record_worker(app, worker, stalled_after)

    @app.task(name=TASK, queue=QUEUE, pass_context=True, retry=redelivery())
    async def advance_workflow(
        context: procrastinate.JobContext,
        run_id: str,
        workflow: str,
        inputs: dict[str, Any],
        accepted: dict[str, Any] | None = None,
        stored: bool = False,
    ) -> str:
        await register(context)
        retried = bool(context.job.attempts) if context.job is not None else False
        ended = True
        try:
            if stored:  # the inputs wait beside the job, not in its arguments
                inputs = dict((await load_request(app, run_id) or {}).get("inputs") or {})
            return await advance(
                current(), state_url, run_id, workflow, inputs, extra, retried, providers,
                accepted=accepted, resolve=resolve, mcp=mcp,
            )  # fmt: skip
        except asyncio.CancelledError:
            ended = not worker_stopping(context)
            if not ended:  # its worker stops under it: recorded running, delivered again
                await hand_back_job(current(), state_url, run_id)
                raise DeliverAgain(run_id) from None
            raise
        finally:
            if stored and ended:  # it ran, paused or failed: a resume reads its record
                await drop_request(app, run_id)

    @app.task(name=AGENT_TASK, queue=QUEUE, pass_context=True, retry=redelivery())
    async def run_agent_job(
        context: procrastinate.JobContext, run_id: str, agent: str, request: dict[str, Any]
    ) -> str:
        await register(context)
        snapshot = current()
        services = job_services(snapshot, state_url, providers, mcp)
        ended = True
        try:
            if "messages" not in request:  # the job holds ids only: the request waits here
                stored = await load_request(app, run_id)
                if stored is None:
                    return await request_gone(services, run_id, agent)
                request = {**stored, **request}
            return await run_queued_agent(
                snapshot, services, run_id, agent, request,
                shutting_down=lambda: worker_stopping(context), resolve=resolve,
            )  # fmt: skip
        except asyncio.CancelledError:
            ended = not worker_stopping(context)
            if not ended:  # its worker stops under it: the queue delivers it again
                raise DeliverAgain(run_id) from None
            raise
        finally:
            if ended:
                await drop_request(app, run_id)
            await services.aclose()

    @app.periodic(cron="* * * * * *")  # every second: procrastinate's cron has seconds
    @app.task(name="fim.retry_stalled", queue=QUEUE, queueing_lock="fim.retry_stalled")
    async def retry_stalled(timestamp: int) -> int:
        """Re-queue the jobs of workers whose heartbeat stopped (a SIGKILLed worker)."""
        return await retry_stalled_jobs(app, stalled_after)

    return app


def queue_pruner(state_url: str) -> Callable[[float, bool], Awaitable[int]] | None:
    """On PostgreSQL, what deletes the job queue's finished jobs for `fim prune` and the
    server's hourly prune (`prune_jobs`, `fim.store.retention.prune`'s `jobs`); None on
    SQLite, which has no queue."""
    if not is_postgres(state_url):
        return None

    async def jobs(days: float, dry_run: bool) -> int:
        app = make_app(state_url)
        async with app.open_async():
            return await prune_jobs(app, days, dry_run)

    return jobs


async def ensure_schema(app: procrastinate.App) -> None:
    """Create procrastinate's tables in the state database once (its own `procrastinate_*`
    names), and fim's two beside them (`TABLES`); a concurrent creator that wins the race
    is fine."""
    if not await has_schema(app):
        try:
            await app.schema_manager.apply_schema_async()
        except Exception:
            if not await has_schema(app):
                raise
    present = "SELECT to_regclass('fim_workers') IS NOT NULL AS present"
    if (await app.connector.execute_query_one_async(present))["present"]:
        return
    try:
        for statement in TABLES:
            await app.connector.execute_query_async(statement)
    except Exception:
        if not (await app.connector.execute_query_one_async(present))["present"]:
            raise


async def defer_workflow(
    app: procrastinate.App,
    run_id: str,
    workflow: str,
    inputs: dict[str, Any] | None = None,
    limit: int | None = None,
    *,
    owner: str = "",
    key_limit: int | None = None,
    lock: str | None = None,
    accepted: dict[str, Any] | None = None,
) -> int:
    """Queue "advance run R": one queued job per run (`queueing_lock`); `lock` keeps two
    workers off one run, or is one of the lanes of the workflow's `concurrency` limit or of
    its key's `max_parallel_runs` (`job_lock`; a given `lock` is used as it is). A job of R
    already queued is enough: a second defer is a no-op. `accepted`: the snapshot the run
    was accepted (or decided) under (`fim.workflows.skew.accepted_under`), which no worker
    runs it below."""
    # deferred: a third-party package, loaded only when this path runs
    from procrastinate.exceptions import AlreadyEnqueued

    if lock is None:
        lock = await job_lock(app, run_id, "workflow", workflow, limit, owner, key_limit)
    job = app.configure_task(TASK, lock=lock, queueing_lock=run_id)
    try:
        extra: dict[str, Any] = {"accepted": dict(accepted)} if accepted else {}
        if inputs:  # a caller's inputs may hold secrets: kept beside the job, not in it
            await store_request(app, run_id, {"inputs": dict(inputs)})
            extra["stored"] = True
        return await job.defer_async(run_id=run_id, workflow=workflow, inputs={}, **extra)
    except AlreadyEnqueued:
        return 0


async def defer_agent(
    app: procrastinate.App,
    run_id: str,
    agent: str,
    request: dict[str, Any],
    limit: int | None = None,
    key_limit: int | None = None,
) -> int:
    """Queue one background agent run (`fim.run.queued`), in a lane of the agent's
    `concurrency` limit or of its key's `max_parallel_runs` (`job_lock`). The request
    waits in `fim_run_requests` (deleted when the run ends); the job's arguments, which
    procrastinate keeps with the job, hold ids (the run, the key's hash) and the accepting
    snapshot only."""
    owner = str(request.get("owner") or "")
    lock = await job_lock(app, run_id, "agent", agent, limit, owner, key_limit)
    await store_request(app, run_id, request)
    ids: dict[str, Any] = {k: request[k] for k in ("snapshot", "origin", "owner") if k in request}
    job = app.configure_task(AGENT_TASK, lock=lock, queueing_lock=run_id)
    return await job.defer_async(run_id=run_id, agent=agent, request=ids)


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


async def stop(app: procrastinate.App, store: Store, run_id: str) -> str | None:
    """Cancel run `run_id`'s job (`abort`): a job that never started leaves its record
    `cancelled` here (a running one records that itself as it stops), and what the run
    waited on for approval is denied. None: no job waiting or running for it."""
    outcome = await abort(app, run_id)
    if outcome == "cancelled":
        await drop_request(app, run_id)
        record = await store.get_run(run_id)
        if record is not None:
            await store.record_cancelled(record, "cancelled before it started")
    if outcome is not None:
        await deny_waiting(store, run_id)
    return outcome


async def advance(
    snapshot: Snapshot,
    state_url: str,
    run_id: str,
    workflow: str,
    inputs: dict[str, Any],
    tools: Iterable[Tool] = (),
    retried: bool = False,
    providers: tuple[str, ...] = (),
    *,
    accepted: dict[str, Any] | None = None,
    resolve: Callable[[dict[str, Any] | None], Awaitable[Snapshot]] | None = None,
    mcp: Any = None,
) -> str:
    """Start, recover or continue run `run_id` until it finishes or pauses; its status.

    A run recorded as `running` is recovered only by a job procrastinate *retried* (its
    worker stopped heartbeating): a fresh job finding it running (a resume deferred while
    the job that paused it was still returning) leaves it to the job that holds it.

    A job `accepted` under another snapshot runs on the one `resolve` gives (never an
    older one: `fim.workflows.skew`); when there is none, the run ends `failed` with the
    snapshot skew, before any node. `mcp`: the worker's MCP manager (`make_app`)."""

    try:
        snapshot = await check(snapshot, accepted, resolve)
    except RunError as exc:
        return await skewed(snapshot, state_url, providers, run_id, KIND, workflow, exc)
    services = job_services(snapshot, state_url, providers, mcp)
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
        owner = await owner_of(get_store(services), run_id) or ""
        gone = await revoked(get_store(services), snapshot.project.server, run_id, owner)
        if gone is not None:
            await events.aclose()
            return gone
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


async def requeue_decided(
    app: procrastinate.App, store: Any, run_id: str, accepted: dict[str, Any] | None = None
) -> bool:
    """After a decision on a human node of a queued run: queue the job that continues it,
    on no snapshot older than `accepted` (the deciding server's; the CLI has none).

    True when the run is a queued one (a worker continues it), False when it runs in
    process and the caller resumes it as before. A paused run holds no worker meanwhile.
    """

    record = await store.get_run(run_id)
    if record is None or record.kind != KIND_WORKFLOW:
        return False
    state = RunState.from_dict(record_data(record))
    if not state.queued:
        return False
    lane = await last_lane(app, run_id)
    limit = recorded_limit(state.decl)
    await defer_workflow(app, run_id, state.workflow, {}, limit, lock=lane, accepted=accepted)
    return True
