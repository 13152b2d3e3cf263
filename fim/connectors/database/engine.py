"""A database connector's engine: its URL, the SQLAlchemy engine of its dialect, and the
checks made when it first connects.

Its own module because how fim connects (drivers, pool, session options, and the
read-only layers of `fim.connectors.readonly` installed on every connection) changes for
other reasons than how a statement runs or what the model is shown.
"""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path
from typing import Any
from urllib.parse import quote

from fim.config.schema import DatabaseConnector
from fim.connectors import readonly
from fim.connectors.database.postgres import (
    cap_pg_loaders,
    execute_prepared,
    execute_prepared_no_params,
)
from fim.connectors.database.rows import size_limit
from fim.connectors.database.sqlite import sqlite_limits
from fim.connectors.database.sqlite_statement import SqliteTarget
from fim.connectors.sql_guard import dialect_for

CONNECT_TIMEOUT = 5


class Engine:
    """A database connector's connection side: a lazily created engine, checked on its first
    connect and disposed when the declaration goes away."""

    def __init__(self, name: str, decl: DatabaseConnector, root: Path | None = None) -> None:
        self.name = name
        self.decl = decl
        self.root = Path(root or ".")
        self.url = normalize_url(decl.url, self.root)
        self.dialect = dialect_for(self.url)
        self._engine: Any = None
        self._lock = threading.Lock()
        self.tables_cache: list[str] | None = None
        self.catalog = readonly.PgCatalog()
        self.catalog_verdicts: dict[str, str | None] = {}
        """PostgreSQL, per statement text: the catalog layer's refusal, or None when every
        function, operator and type it names is safe (`Worker.catalog_refusal_sync`), for
        the hook view (`fim.connectors.meta.prepare_query`). Cleared with the catalog."""

    def engine(self) -> Any:
        """The SQLAlchemy engine, created on first use (thread-safe: callers are threads).

        A read-only PostgreSQL connector is checked on its first connect: if its role is a
        superuser or could write, the engine is thrown away and `ReadOnlyRoleError` raised
        (again on every use, until the role is fixed).
        """
        with self._lock:
            if self._engine is None:
                engine = self._create_engine()
                if self.dialect == "postgres":
                    engine = self._first_connect(engine)
                self._engine = engine
                self.catalog = readonly.PgCatalog()
                self.catalog_verdicts = {}
            return self._engine

    def _first_connect(self, engine: Any) -> Any:
        """Connect once (a read-only connector's role is checked then); a server older than
        PostgreSQL 14 refuses `client_connection_check_interval` at connect, so the engine is
        made again without it."""
        try:
            self._connect_once(engine)
            return engine
        except BaseException as exc:
            engine.dispose()
            if readonly.CHECK_INTERVAL not in str(exc):
                raise
        engine = self._create_engine(check_client=False)
        try:
            self._connect_once(engine)
        except BaseException:
            engine.dispose()
            raise
        return engine

    def _connect_once(self, engine: Any) -> None:
        if self.decl.read_only:
            self._check_role(engine)
            return
        with engine.connect() as conn:
            conn.rollback()

    def _check_role(self, engine: Any) -> None:
        with engine.connect() as conn:
            raw = conn.connection.driver_connection
            role, database, problems = readonly.role_problems(raw)
            conn.rollback()
        if problems:
            raise readonly.ReadOnlyRoleError(
                readonly.role_error(self.name, role, database, problems)
            )

    def verify(self) -> None:
        """Connect once (for `fim validate --live`): raises what a first query would."""
        # deferred: loading sqlalchemy costs hundreds of ms
        import sqlalchemy as sa

        with self.engine().connect() as conn:
            conn.execute(sa.text("SELECT 1"))
            conn.rollback()

    def _create_engine(self, check_client: bool = True) -> Any:
        # deferred: loading sqlalchemy costs hundreds of ms
        import sqlalchemy as sa
        from sqlalchemy import event

        if self.dialect == "sqlite":
            return self._sqlite_engine(sa)
        connect_args: dict[str, Any] = {}
        url: Any = self.url
        if self.dialect == "postgres":
            url = sa.engine.make_url(self.url)
            own = readonly.pg_options(
                self.decl.statement_timeout, self.decl.read_only, check_client
            )
            # the URL's own options (e.g. a search_path) come first; ours win
            options = " ".join(filter(None, [url.query.get("options"), own]))
            url = url.difference_update_query(["options"])
            connect_args = {"options": options, "connect_timeout": CONNECT_TIMEOUT}
        engine = sa.create_engine(url, connect_args=connect_args, pool_pre_ping=True)
        if self.dialect == "postgres":
            readonly.install_pg_pool_reset(engine)
            cap = self.decl.max_value_bytes
            event.listen(engine, "connect", lambda conn, _rec: cap_pg_loaders(conn, cap))
            if self.decl.read_only:
                # psycopg uses the simple protocol (which runs `;`-batches, e.g.
                # `COMMIT; ...`) when a query has no parameters; preparing forces the
                # extended protocol.
                event.listen(engine, "do_execute", execute_prepared)
                event.listen(engine, "do_execute_no_params", execute_prepared_no_params)
        return engine

    def _sqlite_engine(self, sa: Any) -> Any:
        # deferred: loading sqlalchemy costs hundreds of ms
        from sqlalchemy import event
        from sqlalchemy.pool import NullPool

        database = sa.engine.make_url(self.url).database or ""
        limit = size_limit(self.decl)
        if not self.decl.read_only:
            engine = sa.create_engine(self.url, poolclass=NullPool)

            def confine(conn: sqlite3.Connection, _record: Any) -> None:
                sqlite_limits(conn, limit, read_only=False)
                conn.set_authorizer(readonly.sqlite_write_authorizer)  # after its PRAGMAs

            event.listen(engine, "connect", confine)
            return engine
        if database in ("", ":memory:"):
            raise ValueError("a read-only SQLite connector needs a database file")
        target = database if database.startswith("file:") else f"file:{quote(database)}"

        def connect() -> sqlite3.Connection:
            conn: sqlite3.Connection = readonly.open_sqlite_read_only(
                target, lambda raw: sqlite_limits(raw, limit)
            )
            return conn

        return sa.create_engine("sqlite://", creator=connect, poolclass=NullPool)

    def sqlite_target(self) -> SqliteTarget:
        """The database a SQLite statement opens (a worker process opens it itself)."""
        # deferred: loading sqlalchemy costs hundreds of ms
        import sqlalchemy as sa

        database = sa.engine.make_url(self.url).database or ""
        if self.decl.read_only and database in ("", ":memory:"):
            raise ValueError("a read-only SQLite connector needs a database file")
        return SqliteTarget(database or ":memory:", self.decl.read_only)

    def dispose(self) -> None:
        with self._lock:
            if self._engine is not None:
                self._engine.dispose()
                self._engine = None


def normalize_url(url: str, root: Path) -> str:
    """Map `postgresql://` to psycopg v3 and resolve relative SQLite paths against `root`.
    A scheme is case-insensitive (RFC 3986 3.1), as for the state store (`fim.store_url`)."""
    scheme, sep, rest = url.partition("://")
    scheme = scheme.lower()
    if scheme in ("postgresql", "postgres"):
        return f"postgresql+psycopg://{rest}"
    if scheme.startswith("sqlite") and sep:
        path = rest[1:] if rest.startswith("/") else rest
        if path and not path.startswith(("file:", ":memory:")) and not Path(path).is_absolute():
            return f"{scheme}:///{(root / path).resolve()}"
    return url
