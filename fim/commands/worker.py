"""`fim worker`: a process that claims durable workflow jobs through procrastinate.

Its snapshot follows the project as `fim serve`'s does: `-p DIR` runs the same file watcher
(`fim.build.reload.watch`; `--no-reload` turns it off), `--git` the same poller. A job runs
on no snapshot older than the one that accepted it (`fim.workflows.skew`): a worker behind
reloads first, waits up to `--skew-wait` seconds, then fails the run with `snapshot skew`.

It is watched like `fim serve`: `--log-format json` writes every line (its start-up line,
procrastinate's, fim's) as one JSON object, each line of a job with its `run_id`;
`--metrics-port` serves `/healthz` and `/metrics` (`fim.workflows.worker_watch`).
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from fim.capabilities import CAPABILITIES
from fim.commands import ProjectOption, load_snapshot, run_async, user_errors
from fim.commands.serve import (
    CheckoutOption,
    FallbackOption,
    GitOption,
    GitPathOption,
    IntervalOption,
    LogFormat,
    RefOption,
    ShutdownOption,
    git_source,
)
from fim.commands.worker_flags import check_stalled
from fim.errors import RunError

if TYPE_CHECKING:
    from fim.workflows.skew import WorkerSnapshots
    from fim.workflows.worker_watch import Endpoint, Health


def register(app: typer.Typer) -> None:
    app.command("worker")(worker)


def _tools(spec: str | None) -> list[Any]:
    """Extra tools from `module:function` (a factory returning tools), for embedding apps."""
    if not spec:
        return []
    module, _, func = spec.partition(":")
    if not module or not func:
        raise RunError(f"--tools '{spec}' is not module:function", hint="e.g. myapp.tools:all")
    return list(getattr(importlib.import_module(module), func)())


def _warm_up() -> None:
    """Import what jobs run before taking one. An import inside the first job would block
    the event loop, where procrastinate's heartbeat runs too: on a loaded machine, seconds
    without a heartbeat make another worker take the job while this one still runs it."""
    # deferred on purpose: loaded here, before the first job, not by `fim --help`
    import fim.connectors.http
    import fim.run.agent
    import fim.run.queued
    import fim.store.sessions
    import fim.workflows.adapters
    import fim.workflows.engine  # noqa: F401


def _store_at_start(state_url: str, root: Path) -> Callable[[Any], Awaitable[None]]:
    """Open (and migrate) the state store as `fim serve` does at start, failing in one line
    (`fim.store.health.open_or_fail`); what then opens the queue's pool and makes its
    schema, failing alike (a pool that never connects: a line, not a PoolTimeout trace)."""
    # deferred: loading fim.store costs a few ms
    from fim.commands.store import start_queue
    from fim.store.health import check_at_start, start_error, store_failure

    db = check_at_start(state_url, root)
    schema = start_queue(db)

    async def opened(app: Any) -> None:
        try:
            async with app.open_async():
                await schema(app)
        except Exception as exc:
            line = None if isinstance(exc, RunError) else store_failure(exc)
            if line is None:
                raise
            raise start_error(db, f"job queue: {line}") from None

    return opened


def observed(
    log_level: str, log_format: LogFormat, metrics_port: int | None, metrics_host: str,
    stalled_after: float,
) -> tuple[Any, Health, Endpoint | None]:  # fmt: skip
    """The worker's log (`fim.observe.logs`, as `fim serve`'s: text or JSON lines, each
    line of a job with its run id), its metrics (None without prometheus-client), its
    health and, with `--metrics-port`, the endpoint serving both (bound now: a port in
    use is one line before anything starts)."""
    # deferred: loading fim.observe and the queue's watchers costs tens of ms
    from fim.observe import metrics as prometheus
    from fim.observe.logs import configure
    from fim.workflows.worker_watch import Endpoint, Health, JobFields, bind, endpoint_app

    configure(log_level, log_format.value)
    for handler in logging.getLogger().handlers:
        handler.addFilter(JobFields())
    metrics = prometheus.WorkerMetrics() if prometheus.INSTALLED else None
    health = Health(stale_after=stalled_after)
    if metrics_port is None:
        return metrics, health, None
    if metrics is None:
        raise RunError(f"--metrics-port: {prometheus.MISSING}")
    return (
        metrics,
        health,
        Endpoint(bind(metrics_host, metrics_port), endpoint_app(health, metrics)),
    )


def worker_snapshots(holder: Any, source: Any, *, reload: bool, wait: float) -> WorkerSnapshots:
    """How this worker tells whether it may run a job on its snapshot
    (`fim.workflows.skew`): `-p` recompiles the folder (unless `--no-reload`: then only
    the job's own version runs), `--git` fetches and compares commits."""
    # deferred: loading fim.config.schema costs hundreds of ms
    from fim.build.reload import reload_once
    from fim.workflows.skew import WorkerSnapshots, origin_of

    root = holder.current.root
    if source is not None:
        # deferred: only `--git` needs the GitOps puller
        from fim.build.gitops import pull_once

        async def fetch() -> bool:
            await pull_once(source, holder)
            return not holder.errors

        async def descends(older: str, newer: str) -> bool:
            # the versions come from jobs in the store: `descends` hands git commit ids only
            return bool(await asyncio.to_thread(source.descends, newer, older))

        return WorkerSnapshots(holder, fetch, descends, origin_of(root), wait)
    if not reload:
        return WorkerSnapshots(holder, origin=origin_of(root), wait=0.0)

    async def recompile() -> bool:
        await reload_once(root, holder)
        return not holder.errors

    return WorkerSnapshots(holder, recompile, origin=origin_of(root), wait=wait)


def worker(
    ctx: typer.Context,
    concurrency: Annotated[
        int, typer.Option(min=1, help="Jobs this process runs at once (global = the sum).")
    ] = 4,
    stalled_after: Annotated[
        float,
        typer.Option(
            help="Seconds without a heartbeat of this worker before its jobs are retried "
            "(at least 3 heartbeats, at most 86400: a day)."
        ),
    ] = 30.0,
    heartbeat: Annotated[
        float, typer.Option(help="Seconds between this worker's heartbeats (0.1 to 300).")
    ] = 10.0,
    reload: Annotated[
        bool,
        typer.Option("--reload/--no-reload", help="Recompile and swap on file changes (-p)."),
    ] = True,
    skew_wait: Annotated[
        float,
        typer.Option(
            min=0,
            help="Seconds a job accepted on a snapshot this worker has not reached waits "
            "for it before the run fails (snapshot skew; at most 86400).",
        ),
    ] = 60.0,
    tools: Annotated[
        str | None, typer.Option(help="module:function returning extra tools for tool nodes.")
    ] = None,
    project: ProjectOption = None,
    git: GitOption = None,
    ref: RefOption = "main",
    interval: IntervalOption = "30s",
    git_checkout: CheckoutOption = None,
    git_path: GitPathOption = "",
    git_fallback: FallbackOption = "none",
    shutdown_timeout: ShutdownOption = None,
    store_retry_timeout: Annotated[  # a PostgreSQL restart takes seconds, a failover ~2 min
        float,
        typer.Option(
            help="Seconds a store refusing the worker is waited for (reconnecting with "
            "backoff) before the worker exits 1 (at most 86400).",
        ),
    ] = 120.0,
    log_level: Annotated[
        str, typer.Option(help="Log level (fim's, procrastinate's): debug, info, warning...")
    ] = "info",
    log_format: Annotated[
        LogFormat,
        typer.Option(help="text, or json: one JSON object per line, as fim serve's."),
    ] = LogFormat.text,
    metrics_port: Annotated[
        int | None,
        typer.Option(
            min=0,
            max=65535,
            help="Serve /healthz and /metrics (Prometheus) on this port (default: off).",
            show_default=False,
        ),
    ] = None,
    metrics_host: Annotated[
        str, typer.Option(help="Address --metrics-port listens on.")
    ] = "127.0.0.1",
) -> None:
    """Run queued workflow and background agent runs (state in PostgreSQL).

    Needs `state: postgresql://...`; start several anywhere. With `--git`, the project
    comes from a git remote and is pulled like `fim serve --git` (SIGHUP fetches at once,
    `--git-fallback last-good` too): a job runs on the commit current when it starts, and
    its run record carries that commit."""
    # deferred: loading fim.config.schema costs hundreds of ms
    from fim.build.reload import SnapshotHolder
    from fim.workflows.durable import make_app
    from fim.workflows.job_owner import own_writes
    from fim.workflows.queue_rows import QUEUE, postgres_dsn, prune_bound
    from fim.workflows.worker_store import Outage, guard, postgres_probe, ride_out
    from fim.workflows.worker_watch import JobWatch, Lease, watch_resolve

    with user_errors():
        check_stalled(stalled_after, heartbeat, skew_wait, store_retry_timeout)
        metrics, health, endpoint = observed(
            log_level, log_format, metrics_port, metrics_host, stalled_after
        )
    source = None
    seconds = 0.0
    if git is not None:  # GitOps pull (fim.build.gitops), exactly as `fim serve --git`
        # deferred: only `--git` needs the GitOps puller
        from fim.build.gitops import initial_snapshot

        with user_errors():
            source, seconds = git_source(
                git, ref, interval, git_checkout, git_path, fallback=git_fallback
            )
            snapshot = initial_snapshot(source)
    else:
        snapshot = load_snapshot(ctx, project)
    holder = SnapshotHolder(snapshot)
    root: Path = snapshot.root
    snapshots = worker_snapshots(holder, source, reload=reload, wait=skew_wait)
    # deferred: the MCP client's manager (imports nothing heavy itself)
    from fim.mcp.manager import McpManager

    mcp = McpManager(root)
    with user_errors():
        # a wrong store or a role without fim's privileges: one line now, not a failed job
        # (before the queue's app, whose start-up logs would come first)
        queue_schema = _store_at_start(snapshot.project.state, root)
        extra = _tools(tools)
        app = make_app(
            snapshot.project.state,
            lambda: holder.current,
            tools=extra,
            stalled_after=stalled_after,
            providers=CAPABILITIES,
            resolve=watch_resolve(snapshots.for_job),
            mcp=mcp,
        )
    lease = Lease(heartbeat, stalled_after, health)  # jobs cut before another worker's retry
    lease.track(app)

    async def main() -> None:
        # deferred: loading watchfiles and the GitOps code only where they run
        from fim.build.gitops import poll
        from fim.build.reload import reload_on_hangup, watch
        from fim.observe.logs import announce
        from fim.store.engine import Database
        from fim.version import fim_version

        stop = asyncio.Event()
        puller = None
        if source is not None:
            pull = poll(source, holder, interval=seconds, stop=stop, on_hangup=True)
            puller = asyncio.create_task(pull)  # SIGHUP: fetch now, as `fim serve --git`
        elif reload:  # exactly `fim serve`'s watcher: a job never waits for a stale snapshot
            puller = asyncio.create_task(watch(root, holder, stop=stop))
        # SIGHUP: `-p` reloads now (with --git, the poller fetches now)
        hangup = reload_on_hangup(root, holder, stop, reload) if source is None else None
        store = Database(snapshot.project.state, root).display_url
        outage = Outage(store, store_retry_timeout)
        own_writes(app)  # a held write landing late never ends another worker's run
        guard(app, outage)  # a store refusing the worker: ridden out (`ride_out`), no traceback
        lease.on_lost = outage.noted  # its jobs cut: the worker starts again, as after an outage
        watch_jobs = JobWatch(metrics, outage, lease)
        # a job still going after it is aborted and delivered again (`DeliverAgain`)
        graceful = snapshot.project.server.shutdown_timeout
        graceful = graceful if shutdown_timeout is None else shutdown_timeout

        async def session() -> None:
            async with app.open_async(), lease.kept():  # it beats on through a stop's grace
                await app.run_worker_async(
                    queues=[QUEUE],
                    concurrency=concurrency,
                    update_heartbeat_interval=heartbeat,
                    # procrastinate deletes, at start, workers silent for longer: never a
                    # live one whose own bound is longer than ours (its jobs would look stalled)
                    stalled_worker_timeout=await prune_bound(app, stalled_after),
                    install_signal_handlers=False,  # `ride_out`'s: it tells a stop from an outage
                    shutdown_graceful_timeout=graceful,
                    worker_middleware=[watch_jobs],
                )

        try:
            await queue_schema(app)
            await asyncio.to_thread(_warm_up)
            commit = snapshot.version if source is not None else None
            version = f", commit {commit[:12]}" if commit is not None else ""
            served = f" · metrics {endpoint.url}" if endpoint is not None else ""
            announce(
                f"fim worker: {root} (concurrency {concurrency}{version}) · store "
                f"{store} · fim {fim_version()}{served}",
                logger_name="fim.worker",
                project=str(root),
                concurrency=concurrency,
                commit=commit,
                store=store,
                fim_version=fim_version(),
                metrics_url=endpoint.url if endpoint is not None else None,
            )
            health.start()
            if endpoint is not None:
                endpoint.start()
            probe = postgres_probe(postgres_dsn(snapshot.project.state))
            await ride_out(session, outage, probe, on_down=health.stop, on_up=health.start)
        finally:
            health.stop()
            if endpoint is not None:
                endpoint.stop()
            stop.set()
            await mcp.aclose()
            for task in (puller, hangup):
                if task is not None:
                    task.cancel()
                    with contextlib.suppress(asyncio.CancelledError, Exception):
                        await task
            if source is not None and source.lock is not None:
                source.lock.close()

    with user_errors(), contextlib.suppress(KeyboardInterrupt):
        run_async(main())
