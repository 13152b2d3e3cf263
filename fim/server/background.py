"""Background runs of the HTTP API: `"background": true` on `POST /v1/agents/{name}/runs`
and `POST /v1/workflows/{name}/runs`.

The request is answered at once with 202, the run id and `Location: /v1/runs/{id}`; the run
record is written as `queued` before the answer, so the client can poll it from any replica.

Where it runs depends on the state store:

- PostgreSQL: the run is a procrastinate job (`fim.workflows.durable`) that a `fim worker`
  claims. The server only queues it; with no worker running, it stays `queued`. The key's
  `server.key_limits.max_parallel_runs` holds there as lanes of the queue (`job_lock`):
  the request's own slot is freed at 202, and at most that many of the key's queued runs
  run at once, on all workers.
- SQLite (one process by design): the run executes in the server's own process, as a task
  of its event loop. An agent's `concurrency` limit holds in that process too.

A decision on a human node of a queued workflow run (here or through `fim approvals` on
any machine) queues the job that continues it, so a paused run holds no worker.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from typing import TYPE_CHECKING, Any

from starlette.responses import Response

from fim.errors import RunError
from fim.locks import slots
from fim.processes import this_process
from fim.run.queued import mark_queued, request_data
from fim.server.http import JSONResponse, error
from fim.server.limits import held
from fim.server.proxy import public_path
from fim.store import get_store
from fim.store.owners import claim
from fim.types import Message
from fim.workflows.admission import deny_waiting, revoked, run_queued_agent
from fim.workflows.durable import (
    defer_agent,
    defer_workflow,
    ensure_schema,
    make_app,
    stop,
)
from fim.workflows.durable import requeue_decided as requeue
from fim.workflows.engine import WorkflowEngine
from fim.workflows.inputs import validate_inputs
from fim.workflows.queue_rows import is_postgres
from fim.workflows.skew import accepted_under

if TYPE_CHECKING:
    import procrastinate

    from fim.server.api import Api
    from fim.store import Store

log = logging.getLogger("fim.server")

_RUNS: dict[str, asyncio.Task[Any]] = {}
"""Run id -> the task of a background run going on in this process (a cancel stops it)."""


class Queue:
    """The server's procrastinate app, opened on first use and closed with its services."""

    def __init__(self, state_url: str) -> None:
        self.state_url = state_url
        self._app: procrastinate.App | None = None
        self._lock = asyncio.Lock()

    async def app(self) -> procrastinate.App:
        async with self._lock:
            if self._app is None:
                app = make_app(self.state_url)
                await app.open_async()
                try:
                    await ensure_schema(app)
                except BaseException:
                    await app.close_async()
                    raise
                self._app = app
            return self._app

    async def close(self) -> None:
        if self._app is not None:
            await self._app.close_async()
            self._app = None


def queue_of(api: Api) -> Queue | None:
    """The queue when the store is PostgreSQL; None when runs execute in process."""

    url = get_store(api.services).url
    if not is_postgres(url):
        return None
    queue: Queue = api.services.get("fim.queue", lambda: Queue(url), closer=Queue.close)
    return queue


async def _open(queue: Queue) -> procrastinate.App | Response:
    """The queue, or a 503 saying it cannot be reached (nothing was recorded yet)."""
    try:
        return await queue.app()
    except Exception as exc:
        log.warning("cannot open the job queue: %s", exc)
        return error(
            503,
            "cannot reach the job queue in the PostgreSQL state store",
            "check `state:` in fim.yaml and that the database is up; the run was not queued",
        )


def accepted(run_id: str, kind: str, name: str, where: str) -> JSONResponse:
    location = public_path(f"/v1/runs/{run_id}")  # behind a proxy's prefix: with it
    body = {"run_id": run_id, kind: name, "status": "queued", "executes": where, "url": location}
    return JSONResponse(body, status_code=202, headers={"Location": location})


STOPPED = "the server stopped before it ended"
"""Why a background run still going in the server's process when it stops ends `cancelled`."""


