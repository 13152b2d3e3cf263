"""PostgreSQL below SQLAlchemy: values over the cap cut in libpq's buffer, and statements
always prepared on a read-only connector.

Its own module because these hook into psycopg (loaders, the extended protocol) on the
engine's connections; `fim.connectors.readonly` decides what read-only means, this only
makes sure the driver cannot be talked around it (`;`-batches of the simple protocol).
"""

from __future__ import annotations

import functools
from typing import Any

from fim.connectors.database.rows import Truncated


def cap_pg_loaders(conn: Any, cap: int) -> None:
    """Load every PostgreSQL value longer than `cap` bytes as its cut text: the value is
    sliced in libpq's buffer, so a 100 MB `repeat()` never becomes a 100 MB Python object
    (unknown types fall back to oid 0, which is wrapped too)."""
    # deferred: loading psycopg costs hundreds of ms
    from psycopg.pq import Format

    adapters = conn.adapters
    oids = {0}
    for info in adapters.types:
        oids.add(info.oid)
        if info.array_oid:
            oids.add(info.array_oid)
    for oid in oids:
        inner = adapters.get_loader(oid, Format.TEXT)
        if inner is not None and not getattr(inner, "fim_capped", False):
            adapters.register_loader(oid, _capped_loader(inner, cap))


@functools.cache
def _capped_loader(inner: type, cap: int) -> type:
    # deferred: loading psycopg costs hundreds of ms
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
            return self._inner.load(data)

    return CappedLoader


def execute_prepared(cursor: Any, statement: str, parameters: Any, context: Any) -> bool:
    cursor.execute(statement, parameters, prepare=True)
    return True


def execute_prepared_no_params(cursor: Any, statement: str, context: Any) -> bool:
    cursor.execute(statement, prepare=True)
    return True
