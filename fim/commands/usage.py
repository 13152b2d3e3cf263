"""`fim usage`: tokens and cost per day and agent (or per session, or per key), from the
state store.

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
from fim.commands.approvals import StateOption, _run, open_store, project_settings
from fim.terminal import markup, rich_console


def register(app: typer.Typer) -> None:
    app.command("usage")(usage)


def usage(
    ctx: typer.Context,
    days: Annotated[
        int, typer.Option("--days", "-d", min=1, help="Days back, today included.")
    ] = 7,
    agent: Annotated[str | None, typer.Option("--agent", "-a", help="Only this agent.")] = None,
    by: Annotated[
        str,
        typer.Option(
            "--by",
            help="Sum per day and agent (agent), per session (session), or per API key or "
            "tenant that started the runs (key).",
        ),
    ] = "agent",
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON lines.")] = False,
    project: ProjectOption = None,
    state: StateOption = None,
) -> None:
    """Tokens and cost per day and agent (UTC days, newest first), per session or per key."""
    # deferred: loading fim.masking costs tens of ms
    from fim.store.usage import GROUPS, key_labels, summary

    if days > 36500:
        fail("--days is at most 36500")
    if by not in GROUPS:
        fail(f"--by: one of {', '.join(GROUPS)}, got {by!r}")
    since = (dt.datetime.now(dt.UTC).date() - dt.timedelta(days=days - 1)).isoformat()
    if by == "key" and not state:  # fim.yaml read once: its keys label the rows
        # deferred: loading fim.masking costs tens of ms
        from fim.store import Store

        root, settings = project_settings(ctx, project)
        store, labels = Store(settings.state, root=root), key_labels(settings.server)
    else:
        store, labels = open_store(ctx, project, state), {}
    shown = store.display_url  # before `_run` closes it
    rows = _run(store, summary(store, since=since, agent=agent, by=by))
    if by == "key":  # a tenant by its name, a key by its place in fim.yaml, never the hash
        for row in rows:
            row["key"] = labels.get(row["key"]) or str(row["key"])[:12]
    if as_json:
        for row in rows:
            typer.echo(json.dumps(row))
        return
    if not rows:  # which store was read: a shell without FIM_STATE_URL reads a local one
        typer.echo(f"no runs since {since} in {shown}")
        return
    # deferred: loading rich costs a few ms
    from rich.table import Table

    keys = {"agent": ("day", "agent"), "session": ("session", "name", "day"), "key": ("key",)}[by]
    table = Table(show_lines=False)
    counts = ("runs", "calls", "prompt", "completion", "cached", "cost $")
    for column in (*keys, *counts):
        table.add_column(column, justify="right" if column in counts else "left")
    for row in rows:
        cost = "?" if row["cost"] is None else f"{row['cost']:.4f}"
        if row["cost"] is not None and row["unpriced_runs"]:
            cost += f" (+{row['unpriced_runs']} unpriced)"
        table.add_row(
            *(markup(str(row[k] or "-")) for k in keys),
            str(row["runs"]),
            str(row["calls"]),
            str(row["prompt_tokens"]),
            str(row["completion_tokens"]),
            str(row["cached_tokens"]),
            cost,
        )
    rich_console(width=120).print(table)
