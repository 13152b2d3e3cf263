"""The blocking side of a database connector: what runs on the `fim-db` threads (list,
describe) and in a killable worker process (a statement: `execute_isolated`).

Running one statement inside a read-only transaction (PostgreSQL: the catalog check first,
then the parsed text streamed row by row, a SELECT inside `postgres.bounded_select` so the
server withholds a row too big to send; SQLite: `sqlite_statement`), its rows read one at a
time within the limits of `rows.Rows`. Its own module because this is the security-critical
executor below the statement check: the async API above only decides what to hand it and
how to word the answer.
"""

from __future__ import annotations

import os
import time
from collections import OrderedDict
from pathlib import Path
from typing import Any

from fim.config.schema import DatabaseConnector
from fim.connectors import readonly
from fim.connectors.database.engine import Engine
from fim.connectors.database.postgres import bounded_select
from fim.connectors.database.rows import (
    FetchTimeout,
    QueryResult,
    Rows,
    read_one_by_one,
    size_limit,
)
from fim.connectors.database.sqlite_statement import SqliteTarget, run_statement
from fim.connectors.sql_guard import Parsed, SqlRejected, check_read_only

KEPT_ENGINES = 8
"""Connectors whose engines (and pooled connections) one worker process keeps; the least
recently used is disposed past it."""
_ERROR_HEAD = 4_000
"""Characters of a driver's message that cross back from the worker (plus twice the URL's
length, so a URL in the part kept is whole and can be replaced)."""


