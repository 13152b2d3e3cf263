"""`fim workflow run|runs|show|resume` and `fim graph`: workflows from the command line.

Progress is printed per node as events arrive; `--json` prints one JSON document instead
(the run id, status and outputs), so scripts and CI can consume the result.
"""

from __future__ import annotations

import json
import shlex
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from fim.capabilities import CAPABILITIES
from fim.commands import ProjectOption, fail, load_snapshot, run_async, user_errors
from fim.commands.completion import complete_run_id, complete_workflow
from fim.commands.workflow_view import Progress, finish, interrupted, render_run
from fim.terminal import rich_console

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from fim.build.snapshot import Snapshot
    from fim.run.services import Services
    from fim.workflows.state import RunState

InputOption = Annotated[
    list[str] | None,
    typer.Option("--input", "-i", help="An input as key=value (repeatable).", show_default=False),
]
JsonOption = Annotated[bool, typer.Option("--json", help="Print one JSON document.")]

workflow_app = typer.Typer(
    name="workflow", help="Run workflows and inspect their runs.", no_args_is_help=True
)


def register(app: typer.Typer) -> None:
    app.add_typer(workflow_app, name="workflow")
    app.command("graph")(graph)


def parse_pairs(pairs: list[str] | None, *, json_values: bool) -> dict[str, Any]:
    """`["a=1", "b=x"]` -> dict. Workflow inputs stay text (the engine converts them to
    the declared types); human-node data has no declared types, so JSON values are read
    as JSON (`n=3` is a number) and anything else as text."""
    values: dict[str, Any] = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            fail(f"--input '{pair}' is not key=value", "e.g. --input order_id=42")
        if json_values:
            try:
                values[key.strip()] = json.loads(value)
                continue
            except ValueError:
                pass
        values[key.strip()] = value
    return values


def _services(snapshot: Snapshot) -> Services:
    # deferred: loading fim.config.schema costs hundreds of ms
    from fim.run.services import Services

    return Services(  # the developer's own runs (fim.run.capture)
        root=snapshot.root, state_url=snapshot.project.state, providers=CAPABILITIES, local=True
    )


async def _consume(events: Any, progress: Progress) -> None:
    async for event in events:
        progress.show(event)


def _drive(
    snapshot: Snapshot,
    start: Callable[[Services], Awaitable[tuple[Any, Any]]],
    as_json: bool,
) -> None:
    """Run a workflow to its end or pause, showing progress: `start(services)` gives the
    engine and its event stream (a new run or a resumed one)."""

    started: list[Any] = []  # the engine, once there is one: what Ctrl-C stopped

    async def go() -> RunState:
        services = _services(snapshot)
        try:
            engine, events = await start(services)
            started.append(engine)
            await _consume(events, Progress(as_json))
            assert engine.state is not None
            return engine.state
        finally:
            await services.aclose()

    with user_errors():
        try:
            state = run_async(go())
        except KeyboardInterrupt:
            interrupted(started[0].state if started else None)
            raise
    finish(state, as_json)


@workflow_app.command("run", context_settings={"allow_extra_args": True})
def run(
    ctx: typer.Context,
    name: Annotated[
        str,
        typer.Argument(
            help="Workflow name (a file in workflows/).", autocompletion=complete_workflow
        ),
    ],
    inputs: InputOption = None,
    as_json: JsonOption = False,
    project: ProjectOption = None,
) -> None:
    """Run a workflow and print each node's progress and the outputs."""
    # deferred: loading fim.config.schema costs hundreds of ms
    from fim.workflows.engine import WorkflowEngine

    extra = list(ctx.args)  # positional words after the name (allow_extra_args)
    if extra:  # `fim workflow run report customer_id=42`: inputs are options
        fail(
            f"unexpected argument '{extra[0]}'",
            "give inputs as options: fim workflow run "
            f"{name} {' '.join('--input ' + shlex.quote(x) for x in extra)}",
        )
    snapshot = load_snapshot(ctx, project)
    values = parse_pairs(inputs, json_values=False)

    async def start(services: Services) -> tuple[Any, Any]:
        engine = WorkflowEngine(snapshot, name, services)
        return engine, engine.run(values)

    _drive(snapshot, start, as_json)


