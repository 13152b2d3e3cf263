"""`fim approvals list|approve|deny`: decide what `confirm` hooks and `human` nodes wait for.

Approvals live in the state store, so this works from any shell on the machine (or any
machine, with a PostgreSQL `state:`) while the agent that asked is still waiting, and
after it restarted. Only fim.yaml is read: a broken agent file elsewhere in the project
must not stop someone from denying a pending call.
"""

from __future__ import annotations

import datetime as dt
import getpass
import json
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from fim.commands import (
    ProjectOption,
    fail,
    print_problems,
    project_dir,
    run_async,
    user_errors,
    warn_store_fallback,
)
from fim.commands.completion import complete_approval_id

if TYPE_CHECKING:
    from fim.config.schema import Project
    from fim.store import Approval, Store

StateOption = Annotated[
    str | None,
    typer.Option(
        "--state", help="State store URL (default: `state:` of fim.yaml).", show_default=False
    ),
]
ApprovalArgument = Annotated[
    str, typer.Argument(metavar="ID", help="Approval id.", autocompletion=complete_approval_id)
]
NoteOption = Annotated[
    str | None, typer.Option("--note", "-n", help="Why; the agent sees a denial's note.")
]


def register(app: typer.Typer) -> None:
    approvals = typer.Typer(
        name="approvals",
        help="List, approve and deny pending human approvals.",
        no_args_is_help=True,
    )
    approvals.command("list")(list_)
    approvals.command("approve")(approve)
    approvals.command("deny")(deny)
    app.add_typer(approvals, name="approvals")


def open_store(ctx: typer.Context | None, project: Path | None, state: str | None) -> Store:
    """The project's store: `--state`, else fim.yaml's `state:` resolved against its root."""
    # deferred: loading fim.masking costs tens of ms
    from fim.store import Store

    if state:
        return Store(state, root=Path.cwd())
    root, settings = project_settings(ctx, project)
    return Store(settings.state, root=root)


def project_settings(ctx: typer.Context | None, project: Path | None) -> tuple[Path, Project]:
    """The project's root and fim.yaml, read alone (the rest of the project may be broken)."""
    # deferred: loading fim.config.schema costs hundreds of ms
    from fim.config.loader import PROJECT_FILE, find_root, load

    with user_errors():
        root = find_root(project_dir(ctx, project))
        decls = load(root)
    if not decls.project_ok:
        print_problems(p for p in decls.problems if p.path.endswith(PROJECT_FILE))
        fail(f"cannot read the state URL from {root / PROJECT_FILE}", "fix fim.yaml first")
    warn_store_fallback(decls.project)
    return root, decls.project


def cli_user() -> str:
    """Who decided an approval from this shell, as the approval records it (`fim approvals
    approve|deny` and `fim run`'s own y/N prompt)."""
    return f"cli:{getpass.getuser()}"


def _run(store: Store, work: Any) -> Any:
    async def go() -> Any:
        try:
            return await work
        finally:
            store.close()

    try:
        return run_async(go())
    except Exception as exc:
        if type(exc).__module__.startswith("sqlalchemy"):
            fail(f"cannot use the state store {store.display_url}: {exc}".splitlines()[0])
        raise


def utc_time(ts: float) -> str:
    """A stored timestamp as the commands on the store print it: UTC, to the second."""
    return dt.datetime.fromtimestamp(ts, dt.UTC).isoformat(timespec="seconds")


def _age(seconds: float) -> str:
    seconds = abs(seconds)
    if seconds < 90:
        return f"{seconds:.0f}s"
    if seconds < 5400:
        return f"{seconds / 60:.0f}m"
    return f"{seconds / 3600:.1f}h"


def list_(
    ctx: typer.Context,
    all_: Annotated[bool, typer.Option("--all", "-a", help="Include decided and expired.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON lines.")] = False,
    project: ProjectOption = None,
    state: StateOption = None,
) -> None:
    """List pending approvals (or all of them)."""
    store = open_store(ctx, project, state)
    items: list[Approval] = _run(store, store.list_approvals(None if all_ else "pending"))
    if as_json:
        for item in items:
            typer.echo(json.dumps(item.as_dict(), ensure_ascii=False, default=str))
        return
    if not items:
        typer.echo("no pending approvals" if not all_ else "no approvals")
        return
    # deferred: loading rich costs a few ms
    from rich.table import Table

    # deferred: the hooks package loads only to print a table of approvals
    from fim.hooks.approval import preview
    from fim.terminal import markup, rich_console

    now = time.time()
    table = Table(show_lines=False)
    for column in ("id", "status", "agent", "tool"):
        table.add_column(column, no_wrap=True)
    for column in ("arguments", "reason"):
        table.add_column(column, overflow="fold", ratio=1)
    for column in ("age", "expires / decided"):
        table.add_column(column, no_wrap=True)
    for item in items:
        args = json.dumps(item.args, ensure_ascii=False, default=str)
        expires = "-"
        if item.status == "pending" and item.expires_at is not None:
            expires = f"in {_age(item.expires_at - now)}"
        elif item.resolved_by:
            expires = f"by {item.resolved_by}"
        shown = (item.agent, item.tool_name, preview(args, 160), item.reason, expires)
        agent, tool, arguments, reason, expires = (markup(text) for text in shown)
        # a model wrote the arguments (and may name the tool): shown, never rich markup
        # or terminal commands
        table.add_row(
            item.id, item.status, agent, tool, arguments, reason, _age(now - item.created_at),
            expires,
        )  # fmt: skip
    console = rich_console()
    if not console.is_terminal:  # piped or captured: do not squeeze ids into 80 columns
        console = rich_console(width=160)
    console.print(table)


