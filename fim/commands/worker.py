"""`fim worker`: a process that claims durable workflow jobs through procrastinate."""

from __future__ import annotations

import asyncio
import contextlib
import importlib
from pathlib import Path
from typing import Annotated, Any

import typer

from fim.capabilities import CAPABILITIES
from fim.commands import ProjectOption, load_snapshot, run_async, user_errors
from fim.commands.serve import (
    CheckoutOption,
    GitOption,
    GitPathOption,
    IntervalOption,
    RefOption,
    git_source,
)
from fim.errors import RunError


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


def worker(
    ctx: typer.Context,
    concurrency: Annotated[
        int, typer.Option(min=1, help="Jobs this process runs at once (global = the sum).")
    ] = 4,
    stalled_after: Annotated[
        float,
        typer.Option(help="Seconds without a worker heartbeat before its jobs are retried."),
    ] = 30.0,
    heartbeat: Annotated[float, typer.Option(help="Seconds between this worker's heartbeats.")] = (
        10.0
    ),
    tools: Annotated[
        str | None, typer.Option(help="module:function returning extra tools for tool nodes.")
    ] = None,
    project: ProjectOption = None,
    git: GitOption = None,
    ref: RefOption = "main",
    interval: IntervalOption = "30s",
    git_checkout: CheckoutOption = None,
    git_path: GitPathOption = "",
) -> None:
    """Run queued workflow and background agent runs (state in PostgreSQL).

    Needs `state: postgresql://...`; start several anywhere. With `--git`, the project
    comes from a git remote and is pulled like `fim serve --git`: a job runs on the commit
    current when it starts, and its run record carries that commit."""
    # deferred: loading fim.config.schema costs hundreds of ms
    from fim.build.reload import SnapshotHolder
    from fim.workflows.durable import QUEUE, ensure_schema, make_app

    source = None
    seconds = 0.0
    if git is not None:  # GitOps pull (fim.build.gitops), exactly as `fim serve --git`
        # deferred: only `--git` needs the GitOps puller
        from fim.build.gitops import initial_snapshot

        with user_errors():
            source, seconds = git_source(git, ref, interval, git_checkout, git_path)
            snapshot = initial_snapshot(source)
    else:
        snapshot = load_snapshot(ctx, project)
    holder = SnapshotHolder(snapshot)
    root: Path = snapshot.root
    with user_errors():
        extra = _tools(tools)
        app = make_app(
            snapshot.project.state,
            lambda: holder.current,
            tools=extra,
            stalled_after=stalled_after,
            providers=CAPABILITIES,
        )

    async def main() -> None:
        stop = asyncio.Event()
        puller = None
        if source is not None:
            # deferred: only `--git` needs the GitOps poller
            from fim.build.gitops import poll

            puller = asyncio.create_task(poll(source, holder, interval=seconds, stop=stop))
        try:
            async with app.open_async():
                await ensure_schema(app)
                await asyncio.to_thread(_warm_up)
                version = f", commit {snapshot.version[:12]}" if source is not None else ""
                typer.echo(f"fim worker: {root} (concurrency {concurrency}{version})", err=True)
                await app.run_worker_async(
                    queues=[QUEUE],
                    concurrency=concurrency,
                    update_heartbeat_interval=heartbeat,
                    stalled_worker_timeout=stalled_after,
                    install_signal_handlers=True,
                )
        finally:
            stop.set()
            if puller is not None:
                puller.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await puller
            if source is not None and source.lock is not None:
                source.lock.close()

    with user_errors(), contextlib.suppress(KeyboardInterrupt):
        run_async(main())
