"""Progressive disclosure: two meta-tools instead of one tool per action or table.

With many connectors, per-action tool definitions dominate the prompt. The `connector` and
`database` meta-tools keep one small definition each; the model discovers details on demand.
Hooks must still see the *real* target, so each meta-tool offers `call_view(args)` ->
(`{connector}__{action}`, that action's metadata), which the engine uses for matchers and
`HookContext.metadata` (and `fim.connectors.provider.resolve_call_metadata` wraps).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from fim.connectors.database import Database
from fim.connectors.discovery import BYTES_PER_TOKEN, budget_tokens, discover, unknown_actions
from fim.connectors.http import HttpConnectorClient
from fim.connectors.http_tool import action_metadata, tool_name
from fim.connectors.readonly import decide
from fim.connectors.render import compact_json, truncate_text
from fim.masking import known
from fim.run.budget import bounded
from fim.tools import isolate
from fim.types import CallView, JSONSchema, ToolResult

ReadOnlyOf = bool | Callable[[CallView], bool]
"""Whether a database query may only read: fixed for the run, or decided per call from the
query's hook view (what a `readonly_guard` with a matcher judges)."""


def read_only_for(reads_only: ReadOnlyOf, view: CallView) -> bool:
    """`reads_only` for the query `view` (`ReadOnlyOf`)."""
    return reads_only if isinstance(reads_only, bool) else reads_only(view)


CONNECTOR_TOOL = "connector"
DATABASE_TOOL = "database"


