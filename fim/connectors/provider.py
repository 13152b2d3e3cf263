"""The connectors of a run: a company's HTTP APIs and SQL databases, shown to the model as
tools.

`provide(ctx)` is the provider of the agent's `connectors:` list. Progressive mode (the
default) gives the model two meta-tools (`connector`, `database`) and one stub line per
connector in the system prompt; legacy mode registers one tool per HTTP action and three
per database. Modes resolve per kind: agent `tool_modes` > env > fim.yaml > default.

Hooks see meta-tool calls as their real target: `effective_tool_name(tool, args)` and
`resolve_call_metadata(tool, args)` (also reachable as `tool.metadata["call_view"]`).
"""

from __future__ import annotations

import asyncio
import functools
import time
from typing import Any

from fim.config.schema import DatabaseConnector, HttpConnector
from fim.connectors.database import Database, get_database, stub_tables
from fim.connectors.discovery import tag_counts
from fim.connectors.http import get_client
from fim.connectors.http_tool import action_tool
from fim.connectors.meta import (
    CONNECTOR_TOOL,
    DATABASE_TOOL,
    ConnectorMetaTool,
    DatabaseMetaTool,
    ReadOnlyOf,
    database_metadata,
    prepare_query,
    read_only_for,
)
from fim.connectors.readonly import run_reads_only
from fim.errors import RunError
from fim.hooks.builtin.readonly_guard import holds_over
from fim.run.services import Provision, RunContext
from fim.tools.base import FunctionTool
from fim.tools.naming import tool_name
from fim.tools.view import view_of
from fim.types import CallView, ToolResult

_RETRY_STUB_AFTER = 60.0
"""Seconds before a run retries introspecting a database whose connection failed."""
_STUB_TIMEOUT = 5.0
"""Seconds a run waits for a database's table names before showing it without them."""


async def provide(ctx: RunContext) -> Provision | None:
    """Tools and prompt stubs for the agent's connectors (None when it has none).

    Async because the database stubs need table names: they are introspected in threads,
    concurrently, once per declaration, and never for longer than a few seconds.
    """
    http, databases = _declared(ctx)
    if not http and not databases:
        return None
    provision = Provision()
    lines: list[str] = []
    if http:
        clients = [get_client(ctx.services, n, d, ctx.snapshot.mask) for n, d in http]
        if ctx.mode("connectors") == "legacy":
            provision.tools += [action_tool(c, a) for c in clients for a in c.decl.actions]
        else:
            provision.tools.append(ConnectorMetaTool(clients))
            provision.pinned.append(CONNECTOR_TOOL)
            provision.hidden += sum(len(c.decl.actions) for c in clients)
            lines.append(f"HTTP connectors (through the `{CONNECTOR_TOOL}` tool):")
            lines += [f"- {c.name}: {_describe(c.decl)}{_actions(c.decl)}" for c in clients]
    if databases:
        dbs = [get_database(ctx.services, n, d, ctx.snapshot.root) for n, d in databases]
        # what readonly_guard cannot see in SQL text (a function, a view) the database stops
        reads_only = read_only_of(ctx)
        if ctx.mode("databases") == "legacy":
            for db in dbs:
                provision.tools += database_tools(db, reads_only)
        else:
            provision.tools.append(DatabaseMetaTool(dbs, reads_only))
            provision.pinned.append(DATABASE_TOOL)
            provision.hidden += len(DATABASE_ACTIONS) * len(dbs)
            lines.append(f"Databases (through the `{DATABASE_TOOL}` tool):")
            tables = await asyncio.gather(*(_tables(ctx, db) for db in dbs))
            lines += [
                f"- {db.name}: {_describe(db.decl)}{stub_tables(names)}"
                for db, names in zip(dbs, tables, strict=True)
            ]
    if lines:
        provision.prompt = "## Connectors\n" + "\n".join(lines)
    return provision


def _declared(
    ctx: RunContext,
) -> tuple[list[tuple[str, HttpConnector]], list[tuple[str, DatabaseConnector]]]:
    http: list[tuple[str, HttpConnector]] = []
    databases: list[tuple[str, DatabaseConnector]] = []
    for name in ctx.agent.connectors:
        decl = ctx.snapshot.connectors.get(name)
        if decl is None and (unset := ctx.snapshot.unavailable("connector", name)):
            raise unset  # declared, but a `${VAR}` it needs is not set here
        if decl is None:
            known = ", ".join(sorted(ctx.snapshot.connectors)) or "none"
            raise RunError(
                f"agent '{ctx.agent.name}' uses unknown connector '{name}'",
                hint=f"declare connectors/{name}.yaml (known connectors: {known})",
            )
        if isinstance(decl, HttpConnector):
            http.append((name, decl))
        else:
            databases.append((name, decl))
    return http, databases


STUB_ACTIONS = 5
"""Action names a connector's stub line lists; `discover` shows the rest."""


STUB_TAGS = 12
"""Tags a big connector's stub line names; `discover` lists them all."""


