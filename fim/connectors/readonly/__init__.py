"""Read-only databases, decided in one place.

Every site that asks "may this SQL run on a read-only connector?" (the database tools and
meta-tool, the `readonly_guard` hook, workflow `sql` nodes, `fim validate --live`) calls
this package, and the answer is parsed once per SQL text (`decide` is memoised). The layers:

1. **Statement** (`decide`): exactly one read statement, parsed by the database's own
   parser for PostgreSQL (`fim.connectors.sql_guard`); known side-effect and SQL-text
   functions are refused here already, so hooks see the same verdict without a connection.
2. **Catalog** (`PgCatalog`, PostgreSQL): every function, operator and type the statement
   names must be one PostgreSQL itself marks safe: in `pg_catalog`/`information_schema`,
   not VOLATILE (a few harmless ones excepted), not SECURITY DEFINER, not from an
   extension. Looked up in `pg_proc`/`pg_operator`/`pg_type`, cached per engine.
3. **Role** (`role_problems`, PostgreSQL): on the first connect the connector's role must
   not be a superuser nor able to write anything (table, column and sequence privileges,
   CREATE on the database or a schema, the `pg_write_*`/server-file/signal roles).
4. **Connection**: PostgreSQL sessions default to read-only transactions, each query runs
   in a read-only transaction that is rolled back, carry statement/lock/idle timeouts and
   are `DISCARD ALL`-ed when returned to the pool (dropping advisory locks, prepared
   statements and settings); SQLite opens with `mode=ro`, `query_only` and an authorizer
   that allows only reads.

A *run* that may only read (its agent, the project or an agent above it says `read_only:
true`: `run_reads_only`) gets layers 1, 2 and 4 on a writable connector too: its statement
is checked and run exactly as a read-only connector's, but with the connector's own role.
So does each query a declared `readonly_guard` judges (`with: {always: true}`, within its
matcher: `fim.connectors.provider.read_only_of`). On a writable PostgreSQL connector the
hook view puts a statement to layer 2 as well (`fim.connectors.meta.prepare_query`), so
`confirm` asks about a SELECT of a function that writes.

Modules, by layer: `catalog` (2), `role` (3), `connection` (4), `runs` (which runs only
read); this module is the statement layer (1) every site calls, and what the database
connectors import.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from fim.connectors.readonly.catalog import HARMLESS_VOLATILE, TRUSTED_SCHEMAS, PgCatalog
from fim.connectors.readonly.connection import (
    CHECK_INTERVAL,
    begin_read_only,
    install_pg_pool_reset,
    open_sqlite_read_only,
    pg_options,
    sqlite_read_authorizer,
    sqlite_write_authorizer,
)
from fim.connectors.readonly.role import (
    ROLE_HINT,
    WRITE_ROLES,
    ReadOnlyRoleError,
    role_error,
    role_problems,
)
from fim.connectors.readonly.runs import run_reads_only
from fim.connectors.sql_guard import Parsed, SqlRejected, check_read_only


@dataclass(frozen=True)
class Decision:
    """The static verdict on one SQL text: `refusal` is None when it may run."""

    sql: str
    dialect: str | None
    refusal: str | None
    parsed: Parsed | None = None

    @property
    def allowed(self) -> bool:
        return self.refusal is None

    def require(self) -> Parsed:
        """The parsed statement, or `SqlRejected` with the reason."""
        if self.parsed is None:
            raise SqlRejected(self.refusal or "refused")
        return self.parsed


MAX_SQL_CHARS = 100_000
"""Longer statements are refused before parsing (a read query the model writes is short)."""
_MEMO_CHARS = 20_000
"""Only statements up to this size are memoised, so the memo stays small."""


def decide(sql: str, dialect: str | None) -> Decision:
    """Whether `sql` is one read statement (memoised: the hook, the hook view and the
    connector all ask about the same text, and it is parsed once)."""
    if len(sql) > MAX_SQL_CHARS:
        return Decision(
            sql,
            dialect,
            f"the SQL is {len(sql)} characters long; a read-only database accepts at most "
            f"{MAX_SQL_CHARS}",
        )
    if len(sql) > _MEMO_CHARS:
        return _decide(sql, dialect)
    return _memo(sql, dialect)


def _decide(sql: str, dialect: str | None) -> Decision:
    try:
        return Decision(sql, dialect, None, check_read_only(sql, dialect))
    except SqlRejected as exc:
        return Decision(sql, dialect, str(exc))
    except Exception as exc:  # a parser crash is a refusal, never a pass
        return Decision(
            sql, dialect, f"the statement could not be verified as read-only ({exc!r:.200})"
        )


_memo = functools.lru_cache(maxsize=512)(_decide)


__all__ = [
    "CHECK_INTERVAL",
    "HARMLESS_VOLATILE",
    "MAX_SQL_CHARS",
    "ROLE_HINT",
    "TRUSTED_SCHEMAS",
    "WRITE_ROLES",
    "Decision",
    "PgCatalog",
    "ReadOnlyRoleError",
    "begin_read_only",
    "decide",
    "install_pg_pool_reset",
    "open_sqlite_read_only",
    "pg_options",
    "role_error",
    "role_problems",
    "run_reads_only",
    "sqlite_read_authorizer",
    "sqlite_write_authorizer",
]