class Going:
    """The background runs one server drives in its own process (`spawn_run`), stopped
    with it (`stop_background`, and `Services.aclose`): each is cancelled, and its record
    ends `cancelled` if it did not record that itself (one still waiting for its turn). No
    process drives them after the stop: left `queued` or `running` they looked alive, and
    held their key's places among its paused runs (attack-30 #2)."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.tasks: dict[str, asyncio.Task[Any]] = {}

    async def stop(self) -> None:
        tasks = dict(self.tasks)  # each leaves `self.tasks` as it ends
        for task in tasks.values():
            task.cancel()
        await asyncio.gather(*tasks.values(), return_exceptions=True)
        for run_id in tasks:  # each on its own: one the store refuses leaves the others'
            try:
                record = await self.store.get_run(run_id)
                if record is not None and record.status in ("queued", "running"):
                    await self.store.record_cancelled(record, STOPPED)
                    log.info("background run %s: %s, recorded cancelled", run_id, STOPPED)
            except Exception:
                log.exception("background run %s: could not record it cancelled", run_id)


def _going(api: Api) -> Going:
    going: Going = api.services.get(
        "fim.background", lambda: Going(get_store(api.services)), closer=Going.stop
    )
    return going


async def stop_background(api: Api) -> None:
    """Stop the background runs this server drives in its process (at its shutdown)."""
    going = api.services.cache.get("fim.background")
    if isinstance(going, Going):
        await going.stop()


def spawn_run(coro: Any, run_id: str, api: Api) -> None:
    """Run `coro`, run `run_id`'s work in the background of this process (`cancel_run`;
    stopped with the server: `Going`)."""
    task = asyncio.get_running_loop().create_task(coro, name=f"background-{run_id}")
    _RUNS[run_id] = task
    going = _going(api).tasks
    going[run_id] = task

    def ended(done: asyncio.Task[Any]) -> None:
        if _RUNS.get(run_id) is done:
            del _RUNS[run_id]
        if going.get(run_id) is done:
            del going[run_id]

    task.add_done_callback(ended)


async def cancel_run(api: Api, run_id: str) -> str | None:
    """Stop background run `run_id`: `cancelling` when it runs in this process or on a
    worker (it records itself cancelled as it stops), `cancelled` when it was queued and
    never started (recorded here), None when no background run of that id is going."""
    store = get_store(api.services)
    task = _RUNS.get(run_id)
    if task is not None:
        task.cancel()
        await deny_waiting(store, run_id)
        return "cancelling"
    queue = queue_of(api)
    app = await _open(queue) if queue is not None else None
    if app is None or isinstance(app, Response):
        return None
    outcome = await stop(app, store, run_id)
    return "cancelling" if outcome == "aborting" else outcome


def _keeping_slot(coro: Any) -> Any:
    """`coro`, holding the request's `server.key_limits` slot until the run ends in this
    process (the request itself is answered 202 at once)."""
    slot = held.get()
    if slot is None:
        return coro
    taken = slot.hand_over()

    async def run() -> Any:
        try:
            return await coro
        finally:
            taken.release()

    return run()


async def _limited(kind: str, name: str, limit: int | None, coro: Any) -> Any:
    """In process (SQLite), the `concurrency` limit of an agent or workflow. A run stopped
    while it waited for its slot never started: its coroutine is closed, not left unawaited."""
    try:
        if not limit:
            return await coro
        async with slots(("background", kind, name, limit), limit):
            return await coro
    finally:
        coro.close()  # a no-op for one that ran


def key_limit(api: Api) -> int | None:
    """`server.key_limits.max_parallel_runs` now (None: no limit): the lanes of a key's
    queued runs."""
    limits = api.holder.current.project.server.key_limits
    return limits.max_parallel_runs if limits is not None else None


async def start_agent_run(
    api: Api, name: str, history: list[Message], session: str | None, owner: str
) -> Response:
    """Accept a background agent run: record it as queued, queue or start it, answer 202.
    In process, it starts only if its key is still in fim.yaml when its turn comes."""

    snapshot = api.holder.current
    decl = snapshot.agents.get(name)
    limit = decl.concurrency if decl is not None else None
    run_id = uuid.uuid4().hex[:12]
    request = {**request_data(history, session, owner, snapshot), **accepted_under(snapshot)}
    data: dict[str, Any] = {"session_id": session, "output": None, "events": []}
    queue = queue_of(api)
    app = await _open(queue) if queue is not None else None
    if isinstance(app, Response):
        return app
    if owner:
        await claim(get_store(api.services), run_id, owner)
    await mark_queued(api.services, run_id, "agent", name, data)
    if app is not None:
        await defer_agent(app, run_id, name, request, limit, key_limit(api))
        return accepted(run_id, "agent", name, "worker")
    work = run_queued_agent(
        snapshot, api.services, run_id, name, request,
        executor="server", settings=lambda: api.holder.current.project.server,
    )  # fmt: skip
    spawn_run(_keeping_slot(_limited("agent", name, limit, work)), run_id, api)
    return accepted(run_id, "agent", name, "server")


async def start_workflow_run(
    api: Api, name: str, inputs: dict[str, Any], owner: str = "", run_id: str = ""
) -> Response:
    """Accept a background workflow run; bad inputs are a 400 now, not a failed run later.
    `run_id`: the id its key's place among its paused runs was taken for (`check_parked`)."""

    snapshot = api.holder.current
    decl = snapshot.workflows[name]
    try:
        values = validate_inputs(name, decl, inputs)
    except RunError as exc:
        return error(400, exc.message, exc.hint, param=getattr(exc, "param", "inputs"))
    run_id = run_id or uuid.uuid4().hex[:12]
    queue = queue_of(api)
    app = await _open(queue) if queue is not None else None
    if isinstance(app, Response):
        return app
    # shaped like a workflow run's state, so `fim workflow show` reads it while queued
    state: dict[str, Any] = {"run_id": run_id, "workflow": name, "decl": {}, "nodes": {}}
    state["inputs"] = values
    state.update(status="queued", queued=queue is not None, snapshot_version=snapshot.version)
    if queue is None:  # driven by this process: counted while it lives (`paused_runs`)
        state["owner"] = this_process()
    if owner:
        await claim(get_store(api.services), run_id, owner)
    await mark_queued(api.services, run_id, "workflow", name, state)
    if app is not None:
        await defer_workflow(
            app, run_id, name, values, decl.concurrency, owner=owner, key_limit=key_limit(api),
            accepted=accepted_under(snapshot),
        )  # fmt: skip
        return accepted(run_id, "workflow", name, "worker")

    engine = WorkflowEngine(snapshot, name, api.services, run_id=run_id)

    async def drive() -> None:
        keys = api.holder.current.project.server  # fim.yaml when its turn comes
        if await revoked(get_store(api.services), keys, run_id, owner) is not None:
            return
        try:
            async for _event in engine.run(values):
                pass
        except Exception as exc:  # before its first node (a missing key): a failed run
            log.exception("background workflow run %s of '%s' failed", run_id, name)
            if engine.state is None:
                failed = {**state, "status": "failed", "error": str(exc)}
                await get_store(api.services).put_run(run_id, "workflow", name, "failed", failed)

    limited = _limited("workflow", name, decl.concurrency, drive())
    spawn_run(_keeping_slot(limited), run_id, api)
    return accepted(run_id, "workflow", name, "server")


async def requeue_decided(api: Api, run_id: str) -> bool:
    """A human node of run `run_id` was decided: True when a worker job now continues it
    (a queued run), False when the caller resumes it in process."""
    queue = queue_of(api)
    if queue is None:
        return False

    accepted = accepted_under(api.holder.current)  # no worker continues it on an older one
    return await requeue(await queue.app(), get_store(api.services), run_id, accepted)
