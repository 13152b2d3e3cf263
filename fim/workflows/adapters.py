"""Connector, database and MCP calls of workflow nodes: thin bridges to the modules that own
the clients (`NodeContext.connector_action`, `.run_sql` and `.call_mcp` call these).

The connection pools, auth, masking and guards live in `fim.connectors` and `fim.mcp`; a
workflow node reuses them through `Services` (so a workflow and an agent in one process
share one HTTP pool or MCP session) and only adds what a DAG needs: structured outputs
(rows as dicts, parsed JSON) that later templates can index into.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from fim.config.schema import DatabaseConnector, HttpConnector
from fim.locks import current_owner
from fim.structured import non_finite
from fim.tools.naming import tool_name
from fim.tools.registry import through_seam
from fim.types import CallView, Tool, ToolResult
from fim.workflows.node_types.base import NodeError

if TYPE_CHECKING:
    from fim.workflows.nodes import NodeContext


def _connector(ctx: NodeContext, name: str, kind: type) -> Any:
    decl = ctx.snapshot.connectors.get(name)
    if decl is None and (unset := ctx.snapshot.unavailable("connector", name)):
        raise NodeError(str(unset)) from None
    if decl is None:
        raise NodeError(
            f"unknown connector '{name}' (connectors: "
            f"{', '.join(sorted(ctx.snapshot.connectors)) or 'none'})"
        )
    if not isinstance(decl, kind):
        wanted = "http" if kind is HttpConnector else "database"
        raise NodeError(f"connector '{name}' is not a {wanted} connector")
    return decl


def connector_action(ctx: NodeContext, connector: str, action: str) -> Tool:
    """The tool of one HTTP action, registered once per run under `{connector}__{action}`."""
    # deferred: loading fim.connectors.database costs tens of ms
    from fim.connectors.http import get_client
    from fim.connectors.http_tool import action_tool, tool_name

    name = tool_name(connector, action)
    existing = ctx.registry.get(name)
    if existing is not None:
        return existing
    decl = _connector(ctx, connector, HttpConnector)
    if action not in decl.actions:
        raise NodeError(
            f"connector '{connector}' has no action '{action}' (actions: "
            f"{', '.join(decl.actions) or 'none'})"
        )
    tool = action_tool(get_client(ctx.services, connector, decl, ctx.snapshot.mask), action)
    if name not in ctx.registry:
        ctx.registry.add(tool)
    return ctx.registry.get(name) or tool


async def run_sql(ctx: NodeContext, connector: str, sql: str, params: dict[str, Any]) -> Any:
    """Run one statement; rows come back as a list of dicts (`nodes.q.output[0].amount`).

    Read-only connectors refuse anything but a single read statement, with the same
    read-only decision agents go through (`Database.run`).
    """
    # deferred: loading fim.connectors.database costs tens of ms
    from fim.connectors.database import describe_error, get_database
    from fim.connectors.meta import database_metadata, prepare_query
    from fim.connectors.readonly import run_reads_only
    from fim.connectors.sql_guard import SqlRejected

    decl: DatabaseConnector = _connector(ctx, connector, DatabaseConnector)
    db = get_database(ctx.services, connector, decl, ctx.snapshot.root)
    # started by a read-only agent (or in a read-only project): run as on a read-only connector
    reads_only = run_reads_only(ctx.snapshot, None, ctx.parents)
    asked: dict[str, Any] = {"sql": sql, "params": params}
    await prepare_query(db, asked)
    name = tool_name(connector, "query")  # as an agent's legacy tool is named
    view = CallView(name, asked, database_metadata(db, "query", asked))

    async def rebuild(arguments: dict[str, Any]) -> CallView:
        """The view of a statement a hook rewrote: its SQL judged again, as the first's."""
        await prepare_query(db, arguments)
        return CallView(name, arguments, database_metadata(db, "query", arguments))

    asked, view = await ctx.guarded(view.name, asked, view, rebuild)
    if not reads_only and ctx.guard is not None:  # a declared readonly_guard judging it
        # deferred: the builtin hooks load only for a guarded workflow's database node
        from fim.hooks.builtin.readonly_guard import holds_over

        judged = view.context("PreToolUse", ctx.workflow, ctx.run_id, {})
        reads_only = holds_over(ctx.guard, judged)
    sql, params = str(asked.get("sql", "")), asked.get("params") or {}
    finished = ctx.traced_call(name, {"sql": sql, "params": params})

    async def query() -> ToolResult:
        """The statement run, its rows (or what went wrong) as a tool result."""
        try:
            result = await db.run(sql, params, read_only_run=reads_only)
        except SqlRejected as exc:
            ran = "read-only run"
            where = f"read-only '{connector}'" if decl.read_only else f"'{connector}' ({ran})"
            refused = f"query refused on {where}: {exc}"
            return ToolResult(content=refused, is_error=True)
        except Exception as exc:
            problem = f"query on '{connector}' failed: {describe_error(exc, db, reads_only)}"
            return ToolResult(content=problem, is_error=True)
        # a node's decisions are only as good as its rows: a cut result fails the node
        # instead of passing on as if it were whole
        missing = result.notes(decl)
        if result.cut:
            missing.insert(0, f"more than max_rows {decl.max_rows} rows")
        if missing:
            return ToolResult(
                content=f"query on '{connector}' gave a partial result ({'; '.join(missing)}); "
                "a workflow node gets every row or fails: select fewer rows (LIMIT) or shorter "
                "values, or raise the connector's limits",
                is_error=True,
            )
        if not result.columns:
            return ToolResult(content=json.dumps({"rowcount": result.rowcount}))
        if (twice := _duplicate_column(result.columns)) is not None:
            return ToolResult(
                content=f"query on '{connector}' returned more than one column named "
                f"'{twice}': a node's row is a dict, one value per name; give each column "
                "its own name with AS (e.g. SELECT a.id AS a_id, b.id AS b_id)",
                is_error=True,
            )
        rows = [dict(zip(result.columns, row, strict=False)) for row in result.rows]
        if (column := _non_finite_column(rows)) is not None:
            return ToolResult(
                content=f"query on '{connector}' returned NaN or Infinity in column "
                f"'{column}', which is not a JSON number (every condition on it would be "
                "false); filter those rows out or map them, e.g. NULLIF(col, 'NaN')",
                is_error=True,
            )
        # Dates and decimals become text so the output can be stored as JSON.
        return ToolResult(content=json.dumps(rows, default=str, ensure_ascii=False))

    # no registry here: the seam the registry's calls pass (`fim eval` replays through it)
    ran = await through_seam(name, {"sql": sql, "params": params}, None, query)
    if ran.is_error:
        finished(ran)
        raise NodeError(ran.content)
    output: Any = json.loads(ran.content)
    shown = await ctx.guarded_result(
        view, ToolResult(content=json.dumps(output, ensure_ascii=False)[:20_000])
    )
    finished(shown)
    return output


