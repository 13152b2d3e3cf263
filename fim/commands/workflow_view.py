"""What `fim workflow` prints: a line per node as events arrive, the run's end (or one JSON
document with `--json`), and where Ctrl-C stopped it. Apart from the commands, as
`fim.commands.run_view` is from `fim run`.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import typer

from fim.commands import err
from fim.terminal import markup, rich_console

if TYPE_CHECKING:
    from rich.console import Console

    from fim.workflows.state import RunState


def console() -> Console:
    """rich's console for stdout: lines wrap at a terminal's width, and nowhere else (a
    pipe, a file, CI), where rich's default 80 columns split a node's JSON mid-value."""

    out = rich_console(highlight=False)
    out.soft_wrap = not out.is_terminal
    return out


def short(value: Any, limit: int = 80) -> str:
    """One line of a value for a terminal, with rich markup escaped (outputs are data)."""
    text = value if isinstance(value, str) else json.dumps(value, default=str, ensure_ascii=False)
    text = " ".join(text.split())
    return markup(text if len(text) <= limit else text[: limit - 1] + "…")


class Progress:
    """Prints one line per node event (nothing with --json)."""

    def __init__(self, quiet: bool) -> None:
        self.quiet = quiet
        self.console = console()

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
                f"{short(event.output)}",
                markup=True,
            )
        elif kind == "node_skipped":
            self.console.print(f"[yellow]↷[/] {event.node} [dim]skipped: {short(event.reason)}[/]")
        elif kind == "node_failed":
            self.console.print(f"[red]✗[/] {event.node}: {short(event.error, 500)}")
        elif kind == "notice":
            self.console.print(f"[dim]· {short(event.message, 500)}[/]")
        elif kind == "error":
            self.console.print(f"[red]error:[/] {short(event.message, 500)}")


def finish(state: RunState, as_json: bool) -> None:
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
        out = console()
        out.print(f"[bold]{state.workflow}[/] run {state.run_id}: {state.status}")
        if state.resumed_on:  # a reload came between its legs: say what ran where
            out.print(
                f"[dim]started on snapshot {state.snapshot_version}, "
                f"resumed on {', '.join(state.resumed_on)}[/]"
            )
        if state.status == "paused":
            out.print(
                f"resume with: fim workflow resume {state.run_id} --approve|--deny [--input k=v]"
            )
        elif state.outputs:
            out.print_json(json.dumps(state.outputs, default=str, ensure_ascii=False))
        if state.error:
            out.print(f"[red]{short(state.error, 1000)}[/]")
    if state.status in ("failed", "cancelled"):
        raise typer.Exit(1)


def interrupted(state: RunState | None) -> None:
    """Ctrl-C stopped the run: one line on stderr saying where, what was done and how to
    go on (`fim workflow resume` runs the nodes cut off again), exit 130. A run that had
    not started yet (or had already ended) says nothing more."""
    if state is None or state.status != "cancelled":
        return
    cut = [n for n, s in state.nodes.items() if s.status == "cancelled"]
    if not cut:  # between two nodes: the next ones to run
        cut = [n for n, s in state.nodes.items() if s.status == "pending"][:1]
    done = [n for n, s in state.nodes.items() if s.status == "ok"]
    where = ", ".join(f"'{n}'" for n in cut)
    line = (
        f"cancelled{f' at {where}' if where else ''}; run {state.run_id} "
        f"(done: {', '.join(done) or 'none'}); fim workflow resume {state.run_id} "
        + (f"re-runs from {where}" if where else "finishes it")
    )
    err(line)  # masked there
    raise typer.Exit(130)


def render_run(state: RunState, as_json: bool) -> None:
    """One workflow run as `fim workflow show` prints it (`fim runs show` of a workflow run
    too): inputs, a table of the nodes, the outputs and the error."""
    if as_json:
        typer.echo(json.dumps(state.to_dict(), default=str, ensure_ascii=False, indent=2))
        return
    # deferred: loading rich costs a few ms
    from rich.table import Table

    out = console()
    out.print(f"[bold]{state.workflow}[/] run {state.run_id}: {state.status}")
    out.print(f"inputs: {short(state.inputs, 200)}")
    table = Table("node", "type", "status", "tries", "duration", "output / error")
    for node_id, ns in state.nodes.items():
        detail = short(ns.error or ns.reason or ("" if ns.output is None else ns.output), 200)
        if ns.status == "waiting":
            detail = short(f"approval {ns.approval_id}: {ns.prompt}", 200)
        took = "" if ns.duration_ms is None else f"{ns.duration_ms:.0f} ms"
        table.add_row(node_id, ns.type, ns.status, str(ns.attempts or ""), took, detail)
    out.print(table)
    if state.outputs:
        out.print("outputs:")
        out.print_json(json.dumps(state.outputs, default=str, ensure_ascii=False))
    if state.error:
        out.print(f"[red]{short(state.error, 1000)}[/]")
