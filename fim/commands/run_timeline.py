"""`fim runs show RUN_ID` for an agent run: its stored events drawn as `fim run -v` draws
them live (`fim.commands.run_view.EventPrinter`: `→ tool {args}`, `⚑ hook decision`,
`← tool (34 ms) result`, the answer, the summary line), with a line per model call, all on
stdout. `--json` prints the stored events instead.
"""

from __future__ import annotations

import json
from typing import Any

import typer

from fim.commands.run_view import EventPrinter
from fim.masking import known
from fim.terminal import clipped, printable, rich_console


def render_agent_run(record: dict[str, Any], events: list[dict[str, Any]], status: str) -> None:
    """The header (`agent NAME · status · run ID · trace ...`, the input), then each event
    of the run; its output when no event holds the answer (a run recorded without them)."""
    started = next((e for e in events if e.get("type") == "run_started"), {})
    trace = started.get("trace_id")
    traced = f" · trace {trace}" if trace else ""  # what finds the run in a trace backend
    typer.echo(f"{record['kind']} {record['name']} · {status} · run {record['id']}{traced}")
    if started.get("input"):
        typer.echo(f"input: {printable(clipped(known().text(str(started['input'])), 500))}")
    if not any(e.get("type") == "message" for e in events):
        output = (record.get("data") or {}).get("output")
        if output:
            typer.echo(f"output: {printable(known().text(str(output)))}")
    show_events(events)


def show_events(events: list[dict[str, Any]]) -> None:
    """Stored events through `fim run -v`'s printer, every line on stdout; an event this
    version does not know (a newer fim wrote it) as its type and JSON."""
    # deferred: loading rich and pydantic costs tens of ms
    from pydantic import TypeAdapter, ValidationError

    from fim.events import Event

    printer = EventPrinter(verbose=True, model_calls=True)
    printer.err = rich_console(highlight=False, soft_wrap=True)  # stdout: the command's output
    adapter: TypeAdapter[Any] = TypeAdapter(Event)
    for raw in events:
        try:
            event = adapter.validate_python(raw)
        except ValidationError:
            detail = {k: v for k, v in raw.items() if k not in ("type", "run_id", "ts")}
            shown = json.dumps(detail, default=str, ensure_ascii=False)  # characters
            typer.echo(f"  {raw.get('type', '?')}: {printable(known().text(shown)[:300])}")
            continue
        printer.show(event)
    printer.close()
