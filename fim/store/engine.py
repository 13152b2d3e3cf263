"""The state store's database: engine, URL, migrations, and the three ways work reaches it.

SQLAlchemy Core is synchronous, so no method blocks the event loop on the database:

- `_tx(work)`: a write (or a read that writes, like expiring approvals), queued on the
  store's one writer thread, which commits everything queued in one transaction
  (`fim.store.writer`), on both SQLite and PostgreSQL;
- `_write_behind(work, what, key)`: a write whose caller does not wait for the commit on
  SQLite (one process: every later `_tx` or `_read` of the process runs after it); on
  PostgreSQL, which other processes read, it is awaited like `_tx`;
- `_read(work)`: SQLite reads queue on the writer too (they must see what this process
  queued); PostgreSQL reads take a pooled connection on a worker thread, never waiting
  behind the writes.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from fim import private
from fim.errors import RunError
from fim.masking.keys import masked_url
from fim.retries import Backoff, retry_sync
from fim.store.prepared import Prepared
from fim.store.schema import MIGRATIONS, json_text, normalize_url, sqlite_file, table
from fim.store.writer import GroupWriter
from fim.store_url import HINT, store_kind, unsupported

if TYPE_CHECKING:
    from sqlalchemy import Connection, Engine

T = TypeVar("T")

SQLITE_SYNCHRONOUS = "NORMAL"
"""SQLite's `synchronous` level (WAL mode). FULL fsyncs the WAL at every commit; NORMAL only
at checkpoints. A served run commits on its request path, and FULL cost it ~0.4 ms of CPU
and ~2 ms of latency (3 commits: 1.4-1.5 ms CPU and 3.3-4.0 ms wall per run against
1.1 ms and 1.3-2.0 ms, bench of the store alone). WAL + NORMAL stays consistent and loses
nothing when the process crashes or is killed; only a power loss or an OS crash may lose
the last commits before it (the database is never corrupted). PostgreSQL is the store for
state that must survive that."""

WAIT_FOR_LOCKS_MS = 10_000
"""How long a statement waits for a lock another session holds before it fails: SQLite's
`busy_timeout`, PostgreSQL's `lock_timeout`. Without the latter, a table another session
kept locked (an idle transaction, a long migration) held every write, and a server's
shutdown with them, for as long as it lasted (attack-35 #2)."""

CONNECT_WITHIN_S = 10
"""How long opening a PostgreSQL connection may take, unless the URL's `connect_timeout` or
`PGCONNECT_TIMEOUT` says otherwise: libpq's default is to wait without end, so a store
whose host drops packets held `fim serve`'s start check, and every request, for good."""


def _enable_wal(cursor: Any) -> None:
    """Switch the file to WAL (persistent once set). The switch needs a moment alone with
    the file and SQLite answers "locked" at once instead of waiting on the busy timeout, so
    two processes opening a new state file together retry here."""

    retry_sync(
        lambda: cursor.execute("PRAGMA journal_mode=WAL"),
        Backoff(100, 0.05, factor=1.0),
        retry_on=lambda exc: isinstance(exc, sqlite3.OperationalError) and "locked" in str(exc),
    )


class Database:
    """One database of fim state: its engine, writer thread and schema. `Store` adds what
    it holds (runs, approvals, audit; sessions, usage and run events have modules of their
    own)."""

    def __init__(self, url: str, root: Path | str | None = None) -> None:
        self.url = normalize_url(url, root)
        kind = store_kind(self.url)  # one reading of the scheme: fim.store_url
        if kind is None:  # `--state mysql://...` (fim.yaml's `state:` is checked by validate)
            why = unsupported(self.url)
            raise RunError(f"state store {masked_url(self.url)} {why}", hint=HINT)
        self.is_sqlite = kind == "sqlite"
        self._engine: Engine | None = None
        self._lock = threading.Lock()
        self._writer: GroupWriter | None = None
        self._statements: dict[str, Prepared] = {}

    @property
    def display_url(self) -> str:
        """The URL with any password hidden, for messages: the userinfo one and those of the
        query (`?password=`, `?sslpassword=`, which libpq reads too: attack-44 F3)."""
        return masked_url(self.url)

    # ------------------------------------------------------------------ engine

    def open(self) -> None:
        """Set up the engine (and the schema) now, blocking: it is otherwise set up by the
        first read or write. A caller that will write soon runs this in a thread to overlap
        the set-up (~0.1 s) with other work (`fim run` with the model's answer)."""
        self._connect()

    def _connect(self) -> Engine:
        if self._engine is not None:
            return self._engine
        with self._lock:
            if self._engine is None:
                self._engine = self._create_engine()
            return self._engine

    def _create_engine(self) -> Engine:
        # deferred: loading sqlalchemy costs hundreds of ms
        from sqlalchemy import create_engine, event

        kwargs: dict[str, Any] = {"json_serializer": json_text}
        if self.is_sqlite:
            file = sqlite_file(self.url)
            if file is not None:
                private.parents(file)
            else:
                # deferred: loading sqlalchemy costs hundreds of ms
                from sqlalchemy.pool import StaticPool

                kwargs["poolclass"] = StaticPool
            kwargs["connect_args"] = {
                "check_same_thread": False,
                "timeout": WAIT_FOR_LOCKS_MS / 1000,
            }
        else:
            # the pool serves reads; the writer keeps one connection and, when it drops,
            # runs its units again on a new one (fim.store.writer)
            kwargs["pool_pre_ping"] = True
            if "connect_timeout" not in self.url and not os.environ.get("PGCONNECT_TIMEOUT"):
                kwargs["connect_args"] = {"connect_timeout": CONNECT_WITHIN_S}
        engine = create_engine(self.url, **kwargs)
        if self.is_sqlite:

            @event.listens_for(engine, "connect")
            def _on_connect(dbapi_conn: Any, _record: Any) -> None:
                # Let us issue BEGIN ourselves: pysqlite's implicit transactions would
                # otherwise start deferred and fail to upgrade under concurrent writers.
                dbapi_conn.isolation_level = None
                cursor = dbapi_conn.cursor()
                cursor.execute(f"PRAGMA busy_timeout={WAIT_FOR_LOCKS_MS}")
                cursor.execute(f"PRAGMA synchronous={SQLITE_SYNCHRONOUS}")
                _enable_wal(cursor)
                cursor.close()

            @event.listens_for(engine, "begin")
            def _on_begin(conn: Any) -> None:
                conn.exec_driver_sql("BEGIN IMMEDIATE")

        else:

            @event.listens_for(engine, "connect")
            def _on_pg_connect(dbapi_conn: Any, _record: Any) -> None:
                # committed: a SET in a transaction the pool rolls back would not last
                dbapi_conn.execute(f"SET lock_timeout = {WAIT_FOR_LOCKS_MS}")
                dbapi_conn.commit()

        _migrate(engine)
        return engine

    def _group_writer(self) -> GroupWriter:
        if self._writer is None:
            with self._lock:
                if self._writer is None:
                    self._writer = GroupWriter(lambda: self._connect().connect())
        return self._writer

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()  # writes what is queued first
        with self._lock:
            if self._engine is not None:
                self._engine.dispose()
                self._engine = None

    # ------------------------------------------------------------------ work

    async def _tx(
        self, work: Callable[[Connection], T], key: str | None = None, what: str = ""
    ) -> T:
        """Run `work(conn)` on the writer thread, in one transaction with whatever else
        was queued. `key` (a run id): raise `WriteBehindError` if a write behind for it
        failed; with `what`, this is one, whose failure the next such `_tx` raises."""
        return await self._group_writer().run(work, key, what)

    async def _write_behind(
        self, work: Callable[[Connection], Any], what: str, key: str | None = None
    ) -> None:
        """Write without waiting for the commit where that is safe: SQLite (one process)
        queues `work` and returns at once; the next awaited write commits it too.
        PostgreSQL, shared with other processes, waits for the commit. A failure is logged
        as "could not store `what`" and raised by the next `_tx` with `key` (the run's
        record), on PostgreSQL to this caller as well."""
        if self.is_sqlite:
            self._group_writer().defer(work, what, key)
        else:
            await self._tx(work, key, what)

    async def _read(self, work: Callable[[Connection], T]) -> T:
        """Run a read-only `work(conn)` (see the module docstring for where)."""
        if self.is_sqlite:
            return await self._group_writer().run(work)

        def go() -> T:
            with self._connect().begin() as conn:
                return work(conn)

        return await asyncio.to_thread(go)

    def _statement(self, key: str, build: Callable[[], Any], keys: list[str]) -> Prepared:
        """A statement compiled once per store (values bound at execute time)."""
        found = self._statements.get(key)
        if found is None:
            found = self._statements[key] = Prepared(build, keys)
        return found

    async def schema_version(self) -> int:
        # deferred: loading sqlalchemy costs hundreds of ms
        from sqlalchemy import func, select

        version = table("schema_version").c.version
        return await self._read(lambda c: int(c.execute(select(func.max(version))).scalar() or 0))


def _migrate(engine: Engine) -> None:
    # deferred: loading sqlalchemy costs hundreds of ms
    from sqlalchemy import func, select, text

    version_table = table("schema_version")
    with engine.begin() as conn:
        if conn.dialect.name == "postgresql":
            # Two processes opening a fresh database must not both create the tables.
            conn.execute(text("SELECT pg_advisory_xact_lock(74211)"))
        version_table.create(conn, checkfirst=True)
        current = conn.execute(select(func.max(version_table.c.version))).scalar() or 0
        for number, migration in enumerate(MIGRATIONS, start=1):
            if number > current:
                migration(conn)
                conn.execute(version_table.insert().values(version=number))


_URLS: dict[tuple[str, str], str] = {}
"""Normalized state URLs by (URL, project root): every run records its usage, and
resolving the SQLite path against the file system each time cost ~0.2 ms a run."""


def store_url(url: str, root: Path | str | None) -> str:
    """`normalize_url`, remembered per project root."""
    if root is None:  # relative to the current directory, which may change
        return normalize_url(url, root)
    key = (url, str(root))
    found = _URLS.get(key)
    if found is None:
        if len(_URLS) > 256:
            _URLS.clear()
        found = _URLS[key] = normalize_url(url, root)
    return found
