"""What an operator watches of the job queue and of a `fim worker`.

- Each job a worker runs is counted by its outcome as fim knows it (`outcome`): the run's
  own status (`ok`, `failed`, `cancelled`, `paused`), `skew` when it was not run for
  snapshot skew (`fim.workflows.skew`), `retried` when the worker stopped under it and the
  queue delivers it again. A procrastinate worker middleware (`JobWatch`) does it around
  every job, so `fim.workflows.durable`'s tasks stay as they are.
- Every log line written inside a job carries the job's `run_id`, `job_id` and `task`
  (and `outcome: skew` once the job was refused for snapshot skew): a log pipeline reads
  the skew failure as a record of that run, not one line of text (`JobFields`).
- `Health`: the worker is healthy while its loop runs and its last heartbeat to the queue
  is younger than `--stalled-after` (past it, other workers hand its jobs on anyway).
- `Lease`: the worker's hold on the jobs it runs, kept by its heartbeat, and given up (its
  jobs cut and delivered again) before another worker may take them over.
- `serve_endpoint`: `/healthz` and `/metrics` on `--metrics-port`, a Starlette app under
  uvicorn in a thread of its own (uvicorn takes signals only in the main thread, which
  procrastinate's worker keeps).
- `queue_depth`: the queue's jobs waiting and running, one count query, for `fim serve`'s
  `fim_queue_jobs` gauge (runs piling up with no worker).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import socket
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from fim.errors import RunError
from fim.hosts import listen
from fim.workflows.queue_rows import CUT, QUEUE, DeliverAgain, worker_stopping

log = logging.getLogger("fim.worker")

if TYPE_CHECKING:
    import procrastinate
    from procrastinate.job_context import JobContext

    from fim.build.snapshot import Snapshot
    from fim.observe.metrics import WorkerMetrics

RETRY_STALLED = "fim.retry_stalled"
"""The periodic task re-queuing dead workers' jobs (`fim.workflows.durable`): every second,
so neither a job outcome nor a log line of its own."""

OUTCOMES = ("ok", "failed", "skew", "cancelled", "paused", "retried")
"""`fim_worker_jobs_total`'s outcomes: a run status a job returns that is none of these
(`error`, `unknown`) counts as `failed`."""


@dataclass
class _Job:
    """What the log lines of one job carry (`JobFields`) and how it ended."""

    fields: dict[str, Any]
    skew: bool = False


_JOB: contextvars.ContextVar[_Job | None] = contextvars.ContextVar("fim_job", default=None)


def watch_resolve(
    resolve: Callable[[dict[str, Any] | None], Awaitable[Snapshot]],
) -> Callable[[dict[str, Any] | None], Awaitable[Snapshot]]:
    """`resolve` (`WorkerSnapshots.for_job`), marking the current job `skew` when it
    refuses the job's snapshot: the task then records the run failed, and only this
    knows why."""

    async def resolved(accepted: dict[str, Any] | None) -> Snapshot:
        try:
            return await resolve(accepted)
        except RunError:
            job = _JOB.get()
            if job is not None:
                job.skew = True
                job.fields["outcome"] = "skew"
            raise

    return resolved


def outcome_of(result: Any, job: _Job, error: BaseException | None, shutdown: bool) -> str:
    """The outcome a job is counted under: see `OUTCOMES`."""
    if job.skew:
        return "skew"
    if error is not None:
        return "retried" if shutdown else "failed" if isinstance(error, Exception) else "cancelled"
    return result if result in OUTCOMES else "failed"


class JobWatch:
    """A procrastinate worker middleware: counts each fim job running and by its outcome,
    and gives its log lines the job's fields (`_JOB`). `outage`
    (`fim.workflows.worker_store.Outage`) takes the store failures of the every-second
    `RETRY_STALLED` job, which would otherwise each log a failed job with its traceback.
    Each run job is held by `lease` while it runs; one its worker stopped under that ends
    with an error (its last writes refused by a store that went away) is still delivered
    again: ended `failed`, its run would stay `running` for good."""

    def __init__(
        self, metrics: WorkerMetrics | None, outage: Any = None, lease: Lease | None = None
    ) -> None:
        self.metrics = metrics  # None: prometheus-client is not installed, fields only
        self.outage = outage
        self.lease = lease

    async def __call__(self, call_next: Callable[[], Awaitable[Any]], context: JobContext,
                       worker: Any) -> Any:  # fmt: skip
        task = context.job.task_name
        if task == RETRY_STALLED:
            try:
                requeued = await call_next()
            except Exception as exc:
                if self.outage is None or not self.outage.refused(exc):
                    raise
                return 0
            if self.metrics is not None and isinstance(requeued, int) and requeued > 0:
                self.metrics.stalled_requeued.inc(requeued)
            return requeued
        fields: dict[str, Any] = {"task": task, "job_id": context.job.id}
        if "run_id" in context.job.task_kwargs:
            fields["run_id"] = context.job.task_kwargs["run_id"]
        job = _Job(fields)
        token = _JOB.set(job)
        metrics = self.metrics
        if metrics is not None:
            metrics.running.inc()
        result: Any = None
        error: BaseException | None = None
        held = self.lease.hold(context) if self.lease is not None else contextlib.nullcontext()
        try:
            with held:
                result = await call_next()
            return result
        except Exception as exc:
            error = exc
            if worker_stopping(context) and not isinstance(exc, DeliverAgain):
                raise DeliverAgain(fields.get("run_id", "")) from exc
            raise
        except BaseException as exc:
            error = exc
            raise
        finally:
            _JOB.reset(token)
            if metrics is not None:
                metrics.running.dec()
                shutdown = worker_stopping(context) if error is not None else False
                metrics.jobs.labels(outcome_of(result, job, error, shutdown)).inc()


class JobFields(logging.Filter):
    """A log handler's filter: every record written inside a job (fim's, procrastinate's)
    gets the job's fields; procrastinate's per-job lines of `RETRY_STALLED`, every second
    on some worker, are dropped below warnings; its line of a job delivered again
    (`DeliverAgain`: its worker stopped) keeps no traceback, a stop is no error."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info and isinstance(record.exc_info[1], DeliverAgain):
            record.exc_info, record.exc_text = None, None
        job = getattr(record, "job", None)
        if (
            record.levelno < logging.WARNING
            and isinstance(job, dict)
            and job.get("task_name") == RETRY_STALLED
        ):
            return False
        current = _JOB.get()
        if current is not None:
            for key, value in current.fields.items():
                if not hasattr(record, key):
                    setattr(record, key, value)
        return True