@workflow_app.command("resume")
def resume(
    ctx: typer.Context,
    run_id: Annotated[
        str,
        typer.Argument(
            help="The paused, orphaned or Ctrl-C'd (cancelled) run's id, a unique start of it, "
            "or `last`.",
            autocompletion=complete_run_id,
        ),
    ],
    approve: Annotated[bool, typer.Option("--approve", help="Approve the human node.")] = False,
    deny: Annotated[bool, typer.Option("--deny", help="Deny the human node.")] = False,
    inputs: InputOption = None,
    node: Annotated[
        str | None, typer.Option("--node", help="Which human node, when several wait.")
    ] = None,
    force: Annotated[
        bool,
        typer.Option(
            "--force",
            help="Recover a run recorded as running on another host (its process is gone).",
        ),
    ] = False,
    as_json: JsonOption = False,
    project: ProjectOption = None,
) -> None:
    """Continue a run paused at a human node, orphaned, or stopped with Ctrl-C.

    `--input k=v` approves with data; after a crash or Ctrl-C the nodes that were running
    run again (the finished ones keep their outputs)."""
    # deferred: loading fim.config.schema costs hundreds of ms
    from fim.workflows.engine import WorkflowEngine, load_run

    if approve and deny:
        fail("--approve and --deny exclude each other")
    data = parse_pairs(inputs, json_values=True)
    if deny and data:
        fail("--input gives data to an approval", "use it with --approve or alone")
    decision: bool | None = True if approve or data else (False if deny else None)
    snapshot = load_snapshot(ctx, project)

    async def start(services: Services) -> tuple[Any, Any]:
        found = await _resolve(services, run_id)
        paused = await load_run(services, found)
        engine = WorkflowEngine(snapshot, paused.workflow, services)
        events = engine.resume(found, decision, data, node=node, force=force, cancelled=True)
        return engine, events

    _drive(snapshot, start, as_json)


@workflow_app.command("runs")
def runs(
    ctx: typer.Context,
    limit: Annotated[int, typer.Option("--limit", "-n", help="How many runs.")] = 20,
    as_json: JsonOption = False,
    project: ProjectOption = None,
) -> None:
    """List recent workflow runs, newest first.

    `orphaned`: its process died mid-run; `fim workflow resume RUN_ID` finishes it, as it
    does a run `cancelled` by Ctrl-C."""
    # deferred: loading fim.masking costs hundreds of ms
    from fim.store import get_store
    from fim.workflows.state import KIND, RunState, orphaned, record_data

    snapshot = load_snapshot(ctx, project)

    async def go() -> list[Any]:
        services = _services(snapshot)
        try:
            return await get_store(services).list_runs(kind=KIND, limit=limit)
        finally:
            await services.aclose()

    with user_errors():
        records = run_async(go())
    rows = []
    for record in records:
        data = record_data(record)
        nodes = data.get("nodes", {})
        done = sum(1 for s in nodes.values() if s.get("status") in ("ok", "skipped"))
        rows.append(
            {
                "run_id": record.id,
                "workflow": record.name,
                "status": record.status,
                "orphaned": orphaned(RunState.from_dict(data)),
                "started": record.created_at,
                "duration_ms": data.get("duration_ms"),
                "nodes": f"{done}/{len(nodes)}",
            }
        )
    if as_json:
        typer.echo(json.dumps(rows, indent=2))
        return
    # deferred: loading rich costs a few ms
    from rich.table import Table

    table = Table("run", "workflow", "status", "started", "duration", "nodes done")
    for row in rows:
        started = time.strftime("%m-%d %H:%M:%S", time.localtime(row["started"]))
        ms = row["duration_ms"]
        table.add_row(
            row["run_id"],
            row["workflow"],
            "orphaned" if row["orphaned"] else row["status"],
            started,
            "" if ms is None else f"{ms / 1000:.2f}s",
            row["nodes"],
        )
    rich_console().print(table if rows else "no workflow runs yet")


@workflow_app.command("show")
def show(
    ctx: typer.Context,
    run_id: Annotated[
        str,
        typer.Argument(
            help="Run id (see `fim workflow runs`), a unique start of it, or `last`.",
            autocompletion=complete_run_id,
        ),
    ],
    as_json: JsonOption = False,
    project: ProjectOption = None,
) -> None:
    """Show one run: inputs, each node's status, output and timing, and the outputs."""
    # deferred: loading fim.config.schema costs hundreds of ms
    from fim.workflows.engine import load_run

    snapshot = load_snapshot(ctx, project)

    async def go() -> RunState:
        services = _services(snapshot)
        try:
            return await load_run(services, await _resolve(services, run_id))
        finally:
            await services.aclose()

    with user_errors():
        state = run_async(go())
    render_run(state, as_json)


async def _resolve(services: Services, typed: str) -> str:
    """The workflow run `typed` names: its id, a unique start of it, or `last`."""
    # deferred: loading the state store costs tens of ms
    from fim.commands.run_ids import resolve_run
    from fim.store import get_store

    return await resolve_run(get_store(services), typed, kind="workflow", missing_ok=True)


def graph(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="Workflow name.", autocompletion=complete_workflow)],
    output: Annotated[
        Path | None, typer.Option("--output", "-o", help="Write to a file instead.")
    ] = None,
    project: ProjectOption = None,
) -> None:
    """Print a workflow as a Mermaid flowchart."""
    # deferred: loading fim.config.schema costs hundreds of ms
    from fim.workflows.graph import mermaid

    snapshot = load_snapshot(ctx, project)
    decl = snapshot.workflows.get(name)
    if decl is None:
        fail(
            f"unknown workflow '{name}'",
            f"workflows: {', '.join(sorted(snapshot.workflows)) or 'none'}",
        )
    text = mermaid(decl, name)
    if output is None:
        typer.echo(text, nl=False)
    else:
        output.write_text(text, encoding="utf-8")
