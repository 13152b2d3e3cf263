"""The statements a served run executes, compiled once and run on the driver's cursor.

Every served run writes the same few statements (its events, its usage row, its record).
SQLAlchemy Core spends more Python per execution than the database spends doing the work:
an execution context, parameter processing per row, a result object, event dispatch.
Here the statement is still written with SQLAlchemy (one schema, both dialects) and
compiled by it once per dialect; its parameters go through the column types' own bind
processors (JSON serialisation), so the rows written are exactly those `conn.execute`
would write. It runs on the sqlite3 connection or the psycopg cursor of the SQLAlchemy
connection, inside its transaction (psycopg prepares it server-side after a few uses).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sqlalchemy import Connection

Processors = list[tuple[str, Callable[[Any], Any] | None]]
"""Each parameter's name and its type's bind processor (None: passed as is)."""


class Prepared:
    """One statement with named parameters `keys`, built by `build()` on first use."""

    def __init__(self, build: Callable[[], Any], keys: Sequence[str]) -> None:
        self._build = build
        self.keys = tuple(keys)
        self._compiled: dict[str, tuple[str, Processors]] = {}
        """Per dialect: the SQL text and its parameters (SQLite: positional, in order)."""

    def _compile(self, conn: Connection) -> tuple[str, Processors]:
        dialect = conn.dialect
        found = self._compiled.get(dialect.name)
        if found is None:
            compiled: Any = self._build().compile(dialect=dialect, column_keys=self.keys)
            names = compiled.positiontup or list(compiled.binds)
            processors = [
                (name, compiled.binds[name].type.bind_processor(dialect)) for name in names
            ]
            found = self._compiled[dialect.name] = (compiled.string, processors)
        return found

    def _params(self, conn: Connection, row: Mapping[str, Any]) -> Any:
        processors = self._compile(conn)[1]
        values = (p(row[name]) if p is not None else row[name] for name, p in processors)
        if conn.dialect.name == "sqlite":
            return tuple(values)
        return dict(zip((name for name, _ in processors), values, strict=True))

    def execute(self, conn: Connection, rows: Sequence[Mapping[str, Any]]) -> None:
        """Execute for each row (an INSERT of many rows, an upsert)."""
        sql = self._compile(conn)[0]
        params = [self._params(conn, row) for row in rows]
        raw: Any = conn.connection.driver_connection
        if conn.dialect.name == "sqlite":
            if len(params) == 1:
                raw.execute(sql, params[0])
            else:
                raw.executemany(sql, params)
            return
        with raw.cursor() as cursor:  # psycopg: executemany pipelines the rows
            if len(params) == 1:
                cursor.execute(sql, params[0])
            else:
                cursor.executemany(sql, params)

    def scalar(self, conn: Connection, row: Mapping[str, Any]) -> Any:
        """The first column of the first row a query returns (None when none)."""
        sql = self._compile(conn)[0]
        params = self._params(conn, row)
        raw: Any = conn.connection.driver_connection
        if conn.dialect.name == "sqlite":
            found = raw.execute(sql, params).fetchone()
        else:
            with raw.cursor() as cursor:
                found = cursor.execute(sql, params).fetchone()
        return None if found is None else found[0]