@dataclass
class Health:
    """Whether the worker is alive: its loop runs and it beat recently (`healthy`)."""

    stale_after: float
    clock: Callable[[], float] = time.monotonic
    running: bool = False
    last_beat: float = field(default=0.0)

    def start(self) -> None:
        self.running = True
        self.beat()

    def stop(self) -> None:
        self.running = False

    def beat(self) -> None:
        self.last_beat = self.clock()

    def state(self) -> dict[str, Any]:
        """`/healthz`'s body: `ok`, and why not."""
        if not self.running:
            return {"ok": False, "reason": "the worker loop is not running"}
        age = self.clock() - self.last_beat
        if age > self.stale_after:
            return {
                "ok": False,
                "reason": f"no heartbeat for {age:.0f} s (--stalled-after {self.stale_after:g})",
            }
        return {"ok": True, "heartbeat_age_s": round(age, 3)}


class Lease:
    """This worker's hold on the jobs it runs, kept by its heartbeat (attack-47 F1).

    Another worker's stalled-job retry hands a job on once its worker's last heartbeat is
    older than `--stalled-after`. procrastinate stops a worker by cancelling its heartbeat
    first, then gives the running jobs `--shutdown-timeout`: after a SIGTERM or a store
    outage, one run ran on two workers at once. So `keep` beats whenever procrastinate's
    beat is late or stopped (`beat_after`), and once no beat reached the store for
    `cut_after` (2/3 of `--stalled-after`) cuts the running jobs as a stop does (each is
    delivered again) and calls `on_lost`: their ending has the last third of the bound,
    before any other worker may take them. A beat counts from when it was sent."""

    def __init__(self, heartbeat: float, stalled_after: float, health: Health | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:  # fmt: skip
        self.beat_after, self.stalled_after = 1.5 * heartbeat, stalled_after
        self.cut_after = stalled_after * 2 / 3  # at least 2 heartbeats (`check_stalled`)
        self.tick = heartbeat / 4
        self.health, self.clock = health, clock
        self.worker_id: int | None = None
        self.beaten = 0.0
        self.jobs: dict[asyncio.Task[Any], JobContext] = {}
        self.on_lost: Callable[[str], None] = lambda reason: None
        self._manager: Any = None

    def track(self, app: procrastinate.App) -> None:
        """Learn this worker's id and its beats from the app's job manager (wrapped on this
        app's manager only: procrastinate tells nothing else of them)."""
        manager: Any = app.job_manager  # its methods replaced on this instance
        self._manager = manager
        register, update = manager.register_worker, manager.update_heartbeat
        unregister = manager.unregister_worker

        async def registered() -> int:
            sent = self.clock()
            worker_id = int(await register())
            self.worker_id, self.beaten = worker_id, sent
            return worker_id

        async def beaten(worker_id: int) -> None:
            sent = self.clock()
            await update(worker_id)
            if worker_id == self.worker_id:
                self.beaten = max(self.beaten, sent)
            if self.health is not None:
                self.health.beat()

        async def unregistered(worker_id: int) -> None:
            self.worker_id = None  # its row goes: nothing left to beat for
            await unregister(worker_id)

        manager.register_worker, manager.update_heartbeat = registered, beaten
        manager.unregister_worker = unregistered

    @contextlib.contextmanager
    def hold(self, context: JobContext) -> Any:
        """While a job runs in the current task: cut with the others if the lease lapses."""
        task = asyncio.current_task()
        assert task is not None
        self.jobs[task] = context
        try:
            yield
        finally:
            self.jobs.pop(task, None)

    @contextlib.asynccontextmanager
    async def kept(self) -> AsyncIterator[None]:
        """`keep` running for the block: one worker session, its stop's grace included."""
        keeper = asyncio.create_task(self.keep())
        try:
            yield
        finally:
            keeper.cancel()

    async def keep(self, sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep) -> None:
        """Check the lease every quarter heartbeat, and at the cut line, while it runs."""
        while True:
            left = self.left()
            await sleep(left if 0 < left < self.tick else self.tick)
            await self.check()

    def left(self) -> float:
        """Seconds until the jobs are cut unless a beat reaches the store."""
        return self.beaten + self.cut_after - self.clock() if self.worker_id else self.tick

    async def check(self) -> None:
        if self.worker_id is None or self._manager is None:
            return
        left = self.left()
        if self.clock() - self.beaten >= self.beat_after and left > 0:
            with contextlib.suppress(Exception):  # a store failure: the ride-out notes it
                async with asyncio.timeout(left):  # a hung store: the cut is on time
                    await self._manager.update_heartbeat(self.worker_id)
        silent = self.clock() - self.beaten
        if silent >= self.cut_after:
            self.cut(silent)

    def cut(self, silent: float) -> None:
        """Cut every job not cut yet, each to be delivered again (`worker_stopping`)."""
        jobs = [(t, c) for t, c in self.jobs.items() if not c.additional_context.get(CUT)]
        if not jobs:
            return
        reason = f"no heartbeat reached the store for {silent:.1f} s"
        log.warning(
            "%s: %d running job(s) cut, to be delivered again before another worker may "
            "take them over (--stalled-after %g)", reason, len(jobs), self.stalled_after
        )  # fmt: skip
        for task, context in jobs:
            context.additional_context[CUT] = True
            task.cancel()
        self.on_lost(reason)


def endpoint_app(health: Health, metrics: WorkerMetrics) -> Any:
    """The Starlette app of `--metrics-port`: `/healthz` (200, or 503 with why) and
    `/metrics` (Prometheus text)."""
    # deferred: starlette is loaded only with --metrics-port
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse, Response
    from starlette.routing import Route

    async def healthz(request: Request) -> Response:
        state = health.state()
        return JSONResponse(state, status_code=200 if state["ok"] else 503)

    async def metrics_page(request: Request) -> Response:
        body, content_type = metrics.exposition()
        return Response(body, media_type=content_type)

    app = Starlette(routes=[Route("/healthz", healthz), Route("/metrics", metrics_page)])
    # no redirect to `/metrics` built from the request's Host: it sent a caller anywhere
    app.router.redirect_slashes = False
    return app


class Endpoint:
    """`--metrics-port`'s server in a thread of its own, on a socket bound before it
    starts (a port in use is one line at start, `fim.server.bind`)."""

    def __init__(self, sock: socket.socket, app: Any) -> None:
        # deferred: uvicorn is loaded only with --metrics-port
        import uvicorn

        self.sock = sock
        config = uvicorn.Config(app, log_config=None, access_log=False, lifespan="off")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self._run, name="fim-worker-metrics", daemon=True)

    @property
    def url(self) -> str:
        host, port = self.sock.getsockname()[:2]
        return f"http://{f'[{host}]' if ':' in host else host}:{port}"

    def _run(self) -> None:
        # deferred: asyncio's loop of this thread only
        import asyncio

        asyncio.run(self.server.serve(sockets=[self.sock]))

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=5)
        self.sock.close()


def bind(host: str, port: int) -> socket.socket:
    """`--metrics-port`'s listening socket, bound at start: a port in use is one line
    naming the flag, not a traceback in a thread (`fim.hosts.listen`)."""
    return listen(host, port, flag=f"--metrics-port {port + 1}", backlog=64)


async def queue_depth(app: procrastinate.App) -> dict[str, int]:
    """The fim queue's jobs by status (`todo`: waiting, `doing`: running), in one count
    query; the periodic re-queuing job is not a run and is left out."""
    rows = await app.connector.execute_query_all_async(
        "SELECT status::text AS status, count(*) AS n FROM procrastinate_jobs "
        "WHERE queue_name = %(queue)s AND task_name <> %(periodic)s "
        "AND status IN ('todo', 'doing') GROUP BY status",
        queue=QUEUE,
        periodic=RETRY_STALLED,
    )
    counts = {"todo": 0, "doing": 0}
    for row in rows:
        counts[str(row["status"])] = int(row["n"])
    return counts
