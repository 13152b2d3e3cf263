"""`fim worker`: a process that claims durable workflow jobs through procrastinate."""

from __future__ import annotations

import contextlib
import importlib
from pathlib import Path
from typing import Annotated, Any

import typer

from fim.commands import ProjectOption, load_snapshot, run_async, user_errors
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
) -> None:
    """Run queued workflow runs (needs `state: postgresql://...`); start several anywhere."""
    # deferred: loading fim.config.schema costs hundreds of ms
    from fim.workflows.durable import QUEUE, ensure_schema, make_app

    snapshot = load_snapshot(ctx, project)
    root: Path = snapshot.root
    with user_errors():
        extra = _tools(tools)
        app = make_app(
            snapshot.project.state,
            lambda: snapshot,
            tools=extra,
            stalled_after=stalled_after,
        )

    async def main() -> None:
        async with app.open_async():
            await ensure_schema(app)
            typer.echo(f"fim worker: {root} (concurrency {concurrency})", err=True)
            await app.run_worker_async(
                queues=[QUEUE],
                concurrency=concurrency,
                update_heartbeat_interval=heartbeat,
                stalled_worker_timeout=stalled_after,
                install_signal_handlers=True,
            )

    with user_errors(), contextlib.suppress(KeyboardInterrupt):
        run_async(main())
