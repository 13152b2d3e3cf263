"""`fim prune`: delete now what fim.yaml's `retention:` no longer keeps.

`fim serve` prunes hourly; this is for stores no server prunes (a `fim worker` fleet, CLI
and CI use) and for seeing what would go (`--dry-run`). Like `fim approvals`, only
fim.yaml is read.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from fim import private
from fim.commands import ProjectOption
from fim.commands.approvals import StateOption, _run, project_settings


def register(app: typer.Typer) -> None:
    app.command("prune")(prune)


def prune(
    ctx: typer.Context,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", "-n", help="Count what would go; delete nothing.")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
    project: ProjectOption = None,
    state: StateOption = None,
) -> None:
    """Delete finished runs, decided approvals, audit, usage and queue jobs past `retention:`.

    Queue jobs: PostgreSQL's finished ones (SQLite has no queue). First, workflow runs
    paused at a human node whose approval expired are ended (cancelled)."""
    # deferred: loading fim.masking costs tens of ms
    from fim.store import Store
    from fim.store.retention import prune as prune_store
    from fim.workflows.durable import queue_pruner
    from fim.workflows.expiry import expirer

    root, settings = project_settings(ctx, project)
    store = Store(state, root=Path.cwd()) if state else Store(settings.state, root=root)
    pruned = _run(
        store,
        prune_store(
            store,
            settings.retention,
            dry_run=dry_run,
            transcripts=private.transcripts(root),
            jobs=queue_pruner(store.url),
            expire=expirer(store),
        ),
    ).as_dict()
    if not pruned.get("expired"):  # the key is there when runs were ended (scripts: .get)
        pruned.pop("expired", None)
    if as_json:
        typer.echo(json.dumps({"dry_run": dry_run, **pruned}))
        return
    verb = "would delete" if dry_run else "deleted"
    ended = pruned.get("expired", 0)
    if ended:
        typer.echo(
            f"{'would end' if dry_run else 'ended'} {ended} workflow runs whose human "
            "approval expired (cancelled)"
        )
    days = {k: "forever" if v is None else f"{v:g}" for k, v in settings.retention}
    typer.echo(
        f"{verb} {pruned['runs']} runs ({pruned['events']} events), "
        f"{pruned['approvals']} approvals, {pruned['audit']} audit rows, "
        f"{pruned['usage']} usage rows, {pruned['transcripts']} hook transcripts"
        + (f", {pruned['jobs']} finished queue jobs " if "jobs" in pruned else " ")
        + "(retention in days: "
        + ", ".join(f"{k} {v}" for k, v in days.items())
        + ")"
    )
