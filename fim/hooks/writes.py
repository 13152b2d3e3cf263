"""Whether a tool call writes, and why: the one decision `readonly_guard` (which blocks a
write of a read-only agent or project) and `confirm` (which asks a human before a write)
share, so that "a write" can never mean two things.

A call writes when its metadata says `access: write|admin` (connector actions, builtins
such as shell, python_exec and file_ops' write operations, project functions not marked
`@fim.tools.read_only`, MCP tools not hinted read-only or not yet known, a database query not
found to be a read: on PostgreSQL also one naming a function the read-only catalog check
refuses, `fim.connectors.meta.prepare_query`), or when it carries SQL that is not exactly
one plain read statement.
The SQL rules are the database connector's own read-only decision
(`fim.connectors.readonly.decide`, memoised), parsed off the event loop: model-written SQL
is untrusted work, and sqlglot can take a tenth of a second on a hostile statement.
A call with no `access` and no SQL (a read builtin, `call_agent`, `run_workflow`) is not a
write here; the calls those start meet the hooks on their own.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fim.types import HookContext


@dataclass(frozen=True)
class Write:
    """Why a call writes: its declared `access`, or the refusal of its SQL."""

    access: str | None = None
    """`write` or `admin` when the call's metadata declares it."""
    refusal: str | None = None
    """Why its SQL is not one plain read statement (the database connector's words)."""
    why: str | None = None
    """Why a call declared a write is one, when its metadata says (`write_reason`: a
    PostgreSQL statement naming a function the read-only catalog check refuses)."""

    def describe(self, tool: str | None) -> str:
        """For a human or a model: `'save_note' is a write action`, or the SQL's refusal."""
        if self.access is not None:
            because = f" ({self.why})" if self.why else ""
            return f"'{tool}' is a {self.access} action{because}"
        return f"its SQL is not one plain read statement: {self.refusal}"


def sql_of(context: HookContext) -> str | None:
    """The SQL a call would run: the `sql` argument, or `query` on a SQL tool."""
    args = context.tool_args or {}
    meta = context.metadata
    if isinstance(args.get("sql"), str):
        return args["sql"]
    if isinstance(args.get("query"), str) and (meta.get("sql") or meta.get("kind") == "database"):
        return args["query"]
    if isinstance(meta.get("sql"), str) and meta["sql"].strip():
        return meta["sql"]
    return None


async def write_of(context: HookContext) -> Write | None:
    """How the call `context` writes, or None when it only reads (see the module)."""
    access = context.metadata.get("access")
    if access in ("write", "admin"):
        why = context.metadata.get("write_reason")
        return Write(access=access, why=why if isinstance(why, str) else None)
    sql = sql_of(context)
    if sql is None:
        return None
    import asyncio  # deferred: `fim validate` loads the hooks' options, not asyncio

    # deferred: loading fim.connectors.database costs tens of ms
    from fim.connectors.readonly import decide
    from fim.connectors.sql_guard import dialect_for

    decision = await asyncio.to_thread(decide, sql, _dialect(context.metadata, dialect_for))
    return None if decision.allowed else Write(refusal=decision.refusal)


def _dialect(meta: dict[str, Any], dialect_for: Any) -> str | None:
    if isinstance(meta.get("dialect"), str):
        return meta["dialect"]
    if isinstance(meta.get("url"), str):
        return dialect_for(meta["url"])
    return None


__all__ = ["Write", "sql_of", "write_of"]
