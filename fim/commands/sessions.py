"""`fim sessions list|show|forget`: the conversations behind `session_id`s, for operators.

An API key sees and forgets only its own sessions (`GET`/`DELETE /v1/sessions`); from a
shell on the state store an operator sees every key's: to find what a conversation held,
or to forget one on request. A keyed caller's session is stored under an id derived from
its key (`fim.run.sessions`), so the list shows each session's name, the first characters
of its owner's key hash ("-": no key: the CLI, a server without keys) and its id, which
names it exactly when two keys use one name. Like `fim approvals`, only fim.yaml is read,
and what is printed is masked with the secrets it names.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Annotated, Any

import typer

from fim.commands import ProjectOption, fail
from fim.commands.approvals import StateOption, _run, open_store, utc_time
from fim.terminal import markup, printable, rich_console

if TYPE_CHECKING:
    from fim.store.sessions import Sessions
    from fim.types import Message

JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON (lines, for a list).")]
SessionArgument = Annotated[str, typer.Argument(help="The session's name, or its id.")]


def register(app: typer.Typer) -> None:
    sessions = typer.Typer(
        name="sessions",
        help="List, read and forget the sessions (conversations) of every key.",
        no_args_is_help=True,
    )
    sessions.command("list")(list_)
    sessions.command("show")(show)
    sessions.command("forget")(forget)
    app.add_typer(sessions, name="sessions")


def _owner(owner: str) -> str:
    return owner[:12] if owner else "-"


def list_(
    ctx: typer.Context,
    limit: Annotated[int, typer.Option("--limit", "-n", min=1, max=10000)] = 50,
    as_json: JsonOption = False,
    project: ProjectOption = None,
    state: StateOption = None,
) -> None:
    """The most recently used sessions of every key, newest first, with what each spent."""
    # deferred: loading the state store costs tens of ms
    from fim.masking import known
    from fim.store.sessions import Sessions
    from fim.store.usage import session_totals

    store = open_store(ctx, project, state)
    rows = _run(store, Sessions(store).listed(limit))
    spent = _run(store, session_totals(store, [row["id"] for row in rows]))
    for row in rows:  # what its runs spent: session budgets count the same rows
        usage = spent.get(row["id"])
        row["tokens"] = usage.total_tokens if usage else 0
        row["cost"] = usage.cost if usage else None
    if as_json:
        for row in rows:
            typer.echo(json.dumps(known().value(row), ensure_ascii=False))
        return
    if not rows:
        typer.echo("no sessions")
        return
    # deferred: loading rich costs a few ms
    from rich.table import Table

    table = Table(show_lines=False)
    for column in ("name", "owner", "updated (UTC)", "tokens", "cost $", "id"):
        table.add_column(column, overflow="fold")
    for row in rows:
        # a session's name is what an HTTP client sent: text, never markup or escapes
        name = markup(known().text(row["name"] if row["name"] is not None else row["id"]))
        cost = "-" if row["cost"] is None else f"{row['cost']:.4f}"
        table.add_row(
            name,
            _owner(row["owner"]),
            utc_time(row["updated_at"]),
            str(row["tokens"]),
            cost,
            row["id"],
        )
    rich_console(width=120).print(table)


async def _find(sessions: Sessions, session: str) -> dict[str, Any] | str:
    """The session named `session` (by name or id), or why there is not one: none, or
    several keys use that name (the ids are named)."""
    found = await sessions.listed(20, named=session)
    # an id that is not also the name asked for (a key's derived id) names one session
    exact = [row for row in found if row["id"] == session and row["name"] != session]
    if exact:
        return exact[0]
    if not found:
        return f"no session '{session}'"
    if len(found) > 1:
        ids = ", ".join(f"{row['id']} (owner {_owner(row['owner'])})" for row in found)
        return f"{len(found)} keys have a session '{session}': {ids}; name one by its id"
    return found[0]


def show(
    ctx: typer.Context,
    session: SessionArgument,
    as_json: JsonOption = False,
    project: ProjectOption = None,
    state: StateOption = None,
) -> None:
    """Print one session's conversation."""
    # deferred: loading the state store costs tens of ms
    from fim.masking import known
    from fim.store.sessions import Sessions

    store = open_store(ctx, project, state)

    async def read() -> tuple[dict[str, Any], list[Message]] | str:
        sessions = Sessions(store)
        row = await _find(sessions, session)
        if isinstance(row, str):
            return row
        loaded = await sessions.load(row["id"])
        return row, loaded[1] if loaded is not None else []

    found = _run(store, read())
    if isinstance(found, str):
        fail(found, "`fim sessions list` shows the sessions")
    row, messages = found
    if as_json:
        dumped = [m.model_dump(mode="json", exclude_defaults=True) for m in messages]
        typer.echo(json.dumps(known().value({**row, "messages": dumped}), ensure_ascii=False))
        return
    name = known().text(row["name"] or row["id"])  # callers name sessions: shown escaped
    typer.echo(printable(f"session {name} (owner {_owner(row['owner'])}, id {row['id']})"))
    for message in messages:  # what a model and its tools said: never terminal commands
        text = message.content or ""
        if message.tool_calls:
            text += " ".join(f"[calls {call.name}]" for call in message.tool_calls)
        typer.echo(f"{message.role}: {printable(known().text(text))}")


def forget(
    ctx: typer.Context,
    session: SessionArgument,
    project: ProjectOption = None,
    state: StateOption = None,
) -> None:
    """Delete one session's conversation (its usage rows stay, for budgets and `fim usage`)."""
    # deferred: loading the state store costs tens of ms
    from fim.masking import known
    from fim.store.sessions import Sessions

    store = open_store(ctx, project, state)

    async def delete() -> dict[str, Any] | str:
        sessions = Sessions(store)
        row = await _find(sessions, session)
        if isinstance(row, str):
            return row
        if not await sessions.delete(row["id"], row["owner"]):
            return f"session '{session}' was already gone"
        return row

    done = _run(store, delete())
    if isinstance(done, str):
        fail(done, "`fim sessions list` shows the sessions")
    name = known().text(done["name"] or done["id"])
    typer.echo(printable(f"forgot session {name} (id {done['id']})"))
