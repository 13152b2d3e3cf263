"""Statements a served run executes on SQLite, compiled once and run on the sqlite3 cursor.

Every served run writes the same three statements (its usage row, its events, its record).
SQLAlchemy Core spends more Python per execution than SQLite spends doing the work: an
execution context, parameter processing per row, a result object, event dispatch (~15 us
for one row, ~30 us more for a run's 13 events, on the store's one writer thread). Here
the statement is still written with SQLAlchemy (one schema, both dialects) and compiled
by it once per dialect; its parameters go through the column types' own bind processors
(JSON serialisation), so the rows written are exactly those `conn.execute` would write.
PostgreSQL (and any non-SQLite connection) takes the ordinary `conn.execute` path.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sqlalchemy import Connection

Processors = list[tuple[str, Callable[[Any], Any] | None]]
"""Each positional parameter's name and its type's bind processor (None: passed as is)."""


class Prepared:
    """One statement with named parameters `keys`, built by `build()` on first use."""

    def __init__(self, build: Callable[[], Any], keys: Sequence[str]) -> None:
        self._build = build
        self.keys = tuple(keys)
        self._statement: Any = None
        self._compiled: tuple[str, Processors] | None = None

    @property
    def statement(self) -> Any:
        if self._statement is None:
            self._statement = self._build()
        return self._statement

    def _sqlite(
        self, conn: Connection
    ) -> tuple[str, list[tuple[str, Callable[[Any], Any] | None]]]:
        if self._compiled is None:
            compiled: Any = self.statement.compile(dialect=conn.dialect, column_keys=self.keys)
            order = compiled.positiontup or []
            processors = [
                (name, compiled.binds[name].type.bind_processor(conn.dialect)) for name in order
            ]
            self._compiled = (compiled.string, processors)
        return self._compiled

    def execute(self, conn: Connection, rows: Sequence[Mapping[str, Any]]) -> None:
        """Execute for each row (an INSERT of many rows, an upsert)."""
        if conn.dialect.name != "sqlite":
            conn.execute(self.statement, list(rows))
            return
        sql, processors = self._sqlite(conn)
        params = [
            tuple(p(row[name]) if p is not None else row[name] for name, p in processors)
            for row in rows
        ]
        raw: Any = conn.connection.driver_connection
        if len(params) == 1:
            raw.execute(sql, params[0])
        else:
            raw.executemany(sql, params)

    def scalar(self, conn: Connection, row: Mapping[str, Any]) -> Any:
        """The first column of the first row a query returns (None when none)."""
        if conn.dialect.name != "sqlite":
            return conn.execute(self.statement, dict(row)).scalar()
        sql, processors = self._sqlite(conn)
        params = tuple(p(row[name]) if p is not None else row[name] for name, p in processors)
        raw: Any = conn.connection.driver_connection
        found = raw.execute(sql, params).fetchone()
        return None if found is None else found[0]
