"""`fim runs list|show|cancel`: every run in the state store, for operators.

What `GET /v1/runs` shows a key, from a shell on the store and across keys: the recent
runs, one run's events (stored, or its event log while it runs), and stopping a queued or
`fim worker` run (PostgreSQL: procrastinate cancels a job that has not started and aborts
one that has). A background run going on inside a `fim serve` process (SQLite) is that
process's to stop: `POST /v1/runs/{id}/cancel` on it. Like `fim approvals`, only fim.yaml
is read, and what is printed is masked with the secrets it names.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Annotated, Any, get_args

import typer

from fim.commands import ProjectOption, fail, user_errors
from fim.commands.approvals import StateOption, _run, open_store, utc_time
from fim.commands.completion import complete_agent, complete_run_id
from fim.commands.run_ids import resolve_run
from fim.commands.runs_actions import rerun, save_case
from fim.processes import alive
from fim.terminal import markup, rich_console

if TYPE_CHECKING:
    from fim.store import Store

SUMMARY_FIELDS = ("tool_errors", "hook_blocks", "input")
"""What a listed run shows of its record's data (`fim.run_summary`), as `GET /v1/runs` does."""

RunArgument = Annotated[
    str,
    typer.Argument(
        help="The run's id, a unique start of it, or `last` (the newest run).",
        autocompletion=complete_run_id,
    ),
]
JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON (lines, for a list).")]


def register(app: typer.Typer) -> None:
    runs = typer.Typer(
        name="runs", help="List, read and cancel the runs in the state store.", no_args_is_help=True
    )
    runs.command("list")(list_)
    runs.command("show")(show)
    runs.command("cancel")(cancel)
    runs.command("rerun")(rerun)
    runs.command("save-case")(save_case)
    app.add_typer(runs, name="runs")


def list_(
    ctx: typer.Context,
    kind: Annotated[str | None, typer.Option("--kind", help="agent or workflow.")] = None,
    agent: Annotated[
        str | None,
        typer.Option(
            "--agent",
            help="Only this agent's runs.",
            show_default=False,
            autocompletion=complete_agent,
        ),
    ] = None,
    status: Annotated[
        str | None,
        typer.Option("--status", help="Only runs with this status (ok, error, running ...)."),
    ] = None,
    errors: Annotated[
        bool,
        typer.Option("--errors", help="Only runs that had a tool error or a hook block."),
    ] = False,
    limit: Annotated[int, typer.Option("--limit", "-n", min=1, max=10000)] = 50,
    as_json: JsonOption = False,
    project: ProjectOption = None,
    state: StateOption = None,
) -> None:
    """The most recent runs of every key, newest first, with what each spent.

    Each run's tool errors and hook blocks are counted (`--errors`: only runs with some),
    beside the first line of its input."""
    # deferred: loading the state store costs tens of ms
    from fim.masking import known
    from fim.server.queries import RunState
    from fim.store.usage import run_totals

    if kind not in (None, "agent", "workflow"):
        fail(f"--kind is agent or workflow, not '{kind}'")
    if agent is not None and kind == "workflow":
        fail("--agent names an agent's runs, and --kind workflow excludes them")
    if status is not None and status not in get_args(RunState):
        fail(f"--status is one of {', '.join(get_args(RunState))}, not '{status}'")
    store = open_store(ctx, project, state)
    found = store.list_runs(
        kind="agent" if agent is not None else kind,
        limit=limit,
        status=status,
        name=agent,
        has_errors=True if errors else None,
    )
    records = _run(store, found)
    spent = _run(store, run_totals(store, [r.id for r in records]))  # the usage table's rows
    if as_json:
        for record in records:
            summary = {k: v for k, v in record.as_dict().items() if k != "data"}
            summary |= {k: record.data[k] for k in SUMMARY_FIELDS if k in record.data}
            usage = spent.get(record.id)
            summary["tokens"] = usage.total_tokens if usage else 0
            summary["cost"] = usage.cost if usage else None
            typer.echo(json.dumps(known().value(summary), ensure_ascii=False, default=str))
        return
    if not records:  # which store was read: a shell without FIM_STATE_URL reads a local one
        typer.echo(f"no runs in {store.display_url}")
        return
    # deferred: loading rich costs a few ms
    from rich.table import Table

    table = Table(show_lines=False)
    columns = ("id", "kind", "name", "status", "errors", "tokens", "cost $", "updated (UTC)")
    for column in columns:
        right = column in ("tokens", "cost $")
        table.add_column(column, no_wrap=True, justify="right" if right else "left")
    table.add_column("input", no_wrap=True, overflow="ellipsis", max_width=40)
    for r in records:
        name = markup(known().text(r.name))
        usage = spent.get(r.id)
        tokens = str(usage.total_tokens) if usage else "0"
        cost = "-" if usage is None or usage.cost is None else f"{usage.cost:.4f}"
        status = shown_status(r.status, r.data)
        asked = markup(known().text(str(r.data.get("input") or "")))
        row = (r.id, r.kind, name, status, error_badge(r.data), tokens, cost)
        table.add_row(*row, utc_time(r.updated_at), asked)
    rich_console(width=160).print(table)


