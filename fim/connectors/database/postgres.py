"""PostgreSQL below SQLAlchemy: rows over a size withheld by the server, values over the
cap cut in libpq's buffer, and statements always prepared on a read-only connector.

Its own module because these hook into PostgreSQL and psycopg (a query around the checked
SELECT, loaders, the extended protocol) on the engine's connections;
`fim.connectors.readonly` decides what read-only means, this only makes sure the driver
cannot be talked around it (`;`-batches of the simple protocol) and that no single row
costs fim more than a bound.

What this does not bound: libpq reads every protocol message whole before anything else
sees it, and PostgreSQL sends up to 1 GB in one. A SELECT's rows are checked by the server
(`bounded_select`), but an EXPLAIN line (it shows folded constants: `WHERE x =
repeat('a', 900000000)`) and an error message (`repeat('x', 900000000)::int` quotes the
value) are not: such a message costs its size a few times over while it is read
(measured: 2x for a row, 8x for an error), whatever the caps below say. That is why
statements run in a killable worker process whose address space is capped
(`Database.run`): there, such a message fails the statement, not fim.
"""

from __future__ import annotations

import functools
from typing import Any

from fim.connectors.database.rows import Truncated

ROW_BYTES = "fim_row_bytes"
"""The column `bounded_select` adds: the size of the row's text, which the server computed."""


def bounded_select(statement: str, row_bytes: int) -> str:
    """`statement` (one checked SELECT) in a query that makes PostgreSQL itself withhold
    every row whose text is longer than `row_bytes`: such a row arrives as NULLs, and the
    last column (`ROW_BYTES`) is every row's size, so the reader knows which.

    The server, not fim, measures: libpq buffers a whole row before any loader sees it, so
    a row must be refused before it is sent. The row's text (`record_out`) is at least as
    long as what the text protocol sends for it, quoting included. Column names and types
    are the statement's own (`fim_q.*`); `OFFSET 0` keeps the statement and the size each
    computed once per row, and the statement's order is kept (its rows drive a nested
    loop). Needs no knowledge of the columns, so any SELECT, VALUES or set operation fits.
    """
    return (
        f"SELECT fim_v.*, fim_s.{ROW_BYTES} FROM (SELECT * FROM (\n{statement}\n) AS fim_i "
        "OFFSET 0) AS fim_q\n"
        f"CROSS JOIN LATERAL (SELECT octet_length(fim_q::text) AS {ROW_BYTES} OFFSET 0) "
        "AS fim_s\n"
        f"LEFT JOIN LATERAL (SELECT fim_q.* WHERE fim_s.{ROW_BYTES} <= {int(row_bytes)}) "
        "AS fim_v ON true"
    )


def cap_pg_loaders(conn: Any, cap: int) -> None:
    """Load every PostgreSQL value longer than `cap` bytes as its cut text: the value is
    sliced in libpq's buffer, so a 100 MB `repeat()` never becomes a 100 MB Python object
    (unknown types fall back to oid 0, which is wrapped too). libpq itself has read the
    whole row by then: `bounded_select` is what bounds that.

    A value its Python type cannot hold comes back as PostgreSQL's text of it (`infinity`,
    `2000-01-01 BC`) instead of failing every query that reads its row; an interval always
    does (`5 years 3 mons`: a timedelta would say `1915 days`)."""
    # deferred: loading psycopg costs hundreds of ms
    from psycopg.pq import Format
    from psycopg.types.string import TextLoader

    adapters = conn.adapters
    oids = {0}
    interval = None
    for info in adapters.types:
        oids.add(info.oid)
        if info.array_oid:
            oids.add(info.array_oid)
        if info.name == "interval":
            interval = info.oid
    for oid in oids:
        inner = TextLoader if oid == interval else adapters.get_loader(oid, Format.TEXT)
        if inner is not None and not getattr(inner, "fim_capped", False):
            adapters.register_loader(oid, _capped_loader(inner, cap))


@functools.cache
def _capped_loader(inner: type, cap: int) -> type:
    # deferred: loading psycopg costs hundreds of ms
    from psycopg import DataError
    from psycopg.adapt import Loader

    class CappedLoader(Loader):
        fim_capped = True

        def __init__(self, oid: int, context: Any = None) -> None:
            super().__init__(oid, context)
            self._inner = inner(oid, context)

        def load(self, data: Any) -> Any:
            if len(data) > cap:
                head = bytes(data[:cap]).decode("utf-8", "ignore")
                return Truncated.of(head, len(data), cap)
            try:
                return self._inner.load(data)
            except DataError:  # out of the Python type's range (`infinity`, a BC date)
                return bytes(data).decode("utf-8", "replace")

    return CappedLoader


def execute_prepared(cursor: Any, statement: str, parameters: Any, context: Any) -> bool:
    cursor.execute(statement, parameters, prepare=True)
    return True


def execute_prepared_no_params(cursor: Any, statement: str, context: Any) -> bool:
    cursor.execute(statement, prepare=True)
    return True