class Worker(Engine):
    """The synchronous calls of a database connector (callers are worker threads, and for
    statements a worker process: `execute_isolated`)."""

    def tables_sync(self) -> list[str]:
        # deferred: loading sqlalchemy costs hundreds of ms
        import sqlalchemy as sa

        inspector = sa.inspect(self.engine())
        names: list[str] = []
        for schema in self.decl.schemas or (None,):
            prefix = f"{schema}." if schema else ""
            found = inspector.get_table_names(schema=schema)
            found += inspector.get_view_names(schema=schema)
            names.extend(prefix + n for n in sorted(found))
        self.tables_cache = names
        return names

    def describe_sync(self, table: str) -> str:
        # deferred: loading sqlalchemy costs hundreds of ms
        import sqlalchemy as sa

        tables = self.tables_sync()
        if table not in tables:
            listing = ", ".join(tables[:50]) + (" ..." if len(tables) > 50 else "")
            raise LookupError(
                f"there is no table '{table}' in database '{self.name}'. Tables: "
                f"{listing or 'none'}. Call list_tables, then describe one of these."
            )
        schema, _, bare = table.rpartition(".")
        inspector = sa.inspect(self.engine())
        columns = inspector.get_columns(bare, schema=schema or None)
        pk = set(
            inspector.get_pk_constraint(bare, schema=schema or None).get("constrained_columns")
            or []
        )
        fks = inspector.get_foreign_keys(bare, schema=schema or None)
        refs: dict[str, str] = {}
        for fk in fks:
            target = ".".join(p for p in (fk.get("referred_schema"), fk["referred_table"]) if p)
            for col, ref in zip(fk["constrained_columns"], fk["referred_columns"], strict=False):
                refs[col] = f"{target}.{ref}"
        lines = [f"table {table} ({len(columns)} columns)"]
        for col in columns:
            parts = [col["name"], str(col["type"])]
            parts.append("NULL" if col.get("nullable", True) else "NOT NULL")
            if col["name"] in pk:
                parts.append("PRIMARY KEY")
            if col["name"] in refs:
                parts.append(f"-> {refs[col['name']]}")
            if col.get("default") is not None:
                parts.append(f"DEFAULT {col['default']}")
            lines.append("- " + " ".join(parts))
        return "\n".join(lines)

    def catalog_refusal_sync(self, parsed: Parsed) -> str | None:
        """PostgreSQL: why the catalog layer would refuse the checked statement `parsed`
        on a read-only connector (a function outside `pg_catalog`/`information_schema`, a
        VOLATILE one...), None when it would not: for a writable connector's hook view,
        so `confirm` asks about `SELECT shop.cancel_order(2)`. A statement that names
        nothing, or only names already looked up, needs no connection; the lookups are
        fim's own queries of the catalog, rolled back. Raises when the database cannot be
        reached (the caller fails closed)."""
        if not (parsed.functions or parsed.operators or parsed.types):
            return None
        try:
            if self.catalog.knows(parsed):
                self.catalog.check(None, parsed)
                return None
            engine = self.engine()  # first: creating the engine starts a fresh catalog
            with engine.connect() as conn:
                try:
                    self.catalog.check(conn.connection.driver_connection, parsed)
                finally:
                    conn.rollback()
        except SqlRejected as exc:
            return str(exc)
        return None

    def execute_sync(
        self,
        sql: str,
        params: dict[str, Any] | None = None,
        parsed: Parsed | None = None,
        heap: int | None = None,
        read_only_run: bool = False,
    ) -> QueryResult:
        """Run one statement; on a read-only database its transaction is always rolled back.

        Without `parsed` this is the executor *below* the statement check: it relies only
        on the connection being read-only, which is what the guard-bypass tests exercise.
        With it (PostgreSQL), the catalog check runs first, on the same connection, and
        the exact text that was parsed is streamed row by row. `heap`: SQLite's heap limit
        for the whole process (only in a worker process, `execute_isolated`).
        `read_only_run`: the calling run may only read (`readonly.run_reads_only`), so on a
        writable connector too the statement runs as on a read-only one: in a read-only
        transaction (PostgreSQL) or on a read-only connection (SQLite), never committed.
        """
        reads_only = self.decl.read_only or read_only_run
        if self.dialect == "sqlite":
            target = self.sqlite_target()
            if reads_only and not target.read_only:
                target = SqliteTarget(target.database, read_only=True)
            return run_statement(target, self.decl, sql, params, heap)
        # deferred: loading sqlalchemy costs hundreds of ms
        import sqlalchemy as sa

        deadline = time.monotonic() + self.decl.statement_timeout
        rows = Rows(self.decl, deadline)
        with self.engine().connect() as conn:
            raw = conn.connection.driver_connection
            try:
                if self.dialect == "postgres" and reads_only:
                    readonly.begin_read_only(conn)
                if parsed is not None and self.dialect == "postgres":
                    self.catalog.check(raw, parsed)
                    return self._stream_pg(raw, parsed, params or {}, rows)
                result = conn.execute(sa.text(sql), params or {})
                if result.returns_rows:
                    columns = list(result.keys())
                    read_one_by_one(result.fetchone, rows)
                    result.close()
                    outcome = rows.result(columns)
                else:
                    outcome = QueryResult([], [], False, result.rowcount)
                if not reads_only:
                    conn.commit()
                return outcome
            finally:
                conn.rollback()

    def _stream_pg(
        self, raw: Any, parsed: Parsed, params: dict[str, Any], rows: Rows
    ) -> QueryResult:
        # deferred: loading psycopg costs hundreds of ms
        import psycopg

        missing = [n for n in parsed.params if n not in params]
        if missing:
            raise SqlRejected(f"no value given for the placeholder :{missing[0]} (params)")
        cursor = psycopg.RawCursor(raw)
        values = [params[n] for n in parsed.params]
        sql, bounded, limit = parsed.sql, parsed.kind == "select", size_limit(self.decl)
        if bounded:  # EXPLAIN and SHOW cannot be selected from
            # fim's own query around the checked text is checked like any statement
            sql = check_read_only(bounded_select(_statement(parsed), limit), "postgres").sql
        columns: list[str] = []
        try:
            for row in cursor.stream(sql, values or None):
                if not columns:
                    columns = [c.name for c in cursor.description or ()]
                    if bounded:
                        columns.pop()
                if bounded and row[-1] > limit:
                    rows.refuse(row[-1])
                    break
                if not rows.add(tuple(row[:-1] if bounded else row)):
                    break
            if not columns:
                columns = self._pg_columns(cursor, parsed, values)
        finally:
            cursor.close()
        return rows.result(columns)

    @staticmethod
    def _pg_columns(cursor: Any, parsed: Parsed, values: list[Any]) -> list[str]:
        """Column names of a stream that returned no rows (psycopg drops the final
        description): the checked SELECT again under `LIMIT 0`, which PostgreSQL answers
        without running it; the wrapped text is checked like any other statement."""
        if parsed.kind != "select":
            return ["result"]
        text = f"SELECT * FROM (\n{_statement(parsed)}\n) AS fim_q LIMIT 0"
        wrapped = readonly.decide(text, "postgres").require()
        cursor.execute(wrapped.sql, values or None)
        return [c.name for c in cursor.description or ()] or ["result"]


