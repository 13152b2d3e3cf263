"""One SQLite statement from opening the database to its last row: what a killable worker
runs for a database connector.

Its own module because this is what crosses the process boundary: everything it needs comes
in its arguments (the database, the declaration, the statement; all pickle) and all it gives
back is a `QueryResult` or an exception. Run by `fim.tools.isolate`, the statement's worst
case is bounded by the OS, not by SQLite's own checks alone: the worker's address space is
capped, it is killed past the deadline (whatever single opcode is running), and SQLite's heap
limit is that worker's own, one statement at a time, so a statement that needs too much
fails alone instead of failing fim's own SQLite store with it.
"""

from __future__ import annotations

import sqlite3
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from fim.config.schema import DatabaseConnector
from fim.connectors import readonly
from fim.connectors.database.rows import QueryResult, Rows, read_one_by_one, size_limit
from fim.connectors.database.sqlite import sqlite_limits


@dataclass(frozen=True)
class SqliteTarget:
    """Which database a statement opens, and how."""

    database: str
    """A file's path, a `file:` URI, or `:memory:`."""
    read_only: bool


def run_statement(
    target: SqliteTarget,
    decl: DatabaseConnector,
    sql: str,
    params: dict[str, Any] | None = None,
    heap: int | None = None,
) -> QueryResult:
    """Run one statement within the connector's limits (`heap`: SQLite's heap limit for the
    whole process, set only where the process runs nothing else, i.e. in a worker). On a
    read-only database nothing is ever committed; a writable one commits what it changed."""
    deadline = time.monotonic() + decl.statement_timeout
    conn = _open(target, decl, heap)
    conn.text_factory = _text
    _deadline(conn, deadline)
    try:
        cursor = conn.execute(sql, params or {})
        if cursor.description is None:
            outcome = QueryResult([], [], False, cursor.rowcount)
        else:
            columns = [d[0] for d in cursor.description]
            rows = Rows(decl, deadline)
            read_one_by_one(cursor.fetchone, rows)
            cursor.close()
            outcome = rows.result(columns)
        if not target.read_only:
            conn.commit()
        return outcome
    finally:
        conn.set_progress_handler(None, 0)
        conn.close()  # without a commit: rolled back


def _open(target: SqliteTarget, decl: DatabaseConnector, heap: int | None) -> sqlite3.Connection:
    """The connection, its limits set; a writer's lock is waited for until the deadline."""
    limit, wait = size_limit(decl), decl.statement_timeout
    if target.read_only:
        database = target.database
        if not database.startswith("file:"):
            database = "file:" + quote(database)
        conn: sqlite3.Connection = readonly.open_sqlite_read_only(
            database, lambda raw: sqlite_limits(raw, limit, heap=heap), busy_timeout=wait
        )
        return conn
    conn = sqlite3.connect(target.database, uri=target.database.startswith("file:"), timeout=wait)
    try:
        sqlite_limits(conn, limit, read_only=False, heap=heap)
        conn.set_authorizer(readonly.sqlite_write_authorizer)  # after its PRAGMAs
    except BaseException:
        conn.close()
        raise
    return conn


def _text(data: bytes) -> str:
    """A TEXT value, bytes that are not UTF-8 shown as U+FFFD: SQLite stores whatever bytes
    it was given, and one such value failed every query reading its row (`Could not decode
    to UTF-8 column`)."""
    return data.decode("utf-8", "replace")


def _deadline(conn: sqlite3.Connection, deadline: float) -> None:
    """End the statement at the deadline with SQLite's own error: a progress handler between
    opcodes. A single step that runs on (a sort) is ended by the worker being killed (the
    caller's timeout): an interrupting timer thread here would cost the worker a malloc
    arena of address space for every later call."""
    conn.set_progress_handler(lambda: int(time.monotonic() > deadline), 1000)