def _duplicate_column(columns: list[str]) -> str | None:
    """The first name two columns share, None when each is unique: a node's rows are dicts,
    where the last of two `id`s silently replaced the first (`SELECT 1 AS a, 2 AS a` gave
    `{"a": 2}`, attack-33 #3). The agents' SQL tool shows a table, where both stay."""
    seen: set[str] = set()
    for name in columns:
        if name in seen:
            return name
        seen.add(name)
    return None


def _non_finite_column(rows: list[dict[str, Any]]) -> str | None:
    """The column of the first NaN or Infinity in `rows`, None when every number is
    finite: a database node refuses them as every other node output does
    (`fim.structured.finite`), since a NaN amount makes `amount > 100` false and skipped
    the approval it guarded (attack-33 #2)."""
    where = non_finite(rows)
    if where is None:
        return None
    row = rows[int(where.split(".", 1)[0])]
    return next(name for name, value in row.items() if non_finite(value) is not None)


async def call_mcp(ctx: NodeContext, server: str, tool: str, args: dict[str, Any]) -> Any:
    """Call a tool of a declared MCP server, validating the arguments against its schema."""
    # deferred: loading fim.mcp.legacy costs tens of ms
    from fim.mcp.errors import McpUnavailable
    from fim.mcp.legacy import adapt
    from fim.mcp.manager import get_manager

    decl = ctx.snapshot.project.mcp_servers.get(server)
    if decl is None:
        raise NodeError(
            f"unknown MCP server '{server}' (servers in fim.yaml: "
            f"{', '.join(sorted(ctx.snapshot.project.mcp_servers)) or 'none'})"
        )
    conn = get_manager(ctx.services).connection(
        server, decl, ctx.snapshot.root, mask=ctx.snapshot.mask, owner=current_owner.get()
    )
    try:
        await conn.start()
    except McpUnavailable as exc:
        raise NodeError(f"MCP server '{server}' is unavailable: {exc}") from None
    info = next((t for t in conn.tools if t.name == tool), None)
    if info is None:
        names = ", ".join(t.name for t in conn.tools) or "none"
        raise NodeError(f"MCP server '{server}' has no tool '{tool}' (tools: {names})")
    return await ctx.call_tool(adapt(conn, info), args)


__all__ = ["call_mcp", "connector_action", "run_sql"]