def _elicitation_data(
    before: Approval, approved: bool, content: str | None, cancel: bool
) -> dict[str, Any] | str:
    """What answers an MCP elicitation (`content` to accept, `action: cancel`), or why
    the answer is not valid for the form the server asked for."""
    # deferred: `fim --help` imports every command module; fim.mcp costs ~0.1 s
    from fim.mcp.elicitation import content_problem, describe_schema

    if not approved:
        return {"action": "cancel"} if cancel else {}
    schema = before.args.get("schema") or {}
    try:
        value = json.loads(content) if content is not None else {}
    except ValueError as exc:
        return f"--content is not JSON: {exc}"
    problem = content_problem(schema, value)
    if problem is not None:
        return f"{problem[0]} {problem[1]} (fields: {describe_schema(schema)})"
    return {"content": value}


def _decide(
    ctx: typer.Context,
    approval_id: str,
    approved: bool,
    note: str | None,
    project: Path | None,
    state: str | None,
    content: str | None = None,
    cancel: bool = False,
) -> None:
    store = open_store(ctx, project, state)
    verb = "approved" if approved else "denied"
    invalid: list[str] = []
    decided: list[Approval] = []  # as another decider left it, when this one lost the race
    queued = False

    async def work() -> tuple[Approval | None, Approval | None]:
        nonlocal queued
        before = await store.get_approval(approval_id)
        if before is None or before.status != "pending":
            return before, None
        data: dict[str, Any] | None = {"note": note} if note else None
        if before.kind == "elicitation":
            answer = _elicitation_data(before, approved, content, cancel)
            if isinstance(answer, str):
                invalid.append(answer)
                return before, None
            data = {**(data or {}), **answer}
        elif content is not None or cancel:
            invalid.append("--content and --cancel answer MCP elicitations only")
            return before, None
        by = cli_user()
        resolution = await store.decide_approval(approval_id, approved, by=by, data=data)
        after = resolution.approval
        if not resolution.changed:  # expired, or another shell or replica decided it first
            decided.append(after or before)  # (even the same way): it queues the run, not us
            return before, None
        if after is not None and after.kind == "workflow":
            queued = await _requeue(store, after.data.get("run_id", after.run_id))
        return before, after

    before, after = _run(store, work())
    if before is None:
        fail(f"no approval '{approval_id}'", "see `fim approvals list --all` for the ids")
    if invalid:
        fail(f"approval {approval_id}: {invalid[0]}; nothing was changed")
    if after is None:
        current = decided[0] if decided else before
        # deferred: fim.store loads SQLAlchemy (`open_store` above has loaded it by now)
        from fim.store.approvals import abandoned

        gone = abandoned(current)
        if gone is not None:
            fail(f"{gone[0]}; nothing was changed", gone[1])
        by = f" by {current.resolved_by}" if current.resolved_by else ""
        fail(f"approval {approval_id} is already {current.status}{by}; nothing was changed")
    if after.kind == "workflow" and queued:
        typer.echo(
            f"{verb} {approval_id}: workflow '{after.agent}' node '{after.data.get('node')}'; "
            "a `fim worker` continues it"
        )
        return
    if after.kind == "workflow":
        run_id = after.data.get("run_id", after.run_id)
        typer.echo(
            f"{verb} {approval_id}: workflow '{after.agent}' node '{after.data.get('node')}'; "
            f"continue it with `fim workflow resume {run_id}`"
        )
        return
    if after.kind == "elicitation":
        action = "accept" if approved else after.data.get("action") or "decline"
        typer.echo(f"{verb} {approval_id}: the MCP server is answered `{action}`")
        return
    typer.echo(
        f"{verb} {approval_id}: agent '{after.agent}' may "
        f"{'now' if approved else 'not'} call {after.tool_name}"
    )


async def _requeue(store: Store, run_id: str) -> bool:
    """A decided human node of a run that `fim worker` executes: queue the job that
    continues it (fim.workflows.durable). False for a run that resumes in process."""
    # deferred: `fim --help` imports every command module; this loads procrastinate
    from fim.workflows.durable import ensure_schema, make_app, requeue_decided
    from fim.workflows.queue_rows import is_postgres

    if not is_postgres(store.url):
        return False
    app = make_app(store.url)
    async with app.open_async():
        await ensure_schema(app)
        return await requeue_decided(app, store, run_id)


def approve(
    ctx: typer.Context,
    approval_id: ApprovalArgument,
    note: NoteOption = None,
    content: Annotated[
        str | None,
        typer.Option(
            "--content", "-c", help="For an MCP server's question: the answer, a JSON object."
        ),
    ] = None,
    project: ProjectOption = None,
    state: StateOption = None,
) -> None:
    """Approve a pending call (the waiting agent runs it), or answer an MCP server's question."""
    _decide(ctx, approval_id, True, note, project, state, content=content)


def deny(
    ctx: typer.Context,
    approval_id: ApprovalArgument,
    note: NoteOption = None,
    cancel: Annotated[
        bool,
        typer.Option("--cancel", help="For an MCP server's question: cancel rather than decline."),
    ] = False,
    project: ProjectOption = None,
    state: StateOption = None,
) -> None:
    """Deny a pending call (the agent is told, with your note), or decline an MCP question."""
    _decide(ctx, approval_id, False, note, project, state, cancel=cancel)
