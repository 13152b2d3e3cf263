"""`fim usage`: tokens and cost per day and agent, from the state store.

Every finished agent run (CLI, server, eval, delegation) leaves one row there
(`fim.store.usage`), so this sees what every process sharing the store spent. Like `fim
approvals`, only fim.yaml is read.
"""

from __future__ import annotations

import datetime as dt
import json
from typing import Annotated

import typer

from fim.commands import ProjectOption, fail
from fim.commands.approvals import StateOption, _run, open_store


def register(app: typer.Typer) -> None:
    app.command("usage")(usage)


def usage(
    ctx: typer.Context,
    days: Annotated[
        int, typer.Option("--days", "-d", min=1, help="Days back, today included.")
    ] = 7,
    agent: Annotated[str | None, typer.Option("--agent", "-a", help="Only this agent.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON lines.")] = False,
    project: ProjectOption = None,
    state: StateOption = None,
) -> None:
    """Tokens and cost per day and agent (UTC days, newest first)."""
    # deferred: loading fim.masking costs tens of ms
    from fim.store.usage import summary

    if days > 36500:
        fail("--days is at most 36500")
    since = (dt.datetime.now(dt.UTC).date() - dt.timedelta(days=days - 1)).isoformat()
    store = open_store(ctx, project, state)
    rows = _run(store, summary(store, since=since, agent=agent))
    if as_json:
        for row in rows:
            typer.echo(json.dumps(row))
        return
    if not rows:
        typer.echo(f"no runs since {since}")
        return
    # deferred: loading rich costs a few ms
    from rich.console import Console
    from rich.table import Table

    table = Table(show_lines=False)
    for column in ("day", "agent", "runs", "calls", "prompt", "completion", "cached", "cost $"):
        table.add_column(column, justify="left" if column in ("day", "agent") else "right")
    for row in rows:
        cost = "?" if row["cost"] is None else f"{row['cost']:.4f}"
        if row["cost"] is not None and row["unpriced_runs"]:
            cost += f" (+{row['unpriced_runs']} unpriced)"
        table.add_row(
            row["day"],
            row["agent"],
            str(row["runs"]),
            str(row["calls"]),
            str(row["prompt_tokens"]),
            str(row["completion_tokens"]),
            str(row["cached_tokens"]),
            cost,
        )
    Console(width=120).print(table)