class StatementFailed(Exception):
    """A statement's failure as it crosses back from a worker process: the driver's message
    cut to its head (a PostgreSQL error quoting a model-built value can be 1 GB, and the
    whole of it would be pickled back into fim's process)."""


_engines: OrderedDict[tuple[str, str, str, str], Worker] = OrderedDict()


def execute_isolated(
    name: str,
    decl: DatabaseConnector,
    root: Path,
    sql: str,
    params: dict[str, Any],
    heap: int | None,
    env: dict[str, str] | None = None,
    read_only_run: bool = False,
) -> QueryResult:
    """One statement, in a killable worker process (`Database.run`): parsed and checked
    here as well, since parsing model-written SQL is untrusted work too. The connector's
    engine stays for the worker's next statements. `env`: fim's own variables a driver
    reads (`driver_env`), since a worker starts with an empty environment. What fails comes
    back as fim's own error (short already) or as `StatementFailed`. `read_only_run`: the
    calling run may only read, so the statement is checked and run as on a read-only
    connector (`Worker.execute_sync`), whatever the connector's own `read_only`."""
    try:
        _use_env(env or {})
        worker = _engine_of(name, decl, root, env or {})
        reads_only = decl.read_only or read_only_run
        parsed = readonly.decide(sql, worker.dialect).require() if reads_only else None
        return worker.execute_sync(sql, params, parsed, heap, read_only_run)
    except (SqlRejected, readonly.ReadOnlyRoleError, FetchTimeout, MemoryError):
        raise
    except Exception as exc:
        orig = getattr(exc, "orig", None) or exc
        head = str(orig)[: _ERROR_HEAD + 2 * len(decl.url)]  # str() of the message: no copy
        unread = f"{type(orig).__name__} (the database's message was empty or too big to read)"
        raise StatementFailed(head or unread) from None


def driver_env() -> dict[str, str]:
    """What a driver reads from fim's environment: libpq's `PG*` variables (a password,
    TLS files, the host) and `HOME` (where `~/.pgpass` is)."""
    return {k: v for k, v in os.environ.items() if k.startswith("PG") or k == "HOME"}


def _use_env(env: dict[str, str]) -> None:
    for key in [k for k in os.environ if k.startswith("PG") or k == "HOME"]:
        if key not in env:
            del os.environ[key]
    os.environ.update(env)


def _engine_of(name: str, decl: DatabaseConnector, root: Path, env: dict[str, str]) -> Worker:
    """The connector's engine in this worker, made anew when the declaration or the
    driver's environment changed (a pooled connection keeps what it connected with)."""
    key = (name, decl.model_dump_json(), str(root), repr(sorted(env.items())))
    worker = _engines.pop(key, None) or Worker(name, decl, root)
    _engines[key] = worker
    while len(_engines) > KEPT_ENGINES:
        _, old = _engines.popitem(last=False)
        old.dispose()
    return worker


def _statement(parsed: Parsed) -> str:
    """The checked statement without a trailing `;` or comment, to nest in fim's own query."""
    return parsed.statement or parsed.sql
