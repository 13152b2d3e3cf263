"""The parser half of read-only databases: only one plain read statement passes.

This is the static layer of `fim.connectors.readonly` (which also consults the database
catalog and the connection's own limits), so the rules here are an allowlist, not a
blocklist: the statement must parse, be exactly one statement, be a SELECT / set operation
/ VALUES (or EXPLAIN of one, or PostgreSQL SHOW), and contain no data-modifying node, no
locking clause, no `SELECT ... INTO` and no function known to have side effects. Anything
the parser does not understand is refused rather than guessed at.

PostgreSQL statements are read by PostgreSQL's own parser (libpg_query, through `pglast`),
so `U&"..."` escapes, quoting, case folding, dollar quoting and comments mean exactly what
the server will take them to mean; the result lists every function, operator and type the
statement names, for the catalog check. Other dialects go through sqlglot.

Modules, by concept: `rules` (what every dialect refuses: side-effect functions, PRAGMAs;
`Parsed`, `SqlRejected`), `sqlglot_dialects` (every dialect but PostgreSQL) and `postgres`
(PostgreSQL's parser); this module picks the dialect of a URL and the check for it.
"""

from __future__ import annotations

from fim.connectors.sql_guard.postgres import check_postgres
from fim.connectors.sql_guard.rules import (
    ARGUMENT_PRAGMAS,
    READ_PRAGMAS,
    Name,
    Parsed,
    SqlRejected,
    is_side_effect_function,
)
from fim.connectors.sql_guard.sqlglot_dialects import check_sqlglot

_DIALECTS = {
    "sqlite": "sqlite",
    "postgresql": "postgres",
    "postgres": "postgres",
    "mysql": "mysql",
    "mariadb": "mysql",
    "mssql": "tsql",
    "oracle": "oracle",
    "duckdb": "duckdb",
    "snowflake": "snowflake",
    "bigquery": "bigquery",
}


def dialect_for(url: str) -> str | None:
    """The sqlglot dialect of a SQLAlchemy URL (`postgresql+psycopg://` -> `postgres`)."""
    backend = url.split(":", 1)[0].split("+", 1)[0].lower()
    return _DIALECTS.get(backend)


def check_read_only(sql: str, dialect: str | None = None) -> Parsed:
    """Raise `SqlRejected` unless `sql` is exactly one read-only statement."""
    if dialect == "postgres":
        return check_postgres(sql)
    check_sqlglot(sql, dialect)
    return Parsed(sql)


__all__ = [
    "ARGUMENT_PRAGMAS",
    "READ_PRAGMAS",
    "Name",
    "Parsed",
    "SqlRejected",
    "check_read_only",
    "dialect_for",
    "is_side_effect_function",
]
