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
from fim.terminal import markup

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

    return Services(root=snapshot.root, state_url=snapshot.project.state, providers=CAPABILITIES)


def _short(value: Any, limit: int = 80) -> str:
    """One line of a value for a terminal, with rich markup escaped (outputs are data)."""
    text = value if isinstance(value, str) else json.dumps(value, default=str, ensure_ascii=False)
    text = " ".join(text.split())
    return markup(text if len(text) <= limit else text[: limit - 1] + "…")


class Progress:
    """Prints one line per node event (nothing with --json)."""

    def __init__(self, quiet: bool) -> None:
        # deferred: loading rich costs a few ms
        from rich.console import Console

        self.quiet = quiet
        self.console = Console(highlight=False)

    def show(self, event: Any) -> None:
        if self.quiet:
            return
        # deferred: loading fim.masking costs a few ms
        from fim.masking import mask_model

        event = mask_model(event)
        kind = event.type
        if kind == "node_started":
            self.console.print(f"[cyan]▶[/] {event.node} [dim]({event.node_type})[/]")
        elif kind == "node_finished":
            self.console.print(
                f"[green]✓[/] {event.node} [dim]{event.duration_ms:.0f} ms[/]  "
                f"{_short(event.output)}",
                markup=True,
            )
        elif kind == "node_skipped":
            self.console.print(f"[yellow]↷[/] {event.node} [dim]skipped: {_short(event.reason)}[/]")
        elif kind == "node_failed":
            self.console.print(f"[red]✗[/] {event.node}: {_short(event.error, 500)}")
        elif kind == "notice":
            self.console.print(f"[dim]· {_short(event.message, 500)}[/]")
        elif kind == "error":
            self.console.print(f"[red]error:[/] {_short(event.message, 500)}")


def _finish(state: RunState, as_json: bool) -> None:
    # deferred: loading rich costs a few ms
    from rich.console import Console

    # deferred: loading fim.masking costs hundreds of ms
    from fim.masking import known
    from fim.workflows.state import RunState

    state = RunState.from_dict(known().value(state.to_dict()))

    if as_json:
        doc: dict[str, Any] = {
            "run_id": state.run_id,
            "workflow": state.workflow,
            "status": state.status,
            "outputs": state.outputs,
            "snapshot_version": state.snapshot_version,
        }
        if state.resumed_on:
            doc["resumed_on"] = state.resumed_on
        if state.error:
            doc["error"] = state.error
        waiting = {n: s.approval_id for n, s in state.nodes.items() if s.status == "waiting"}
        if waiting:
            doc["waiting"] = waiting
        typer.echo(json.dumps(doc, default=str, ensure_ascii=False, indent=2))
    else:
        console = Console(highlight=False)
        console.print(f"[bold]{state.workflow}[/] run {state.run_id}: {state.status}")
        if state.resumed_on:  # a reload came between its legs: say what ran where
            console.print(
                f"[dim]started on snapshot {state.snapshot_version}, "
                f"resumed on {', '.join(state.resumed_on)}[/]"
            )
        if state.status == "paused":
            console.print(
                f"resume with: fim workflow resume {state.run_id} --approve|--deny [--input k=v]"
            )
        elif state.outputs:
            console.print_json(json.dumps(state.outputs, default=str, ensure_ascii=False))
        if state.error:
            console.print(f"[red]{_short(state.error, 1000)}[/]")
    if state.status in ("failed", "cancelled"):
        raise typer.Exit(1)


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

    async def go() -> RunState:
        services = _services(snapshot)
        try:
            engine, events = await start(services)
            await _consume(events, Progress(as_json))
            assert engine.state is not None
            return engine.state
        finally:
            await services.aclose()

    with user_errors():
        state = run_async(go())
    _finish(state, as_json)


@workflow_app.command("run", context_settings={"allow_extra_args": True})
def run(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="Workflow name (a file in workflows/).")],
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
    run_id: Annotated[str, typer.Argument(help="The paused (or orphaned) run's id.")],
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
    """Continue a run paused at a human node, or one whose process died mid-run.

    `--input k=v` approves with data; after a crash the nodes that were running run again."""
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
        paused = await load_run(services, run_id)
        engine = WorkflowEngine(snapshot, paused.workflow, services)
        return engine, engine.resume(run_id, decision, data, node=node, force=force)

    _drive(snapshot, start, as_json)


@workflow_app.command("runs")
def runs(
    ctx: typer.Context,
    limit: Annotated[int, typer.Option("--limit", "-n", help="How many runs.")] = 20,
    as_json: JsonOption = False,
    project: ProjectOption = None,
) -> None:
    """List recent workflow runs, newest first.

    `orphaned`: its process died mid-run; `fim workflow resume RUN_ID` finishes it."""
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
    from rich.console import Console
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
    Console().print(table if rows else "no workflow runs yet")


@workflow_app.command("show")
def show(
    ctx: typer.Context,
    run_id: Annotated[str, typer.Argument(help="Run id (see `fim workflow runs`).")],
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
            return await load_run(services, run_id)
        finally:
            await services.aclose()

    with user_errors():
        state = run_async(go())
    render_run(state, as_json)


def render_run(state: RunState, as_json: bool) -> None:
    """One workflow run as `fim workflow show` prints it (`fim runs show` of a workflow run
    too): inputs, a table of the nodes, the outputs and the error."""
    if as_json:
        typer.echo(json.dumps(state.to_dict(), default=str, ensure_ascii=False, indent=2))
        return
    # deferred: loading rich costs a few ms
    from rich.console import Console
    from rich.table import Table

    console = Console(highlight=False)
    console.print(f"[bold]{state.workflow}[/] run {state.run_id}: {state.status}")
    console.print(f"inputs: {_short(state.inputs, 200)}")
    table = Table("node", "type", "status", "tries", "duration", "output / error")
    for node_id, ns in state.nodes.items():
        detail = _short(ns.error or ns.reason or ("" if ns.output is None else ns.output), 200)
        if ns.status == "waiting":
            detail = _short(f"approval {ns.approval_id}: {ns.prompt}", 200)
        took = "" if ns.duration_ms is None else f"{ns.duration_ms:.0f} ms"
        table.add_row(node_id, ns.type, ns.status, str(ns.attempts or ""), took, detail)
    console.print(table)
    if state.outputs:
        console.print("outputs:")
        console.print_json(json.dumps(state.outputs, default=str, ensure_ascii=False))
    if state.error:
        console.print(f"[red]{_short(state.error, 1000)}[/]")


def graph(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="Workflow name.")],
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
