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


ROWS_PER_STATEMENT = 32
"""PostgreSQL: rows per multi-row INSERT. psycopg's `executemany` pipelines one statement
per row, and its pipeline bookkeeping cost more than the round trips it saved (~40% of the
writer thread for a run's events); one INSERT of many VALUES is one statement. Batches are
cut to this size so few distinct statements are compiled (and prepared by the server)."""


class Prepared:
    """One statement with named parameters `keys`, built by `build()` on first use."""

    def __init__(self, build: Callable[[], Any], keys: Sequence[str]) -> None:
        self._build = build
        self.keys = tuple(keys)
        self._compiled: dict[tuple[str, int], tuple[str, Processors]] = {}
        """Per dialect and row count: the SQL text and its parameters (SQLite: positional,
        in order; PostgreSQL: named, `key_i` for row i of a multi-row INSERT)."""

    def _compile(self, conn: Connection, rows: int = 1) -> tuple[str, Processors]:
        dialect = conn.dialect
        found = self._compiled.get((dialect.name, rows))
        if found is None:
            statement = self._build()
            if rows > 1:  # a plain INSERT of many VALUES rows (bound with the column types)
                # deferred: loading sqlalchemy costs hundreds of ms
                from sqlalchemy import bindparam

                columns = statement.table.c
                statement = statement.values(
                    [
                        {k: bindparam(f"{k}_{i}", type_=columns[k].type) for k in self.keys}
                        for i in range(rows)
                    ]
                )
            compiled: Any = statement.compile(dialect=dialect, column_keys=self.keys)
            names = compiled.positiontup or list(compiled.binds)
            processors = [
                (name, compiled.binds[name].type.bind_processor(dialect)) for name in names
            ]
            found = self._compiled[(dialect.name, rows)] = (compiled.string, processors)
        return found

    def execute(self, conn: Connection, rows: Sequence[Mapping[str, Any]]) -> None:
        """Execute for each row (an INSERT of many rows, an upsert)."""
        raw: Any = conn.connection.driver_connection
        if conn.dialect.name == "sqlite":
            sql, processors = self._compile(conn)
            params = [
                tuple(p(row[name]) if p is not None else row[name] for name, p in processors)
                for row in rows
            ]
            if len(params) == 1:
                raw.execute(sql, params[0])
            else:
                raw.executemany(sql, params)
            return
        with raw.cursor() as cursor:
            for start in range(0, len(rows), ROWS_PER_STATEMENT):
                chunk = rows[start : start + ROWS_PER_STATEMENT]
                sql, processors = self._compile(conn, len(chunk))
                cursor.execute(sql, _named(processors, chunk))

    def scalar(self, conn: Connection, row: Mapping[str, Any]) -> Any:
        """The first column of the first row a query returns (None when none)."""
        sql, processors = self._compile(conn)
        raw: Any = conn.connection.driver_connection
        if conn.dialect.name == "sqlite":
            params = tuple(p(row[name]) if p is not None else row[name] for name, p in processors)
            found = raw.execute(sql, params).fetchone()
        else:
            with raw.cursor() as cursor:
                found = cursor.execute(sql, _named(processors, [row])).fetchone()
        return None if found is None else found[0]


def _named(processors: Processors, rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """PostgreSQL's named parameters of `rows` (one row: the keys themselves)."""
    if len(rows) == 1:
        row = rows[0]
        return {name: p(row[name]) if p is not None else row[name] for name, p in processors}
    params = {}
    for name, p in processors:
        key, _, index = name.rpartition("_")
        value = rows[int(index)][key]
        params[name] = p(value) if p is not None else value
    return params