def error_badge(data: dict[str, Any]) -> str:
    """`2 tool errors · 1 blocked` for a run whose record counts them (`fim.run_summary`),
    `-` for none, "" for a record that predates the counts."""
    if "tool_errors" not in data and "hook_blocks" not in data:
        return ""
    errors, blocks = int(data.get("tool_errors") or 0), int(data.get("hook_blocks") or 0)
    parts = [f"{errors} tool error{'' if errors == 1 else 's'}"] if errors else []
    parts += [f"{blocks} blocked"] if blocks else []
    return f"[red]{' · '.join(parts)}[/red]" if parts else "-"


def shown_status(status: str, data: dict[str, Any]) -> str:
    """A run's status for a person: `running` whose recorded process has ended (a `fim run`
    killed mid-run) is `interrupted`, which the store itself cannot know."""
    if status == "running" and alive(data.get("process")) is False:
        return "interrupted (its process ended)"
    return status


def show(
    ctx: typer.Context,
    run_id: RunArgument,
    agent: Annotated[
        str | None,
        typer.Option(
            "--agent",
            help="With `last` or a start of an id: among this agent's runs.",
            show_default=False,
            autocompletion=complete_agent,
        ),
    ] = None,
    as_json: JsonOption = False,
    project: ProjectOption = None,
    state: StateOption = None,
) -> None:
    """Print one run: its status, input, each step as `fim run -v` shows it, and its answer.

    `--json` prints the record and its events as stored."""
    # deferred: loading the state store costs tens of ms
    from fim.masking import known

    store = open_store(ctx, project, state)
    with user_errors():
        found = _run(store, _read(store, run_id, agent))
    if found is None:
        fail(f"no run '{run_id}' in {store.display_url}", _not_stored(store, run_id))
    record, events = found
    if record["kind"] == "workflow":  # its nodes are in its state, not in events
        # deferred: `fim --help` imports every command module; this loads the workflow state
        from fim.commands.workflow_view import render_run
        from fim.workflows.state import RunState

        render_run(RunState.from_dict(known().value(record.get("data") or {})), as_json)
        return
    if as_json:
        typer.echo(json.dumps(known().value({**record, "events": events}), default=str))
        return
    # deferred: rich and the event types load for this view only
    from fim.commands.run_timeline import render_agent_run

    render_agent_run(record, events, shown_status(record["status"], record.get("data") or {}))


def _not_stored(store: Store, run_id: str) -> str:
    """Where a run not in the store may be (newcomer-54 #7): a `fim serve` on SQLite keeps
    a run it is running in its own memory and stores it when it ends; on PostgreSQL a run
    is stored, `running`, from its first event."""
    if store.url.startswith("postgresql"):
        return "`fim runs list` shows the runs"
    return (
        "a run that a `fim serve` on this SQLite state is still running is stored when it "
        f"ends: until then `GET /v1/runs/{run_id}` on that server shows it, its status and "
        "its events so far; `fim runs list` shows the stored runs"
    )


async def _read(
    store: Store, typed: str, agent: str | None = None
) -> tuple[dict[str, Any], list[Any]] | None:
    """The record of the run `typed` names (`fim.commands.run_ids`) and its events (from
    the run's event log when the record has none)."""
    # deferred: loading the event log costs a few ms
    from fim.store.live import read_events

    kind = "agent" if agent is not None else None
    run_id = await resolve_run(store, typed, name=agent, kind=kind, missing_ok=True)
    record = await store.get_run(run_id)
    if record is None:
        return None
    data = record.as_dict()
    events = list(data["data"].get("events") or [])
    if not events and record.kind == "agent":
        events = [event for _seq, event in await read_events(store, run_id)]
    return data, [e for e in events if e.get("type") != "token"]


def cancel(
    ctx: typer.Context,
    run_id: RunArgument,
    project: ProjectOption = None,
    state: StateOption = None,
) -> None:
    """Stop a queued or `fim worker` run (PostgreSQL)."""
    # deferred: procrastinate and psycopg load only for this command
    from fim.workflows.queue_rows import is_postgres

    store = open_store(ctx, project, state)
    if not is_postgres(store.url):
        with user_errors():  # `_run` closes the store
            run_id = _run(store, resolve_run(store, run_id, missing_ok=True))
        fail(
            "with SQLite a background run goes on inside the `fim serve` process that started it",
            f"cancel it there: POST /v1/runs/{run_id}/cancel",
        )
    with user_errors():
        run_id, outcome = _run(store, _stop(store, run_id))
    if outcome is None:
        fail(
            f"run '{run_id}' has no job waiting or running",
            "a finished run cannot be cancelled; a run in the foreground stops when its "
            f"request is closed; one inside a server: POST /v1/runs/{run_id}/cancel",
        )
    said = "cancelled (it had not started)" if outcome == "cancelled" else "cancelling"
    typer.echo(f"run {run_id}: {said}")


async def _stop(store: Store, typed: str) -> tuple[str, str | None]:
    """(the run's id, what stopping it did: None when it has no job)."""
    # deferred: procrastinate and psycopg load only for this command
    from fim.workflows.durable import make_app, stop
    from fim.workflows.queue_rows import has_schema

    run_id = await resolve_run(store, typed, missing_ok=True)  # a job is looked up by id
    app = make_app(store.url)
    await app.open_async()
    try:
        if not await has_schema(app):
            return run_id, None  # nothing was ever queued on this store
        return run_id, await stop(app, store, run_id)
    finally:
        await app.close_async()


__all__ = ["register"]