def _actions(decl: HttpConnector) -> str:
    """`actions: a, b`; for big connectors the actions grouped by tag (`24 actions by tag:
    issues (9): list_issues, ...; pulls (6): ...`), bounded, so the model knows what to search."""
    names = list(decl.actions)
    if len(names) <= STUB_ACTIONS:
        return f"actions: {', '.join(names) or 'none'}"

    tags = tag_counts(decl)
    if not tags:
        return f"{len(names)} actions: {', '.join(names[:STUB_ACTIONS])}, ..."
    groups = []
    for tag, count in tags[:STUB_TAGS]:
        first = [n for n, a in decl.actions.items() if tag in a.tags][:2]
        groups.append(f"{tag} ({count}): {', '.join(first)}{', ...' if count > 2 else ''}")
    more = f"; {len(tags) - STUB_TAGS} more tags" if len(tags) > STUB_TAGS else ""
    return f"{len(names)} actions by tag — {'; '.join(groups)}{more} (discover with tag= or query=)"


def _describe(decl: HttpConnector | DatabaseConnector) -> str:
    return f"{decl.description.strip()} — " if decl.description.strip() else ""


async def _tables(ctx: RunContext, db: Database) -> list[str] | None:
    """Table names for the stub, introspected once per declaration and cached; a database
    that is down costs at most `_STUB_TIMEOUT` seconds, once a minute."""
    if db.tables_cache is not None:
        return db.tables_cache
    key = f"connector:tables-failed:{db.name}:{id(db)}"
    failed_at = ctx.services.cache.get(key)
    if failed_at is not None and time.monotonic() - failed_at < _RETRY_STUB_AFTER:
        return None
    try:
        return await asyncio.wait_for(db.in_thread(db.tables_sync), _STUB_TIMEOUT)
    except Exception:
        ctx.services.cache[key] = time.monotonic()
        return None


DATABASE_ACTIONS = ("list_tables", "describe", "query")
"""What a database offers; legacy mode registers one tool each."""


def read_only_of(ctx: RunContext) -> ReadOnlyOf:
    """Which of the run's queries may only read, and so run as on a read-only connector:
    all of them in a read-only run (`run_reads_only`), else those a `readonly_guard` of the
    run's hooks (or of a caller's) judges, asked as each statement runs with the call's
    hook view (`readonly_guard.holds_over`): the guard's own decision, so a guard declared
    with `always: true` and the database's read-only transaction cannot disagree."""
    if run_reads_only(ctx.snapshot, ctx.agent, ctx.parents):
        return True
    agent, project = ctx.agent, ctx.snapshot.project
    run = {"agent_read_only": agent.read_only, "project_read_only": project.read_only}

    def judged(view: CallView) -> bool:
        # ctx.hooks is set once the run's plan is built, before any call
        context = view.context("PreToolUse", agent.name, ctx.run_id, run)
        return holds_over(ctx.hooks, context)

    return judged


def database_tools(db: Database, read_only_run: ReadOnlyOf = False) -> list[FunctionTool]:
    """Legacy mode: `{db}__list_tables`, `{db}__describe`, `{db}__query`, each name made
    safe for every provider as a connector action's is (`fim.tools.naming.tool_name`: a
    long one keeps 54 characters and a digest). `read_only_run`: which queries may only
    read (`read_only_of`); they run as on a read-only connector."""

    async def list_tables() -> ToolResult:
        return await db.list_tables()

    async def describe(table: str) -> ToolResult:
        return await db.describe(table)

    async def query(sql: str, params: dict[str, Any] | None = None) -> ToolResult:
        args: dict[str, Any] = {"sql": sql} if params is None else {"sql": sql, "params": params}
        view = CallView(tool_name(db.name, "query"), args, database_metadata(db, "query", args))
        reads_only = read_only_for(read_only_run, view)
        return await db.query(sql, params, read_only_run=reads_only)

    def meta(action: str) -> dict[str, Any]:
        static = database_metadata(db, action, {})
        if action == "query":
            static["access"] = "read" if db.decl.read_only else "write"
            static["call_view"] = lambda args: CallView(
                tool_name(db.name, "query"), args, database_metadata(db, "query", args)
            )
            static["prepare_view"] = functools.partial(prepare_query, db)
        return static

    label = f"{db.name} ({db.decl.description})" if db.decl.description else db.name
    return [
        FunctionTool(
            tool_name(db.name, "list_tables"),
            f"List the tables of database {label}.",
            {"type": "object", "properties": {}},
            list_tables,
            "database",
            meta("list_tables"),
        ),
        FunctionTool(
            tool_name(db.name, "describe"),
            f"Columns, types, nullability and keys of one table of database {db.name}.",
            {
                "type": "object",
                "properties": {"table": {"type": "string"}},
                "required": ["table"],
            },
            describe,
            "database",
            meta("describe"),
        ),
        FunctionTool(
            tool_name(db.name, "query"),
            f"Run one SQL statement on database {db.name}"
            + (" (read-only: a single SELECT)" if db.decl.read_only else "")
            + f"; at most {db.decl.max_rows} rows are returned. Use :name placeholders "
            "with params.",
            {
                "type": "object",
                "properties": {
                    "sql": {"type": "string"},
                    "params": {"type": "object"},
                },
                "required": ["sql"],
            },
            query,
            "database",
            meta("query"),
        ),
    ]


def effective_tool_name(tool: Any, args: dict[str, Any]) -> str:
    """The name hook matchers see: `crm__create_lead` for a `connector` meta call."""
    return view_of(tool, args or {}).name


def resolve_call_metadata(tool: Any, args: dict[str, Any]) -> dict[str, Any]:
    """The target's metadata for `HookContext.metadata` (access, requires_confirmation,
    connector, action; `sql` for database queries)."""
    return view_of(tool, args or {}).metadata


__all__ = [
    "database_tools",
    "effective_tool_name",
    "provide",
    "read_only_of",
    "resolve_call_metadata",
]
