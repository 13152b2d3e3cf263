"""Layer 4 of read-only databases: the connection itself refuses to write.

Whatever the layers above miss, PostgreSQL sessions default to read-only transactions, run
each query in a read-only transaction, carry statement/lock/idle timeouts and are
`DISCARD ALL`-ed when returned to the pool; SQLite opens with `mode=ro`, `query_only` and an
authorizer that allows only reads.
"""

from __future__ import annotations

import functools
import sqlite3
from collections.abc import Callable
from typing import Any

from fim.connectors.sql_guard import ARGUMENT_PRAGMAS, READ_PRAGMAS, is_side_effect_function

CHECK_INTERVAL = "client_connection_check_interval"
"""PostgreSQL 14+: how often (ms) a backend running a query checks that its client is
still there. A statement's worker is killed when its run is cancelled; without the check
its query ran on until `statement_timeout`, so a tenant cancelling and restarting could
pile up backends up to the server's `max_connections`."""


def pg_options(statement_timeout: float, read_only: bool, check_client: bool = True) -> str:
    """Session defaults for every pooled PostgreSQL connection (libpq `options`); they
    survive `DISCARD ALL`, which resets to these values. `check_client`: end a query whose
    client went away within a second (`CHECK_INTERVAL`; a server older than 14 refuses the
    setting, and the engine connects again without it)."""
    ms = max(1, int(statement_timeout * 1000))
    settings: dict[str, object] = {
        "statement_timeout": ms,
        "lock_timeout": min(ms, 5000),
        "idle_in_transaction_session_timeout": ms + 10_000,
        "standard_conforming_strings": "on",
    }
    if check_client:
        settings[CHECK_INTERVAL] = 1000
    if read_only:
        settings["default_transaction_read_only"] = "on"
    return " ".join(f"-c {k}={v}" for k, v in settings.items())


def install_pg_pool_reset(engine: Any) -> None:
    """Reset every connection returned to the pool with `DISCARD ALL`: advisory locks,
    prepared statements, temp tables and SET values of one query never reach the next."""
    # deferred: loading sqlalchemy costs hundreds of ms
    from sqlalchemy import event

    def reset(dbapi_conn: Any, record: Any, state: Any) -> None:
        dbapi_conn.rollback()
        if getattr(state, "terminate_only", False):
            return
        dbapi_conn.autocommit = True
        try:
            dbapi_conn.execute("DISCARD ALL", prepare=False)
            _forget_prepared(dbapi_conn)
        finally:
            dbapi_conn.autocommit = False

    event.listen(engine, "reset", reset)


def _forget_prepared(dbapi_conn: Any) -> None:
    """`DISCARD ALL` dropped the session's prepared statements; psycopg forgets its own only
    when it meets `DISCARD ALL` as a query it has not counted yet while holding some, so
    after a few checkins it executed statements the server no longer had ("prepared
    statement _pg3_0 does not exist": a writable connector's fifth identical query failed).
    Its cache is cleared here instead (no public call does it), without the `DEALLOCATE
    ALL` it would queue: the server holds none any more."""
    prepared = getattr(dbapi_conn, "_prepared", None)
    if prepared is not None:
        prepared.clear()
        getattr(prepared, "_to_flush", []).clear()


def begin_read_only(conn: Any) -> None:
    """Start the query's transaction read-only. A snapshot is taken at once, so
    `SET TRANSACTION READ WRITE` ("must be set before any query") can no longer undo it."""
    conn.exec_driver_sql("SET TRANSACTION READ ONLY")
    conn.exec_driver_sql("SELECT 1")


def sqlite_read_authorizer(
    action: int, arg1: str | None, arg2: str | None, db: str | None, trigger: str | None
) -> int:
    """SQLite asks this for every operation a statement compiles to: only reads pass, so
    ATTACH (which `mode=ro` alone would allow) and every write are denied at compile time."""

    if action in _sqlite_read_actions():
        return sqlite3.SQLITE_OK
    if action == sqlite3.SQLITE_FUNCTION and arg2 and not is_side_effect_function(arg2):
        return sqlite3.SQLITE_OK
    if action == sqlite3.SQLITE_PRAGMA and arg1:
        name = arg1.lower()
        if name in ARGUMENT_PRAGMAS or (arg2 is None and name in READ_PRAGMAS):
            return sqlite3.SQLITE_OK
    return sqlite3.SQLITE_DENY


def sqlite_write_authorizer(
    action: int, arg1: str | None, arg2: str | None, db: str | None, trigger: str | None
) -> int:
    """A writable connector's statements may change its database, nothing else: ATTACH
    (any file fim's user can write, the project's own `.fim/state.db` with its approvals
    included), DETACH, a PRAGMA that sets something (`hard_heap_limit = 1` would fail every
    SQLite connection of the process; `temp_store`, `journal_mode`...) and functions with
    side effects are denied; reads of the schema (`table_info`...) pass."""

    if action in _sqlite_confined_actions():
        return sqlite3.SQLITE_DENY
    if action == sqlite3.SQLITE_FUNCTION and arg2 and is_side_effect_function(arg2):
        return sqlite3.SQLITE_DENY
    if action == sqlite3.SQLITE_PRAGMA:
        name = (arg1 or "").lower()
        if name in ARGUMENT_PRAGMAS or (arg2 is None and name in READ_PRAGMAS):
            return sqlite3.SQLITE_OK
        return sqlite3.SQLITE_DENY
    return sqlite3.SQLITE_OK


@functools.cache
def _sqlite_confined_actions() -> frozenset[int]:
    names = ("SQLITE_ATTACH", "SQLITE_DETACH")
    return frozenset(getattr(sqlite3, n) for n in names if hasattr(sqlite3, n))


@functools.cache
def _sqlite_read_actions() -> frozenset[int]:
    names = ("SQLITE_READ", "SQLITE_SELECT", "SQLITE_RECURSIVE", "SQLITE_TRANSACTION")
    return frozenset(getattr(sqlite3, n) for n in names if hasattr(sqlite3, n))


def open_sqlite_read_only(
    target: str,
    prepare: Callable[[sqlite3.Connection], None] | None = None,
    busy_timeout: float = 5.0,
) -> Any:
    """A SQLite connection that cannot write: `mode=ro`, `query_only`, the authorizer.

    `prepare` runs before the authorizer is installed: the connector's own limits are
    PRAGMAs with a value (`temp_store`, `hard_heap_limit`), which the authorizer refuses to
    anyone, so that the model's SQL cannot change them back. `busy_timeout`: how long a
    statement waits for a writer's lock on the file before failing."""

    sep = "&" if "?" in target else "?"
    conn = sqlite3.connect(
        f"{target}{sep}mode=ro", uri=True, check_same_thread=False, timeout=busy_timeout
    )
    try:
        conn.execute("PRAGMA query_only = ON")
        if prepare is not None:
            prepare(conn)
        conn.set_authorizer(sqlite_read_authorizer)
    except BaseException:
        conn.close()
        raise
    return conn