class ConnectorMetaTool:
    """`connector(subcommand=discover|execute, connector, action, parameters)`."""

    category = "connector"

    def __init__(self, clients: list[HttpConnectorClient]) -> None:
        self.clients = {c.name: c for c in clients}
        self.name = CONNECTOR_TOOL
        self.description = (
            "Call an HTTP connector listed in the system prompt. discover lists its actions "
            "(search with `query` words or `tag`; `page` for more); discover with `action` "
            "(names, comma-separated) shows their parameters; then execute an action with "
            "`parameters`."
        )
        self.parameters: JSONSchema = {
            "type": "object",
            "properties": {
                "subcommand": {"type": "string", "enum": ["discover", "execute"]},
                "connector": {"type": "string", "enum": sorted(self.clients)},
                "action": {"type": "string"},
                "query": {"type": "string"},
                "tag": {"type": "string"},
                "page": {"type": "integer", "minimum": 1},
                "parameters": {"type": "object"},
            },
            "required": ["subcommand", "connector"],
        }
        self.metadata: dict[str, Any] = {"meta": "connector", "call_view": self.call_view}
        self.budget = budget_tokens()
        """Tokens any observation of `discover` (and its errors) stays under."""

    def call_view(self, args: dict[str, Any]) -> CallView:
        """`execute` is shown as the action itself (`crm__create_lead` with its own
        `parameters` as the arguments); a rewrite of those goes back under `parameters`."""
        client = self.clients.get(str(args.get("connector")))
        action = str(args.get("action") or "")
        base = {"meta": "connector", "subcommand": args.get("subcommand")}
        if client is None:
            return CallView(self.name, args, base)
        if args.get("subcommand") == "execute" and action:
            params = args.get("parameters") or {}
            if action in client.decl.actions:
                meta = {**base, **action_metadata(client.name, action, client.decl.actions[action])}
            else:  # an unknown action only returns the list of valid ones
                meta = {**base, "connector": client.name, "access": "read"}
                meta["requires_confirmation"] = False
            return CallView(
                tool_name(client.name, action),
                dict(params),
                meta,
                to_call=lambda new: {**args, "parameters": new},
            )
        view = {"connector": client.name, "access": "read", "requires_confirmation": False}
        return CallView(tool_name(client.name, "discover"), args, {**base, **view})

    async def run(self, **args: Any) -> ToolResult:
        client = self.clients[args["connector"]]
        if args["subcommand"] == "discover":
            return ToolResult(
                content=discover(
                    client.name,
                    client.decl,
                    action=args.get("action"),
                    query=str(args.get("query") or ""),
                    tag=str(args.get("tag") or ""),
                    page=int(args.get("page") or 1),
                    budget=self.budget,
                )
            )
        action = args.get("action")
        if not action or action not in client.decl.actions:
            note = (
                unknown_actions(client.name, client.decl, [str(action)])
                if action
                else f"Connector '{client.name}' needs an 'action' for execute."
            )
            return ToolResult(
                content=f"Error: {note} Call subcommand=discover to see their parameters, "
                "then execute one.",
                is_error=True,
            )
        params = args.get("parameters") or {}
        schema = client.decl.actions[action].parameters
        # The schema may be a third party's (an imported OpenAPI spec): checked as a legacy
        # call's are (an `untrusted_schema` tool), in the killable worker pool. An `anyOf`
        # of 2,000 object branches and 4 KB of arguments held the event loop for 6-8 s.
        errors = await isolate.schema_problems(
            params,
            schema,
            whose=f"the parameter schema of {client.name}.{action}",
            party=client.name,
        )
        if errors:
            expected = truncate_text(compact_json(schema), self.budget * BYTES_PER_TOKEN // 2)
            masker = known()  # each problem masked whole, then cut: it quotes the value
            return ToolResult(
                content=f"Error: invalid parameters for {client.name}.{action}: "
                f"{'; '.join(masker.head(e, 300)[0] for e in errors)}. Expected schema: "
                f"{expected}. Fix the "
                "parameters and execute again.",
                is_error=True,
            )
        return await client.call(action, params)


def discover_actions(client: HttpConnectorClient, only: str | None = None) -> str:
    """One `discover` observation (bounded; see fim.connectors.discovery)."""
    return discover(client.name, client.decl, action=only)


class DatabaseMetaTool:
    """`database(subcommand=list_tables|discover|query, database, table, sql, params)`."""

    category = "database"

    def __init__(self, databases: list[Database], read_only_run: ReadOnlyOf = False) -> None:
        self.databases = {d.name: d for d in databases}
        self.read_only_run = read_only_run
        """Whether a query may only read: its statement then runs as on a read-only
        connector, whatever each connector says. True for a read-only run
        (`fim.connectors.readonly.run_reads_only`); a function of the query's view when a
        `readonly_guard` decides per call (`fim.connectors.provider`)."""
        self.name = DATABASE_TOOL
        self.description = (
            "Query a SQL database listed in the system prompt: list_tables, discover a "
            "table's columns and keys, then query with one SELECT (`params` fill :name "
            "placeholders)."
        )
        self.parameters: JSONSchema = {
            "type": "object",
            "properties": {
                "subcommand": {"type": "string", "enum": ["list_tables", "discover", "query"]},
                "database": {"type": "string", "enum": sorted(self.databases)},
                "table": {"type": "string"},
                "sql": {"type": "string"},
                "params": {"type": "object"},
            },
            "required": ["subcommand", "database"],
        }
        self.metadata: dict[str, Any] = {
            "meta": "database",
            "call_view": self.call_view,
            "prepare_view": self.prepare_view,
        }

    async def prepare_view(self, args: dict[str, Any]) -> None:
        db = self.databases.get(str(args.get("database")))
        if db is not None and args.get("subcommand") == "query":
            await prepare_query(db, args)

    def call_view(self, args: dict[str, Any]) -> CallView:
        """Shown as the legacy tool of the same action (`shop_db__query` with `sql` and
        `params`), so a guard written for legacy mode holds here."""
        db = self.databases.get(str(args.get("database")))
        if db is None:
            return CallView(self.name, args, {"meta": "database"})
        sub = str(args.get("subcommand"))
        action = {"discover": "describe"}.get(sub, sub)
        keys = {"query": ("sql", "params"), "describe": ("table",)}.get(action, ())
        own = {k: args[k] for k in keys if k in args}
        meta = {"meta": "database", **database_metadata(db, action, own)}

        def to_call(new: dict[str, Any]) -> dict[str, Any]:
            return {"subcommand": sub, "database": db.name, **new}

        return CallView(tool_name(db.name, action), own, meta, to_call=to_call)

    async def run(self, **args: Any) -> ToolResult:
        """The database's answer, bounded by the observation budget (fim/run/budget.py)."""

        result = await self._run(**args)
        hint = "name fewer tables or columns, or query with LIMIT and fewer columns"
        content = bounded(result.content, hint)
        return (
            result if content == result.content else result.model_copy(update={"content": content})
        )

    async def _run(self, **args: Any) -> ToolResult:
        db = self.databases[args["database"]]
        sub = args["subcommand"]
        if sub == "list_tables":
            return await db.list_tables()
        if sub == "discover":
            if not args.get("table"):
                listing = await db.list_tables()
                return ToolResult(
                    content=f"Error: discover needs a 'table'. {listing.content}",
                    is_error=True,
                )
            return await db.describe(args["table"])
        if not args.get("sql"):
            return ToolResult(
                content="Error: query needs 'sql' (one SELECT statement). Use discover to see "
                "a table's columns first.",
                is_error=True,
            )
        # the view the hooks judged (`call_view`): a guard's matcher is tried on it again
        reads_only = read_only_for(self.read_only_run, self.call_view(args))
        return await db.query(args["sql"], args.get("params"), read_only_run=reads_only)


VIEW_PARSE_CHARS = 4_000
"""Longest statement the hook view classifies by parsing; longer is `write`."""

_VIEWED: dict[tuple[str, str | None], bool] = {}
"""Whether a statement reads, by (SQL, dialect), decided off the loop by `prepare_query`."""
_VERDICTS_KEPT = 1024
"""Statements whose catalog verdict one database keeps (`Engine.catalog_verdicts`)."""
UNCHECKED = (
    "fim could not look up the functions it names in the database's catalog, so it counts "
    "as a write"
)
"""Why a statement on a writable PostgreSQL connector whose catalog check could not run
(the database was unreachable) is shown to hooks as a write: hooks fail closed."""


async def prepare_query(db: Database, args: dict[str, Any]) -> None:
    """Decide, on a thread, whether the statement of a query on a writable database reads,
    for `database_metadata` to show hooks. sqlglot took ~0.1-0.4 s on a hostile 4,000-
    character statement: on the event loop that stalls every run of the process.

    On PostgreSQL a statement that reads by its text is also put to the catalog layer of a
    read-only connector (`Worker.catalog_refusal_sync`), on the database's own threads:
    `SELECT shop.cancel_order(2)` reads by its text and deletes, and a function outside
    `pg_catalog`/`information_schema`, or a VOLATILE one, makes it a write for `confirm`
    and `readonly_guard`. Both verdicts are memoised (the catalog's per database), so a
    plain statement costs one parse and, once its names are known, no connection. A view
    that writes is invisible to any check of the text: it stays a read here."""
    sql = str(args.get("sql") or "")
    key = (sql, db.dialect)
    if db.decl.read_only or len(sql) > VIEW_PARSE_CHARS:
        return
    reads = _VIEWED.get(key)
    if reads is None:
        reads = (await asyncio.to_thread(decide, sql, db.dialect)).allowed
        if len(_VIEWED) >= 1024:
            _VIEWED.clear()
        _VIEWED[key] = reads
    if db.dialect != "postgres" or not reads or sql in db.catalog_verdicts:
        return
    try:
        refusal = await db.in_thread(_catalog_refusal, db, sql)
    except Exception:
        return  # not kept: unchecked is a write (`database_metadata`), and tried again
    verdicts = db.catalog_verdicts
    if len(verdicts) >= _VERDICTS_KEPT:
        verdicts.clear()
    verdicts[sql] = refusal


def database_metadata(db: Database, action: Any, args: dict[str, Any]) -> dict[str, Any]:
    """Hook metadata of a database call; `access` is `write` for a statement on a writable
    database unless `prepare_query` found, off the loop, that it only reads (the same
    memoised decision the connector and `readonly_guard` use, and on PostgreSQL the
    catalog layer's). `write_reason`: why a statement that reads by its text is a write."""
    meta: dict[str, Any] = {
        "kind": "database",
        "connector": db.name,
        "dialect": db.dialect,
        "action": action,
        "access": "read",
        "requires_confirmation": False,
        "read_only": db.decl.read_only,
    }
    if action == "query":
        sql = str(args.get("sql") or "")
        meta["sql"] = sql
        if db.decl.read_only:
            return meta
        if not _VIEWED.get((sql, db.dialect), False):
            meta["access"] = "write"  # not decided off the loop, or not a read: fail closed
        elif db.dialect == "postgres" and (refusal := _catalog(db, sql)) is not None:
            meta["access"], meta["write_reason"] = "write", refusal
    return meta


def _catalog_refusal(db: Database, sql: str) -> str | None:
    """On a database thread: the statement (parsed once already: `decide` is memoised) put
    to the catalog layer."""
    return db.catalog_refusal_sync(decide(sql, db.dialect).require())


def _catalog(db: Database, sql: str) -> str | None:
    """Why the catalog makes `sql` a write (None: it reads), `UNCHECKED` when not known."""
    return db.catalog_verdicts.get(sql, UNCHECKED)


__all__ = [
    "CONNECTOR_TOOL",
    "DATABASE_TOOL",
    "ConnectorMetaTool",
    "DatabaseMetaTool",
    "database_metadata",
    "discover_actions",
    "prepare_query",
]
