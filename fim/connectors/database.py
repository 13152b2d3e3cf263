"""Database connectors: list tables, describe one, run a query — through SQLAlchemy.

SQLAlchemy is synchronous, so every call runs in `asyncio.to_thread`. `read_only: true`
is enforced twice: `sql_guard` refuses anything but one read statement, and the connection
itself cannot write (SQLite opened with `mode=ro` and `query_only`; PostgreSQL sessions
default to read-only transactions, each query runs in an explicitly read-only transaction
that is always rolled back, and the extended protocol refuses `;`-batches). A statement
that slips past the parser therefore still cannot change data.
"""

from __future__ import annotations

import asyncio
import hashlib
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

from fim.config.schema import DatabaseConnector
from fim.connectors.render import pipe_table
from fim.connectors.sql_guard import (
    ARGUMENT_PRAGMAS,
    READ_PRAGMAS,
    SqlRejected,
    check_read_only,
    dialect_for,
    is_side_effect_function,
)
from fim.types import ToolResult

_MAX_OUTPUT_CHARS = 20_000
_STUB_TABLES = 12
_CONNECT_TIMEOUT = 5


@dataclass
class QueryResult:
    columns: list[str]
    rows: list[tuple[Any, ...]]
    cut: bool
    rowcount: int = -1


class Database:
    """One database connector's live side: a lazily created engine and the three actions."""

    def __init__(self, name: str, decl: DatabaseConnector, root: Path | None = None) -> None:
        self.name = name
        self.decl = decl
        self.root = Path(root or ".")
        self.url = normalize_url(decl.url, self.root)
        self.dialect = dialect_for(self.url)
        self._engine: Any = None
        self._lock = threading.Lock()
        self.tables_cache: list[str] | None = None

    # ------------------------------------------------------------------ engine

    def engine(self) -> Any:
        """The SQLAlchemy engine, created on first use (thread-safe: callers are threads)."""
        with self._lock:
            if self._engine is None:
                self._engine = self._create_engine()
            return self._engine

    def _create_engine(self) -> Any:
        import sqlalchemy as sa
        from sqlalchemy import event

        timeout_ms = int(self.decl.statement_timeout * 1000)
        if self.dialect == "sqlite":
            return self._sqlite_engine(sa)
        connect_args: dict[str, Any] = {}
        if self.dialect == "postgres":
            options = f"-c statement_timeout={timeout_ms}"
            if self.decl.read_only:
                options += " -c default_transaction_read_only=on"
            connect_args = {"options": options, "connect_timeout": _CONNECT_TIMEOUT}
        engine = sa.create_engine(self.url, connect_args=connect_args, pool_pre_ping=True)
        if self.dialect == "postgres" and self.decl.read_only:
            # psycopg uses the simple protocol (which runs `;`-batches, e.g. `COMMIT; ...`)
            # when a query has no parameters; preparing forces the extended protocol.
            event.listen(engine, "do_execute", _execute_prepared)
            event.listen(engine, "do_execute_no_params", _execute_prepared_no_params)
        return engine

    def _sqlite_engine(self, sa: Any) -> Any:
        import sqlite3

        from sqlalchemy.pool import NullPool

        database = sa.engine.make_url(self.url).database or ""
        if not self.decl.read_only:
            return sa.create_engine(self.url, poolclass=NullPool)
        if database in ("", ":memory:"):
            raise ValueError("a read-only SQLite connector needs a database file")
        target = database if database.startswith("file:") else f"file:{quote(database)}"
        sep = "&" if "?" in target else "?"

        def connect() -> sqlite3.Connection:
            conn = sqlite3.connect(f"{target}{sep}mode=ro", uri=True, check_same_thread=False)
            conn.execute("PRAGMA query_only = ON")
            conn.set_authorizer(_sqlite_read_authorizer)
            return conn

        return sa.create_engine("sqlite://", creator=connect, poolclass=NullPool)

    def dispose(self) -> None:
        with self._lock:
            if self._engine is not None:
                self._engine.dispose()
                self._engine = None

    # ------------------------------------------------------------------ sync workers

    def tables_sync(self) -> list[str]:
        import sqlalchemy as sa

        inspector = sa.inspect(self.engine())
        names: list[str] = []
        for schema in self.decl.schemas or [None]:
            prefix = f"{schema}." if schema else ""
            found = inspector.get_table_names(schema=schema)
            found += inspector.get_view_names(schema=schema)
            names.extend(prefix + n for n in sorted(found))
        self.tables_cache = names
        return names

    def describe_sync(self, table: str) -> str:
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

    def execute_sync(self, sql: str, params: dict[str, Any] | None = None) -> QueryResult:
        """Run one statement; on a read-only database its transaction is always rolled back.

        This is the executor *below* the parser guard: it relies only on the connection
        being read-only, which is what the guard-bypass tests exercise.
        """
        import sqlalchemy as sa

        limit = self.decl.max_rows
        with self.engine().connect() as conn:
            raw = conn.connection.driver_connection
            if self.dialect == "sqlite":
                deadline = time.monotonic() + self.decl.statement_timeout
                raw.set_progress_handler(lambda: int(time.monotonic() > deadline), 1000)
            try:
                if self.dialect == "postgres" and self.decl.read_only:
                    # Read-only now, and a snapshot taken, so `SET TRANSACTION READ WRITE`
                    # ("must be set before any query") can no longer undo it.
                    conn.exec_driver_sql("SET TRANSACTION READ ONLY")
                    conn.exec_driver_sql("SELECT 1")
                result = conn.execute(sa.text(sql), params or {})
                if result.returns_rows:
                    rows = [tuple(r) for r in result.fetchmany(limit + 1)]
                    outcome = QueryResult(list(result.keys()), rows[:limit], len(rows) > limit)
                else:
                    outcome = QueryResult([], [], False, result.rowcount)
                if not self.decl.read_only:
                    conn.commit()
                return outcome
            finally:
                if self.dialect == "sqlite":
                    raw.set_progress_handler(None, 0)
                conn.rollback()

    # ------------------------------------------------------------------ async API

    async def list_tables(self) -> ToolResult:
        try:
            tables = await asyncio.to_thread(self.tables_sync)
        except Exception as exc:
            return self._failure("could not list tables", exc)
        if not tables:
            return ToolResult(content=f"database '{self.name}' has no tables")
        return ToolResult(content=f"{len(tables)} tables: " + ", ".join(tables))

    async def describe(self, table: str) -> ToolResult:
        try:
            text = await asyncio.to_thread(self.describe_sync, table)
        except LookupError as exc:
            return ToolResult(content=f"Error: {exc.args[0]}", is_error=True)
        except Exception as exc:
            return self._failure(f"could not describe '{table}'", exc)
        return ToolResult(content=text)

    async def query(self, sql: str, params: dict[str, Any] | None = None) -> ToolResult:
        if self.decl.read_only:
            try:
                check_read_only(sql, self.dialect)
            except SqlRejected as exc:
                return ToolResult(
                    content=f"Error: query refused: {exc}. Rewrite it as a single SELECT.",
                    is_error=True,
                    metadata={"refused": True},
                )
        try:
            result = await asyncio.to_thread(self.execute_sync, sql, params)
        except Exception as exc:
            return self._failure("the query failed", exc)
        if not result.columns:
            return ToolResult(content=f"statement executed ({result.rowcount} rows affected)")
        return ToolResult(
            content=pipe_table(
                result.columns, result.rows, cut=result.cut, limit=_MAX_OUTPUT_CHARS
            ),
            metadata={"rows": len(result.rows), "cut": result.cut},
        )

    def _failure(self, what: str, exc: Exception) -> ToolResult:
        return ToolResult(content=f"Error: {what}: {describe_error(exc, self)}", is_error=True)


def describe_error(exc: Exception, db: Database) -> str:
    """One line the model can act on, without the URL (which may hold a password)."""
    orig = getattr(exc, "orig", None) or exc
    text = (str(orig).strip().splitlines() or [type(orig).__name__])[0]
    lowered = text.lower()
    if "interrupted" in lowered or "statement timeout" in lowered:
        return (
            f"the query exceeded the statement timeout of {db.decl.statement_timeout:g}s; "
            "make it cheaper (filter, aggregate, LIMIT)"
        )
    if "readonly" in lowered or "read-only" in lowered or "query_only" in lowered:
        return f"{text} (this database is read-only; only SELECT queries are possible)"
    return text.replace(db.decl.url, "<url>").replace(db.url, "<url>")


def normalize_url(url: str, root: Path) -> str:
    """Map `postgresql://` to psycopg v3 and resolve relative SQLite paths against `root`."""
    scheme, sep, rest = url.partition("://")
    if scheme in ("postgresql", "postgres"):
        return f"postgresql+psycopg://{rest}"
    if scheme.startswith("sqlite") and sep:
        path = rest[1:] if rest.startswith("/") else rest
        if path and not path.startswith(("file:", ":memory:")) and not Path(path).is_absolute():
            return f"{scheme}:///{(root / path).resolve()}"
    return url


def get_database(services: Any, name: str, decl: DatabaseConnector, root: Path) -> Database:
    """The Database of a declaration, shared across runs until the declaration changes."""
    digest = hashlib.sha256(decl.model_dump_json().encode()).hexdigest()[:12]
    return services.get(
        f"connector:database:{name}:{digest}:{root}",
        lambda: Database(name, decl, root),
        lambda db: db.dispose(),
    )


def _sqlite_read_authorizer(
    action: int, arg1: str | None, arg2: str | None, db: str | None, trigger: str | None
) -> int:
    """SQLite asks this for every operation a statement compiles to: only reads pass, so
    ATTACH (which `mode=ro` alone would allow) and every write are denied at compile time."""
    import sqlite3

    if action in _SQLITE_READ_ACTIONS:
        return sqlite3.SQLITE_OK
    if action == sqlite3.SQLITE_FUNCTION and arg2 and not is_side_effect_function(arg2):
        return sqlite3.SQLITE_OK
    if action == sqlite3.SQLITE_PRAGMA and arg1:
        name = arg1.lower()
        if name in ARGUMENT_PRAGMAS or (arg2 is None and name in READ_PRAGMAS):
            return sqlite3.SQLITE_OK
    return sqlite3.SQLITE_DENY


def _sqlite_actions(*names: str) -> frozenset[int]:
    import sqlite3

    return frozenset(getattr(sqlite3, n) for n in names if hasattr(sqlite3, n))


_SQLITE_READ_ACTIONS = _sqlite_actions(
    "SQLITE_READ", "SQLITE_SELECT", "SQLITE_RECURSIVE", "SQLITE_TRANSACTION"
)


def _execute_prepared(cursor: Any, statement: str, parameters: Any, context: Any) -> bool:
    cursor.execute(statement, parameters, prepare=True)
    return True


def _execute_prepared_no_params(cursor: Any, statement: str, context: Any) -> bool:
    cursor.execute(statement, prepare=True)
    return True


def stub_tables(tables: list[str] | None) -> str:
    """`12 tables: a, b, ...` for the system prompt, or why they are unknown."""
    if tables is None:
        return "tables unknown (connection failed)"
    head = ", ".join(tables[:_STUB_TABLES])
    more = ", ..." if len(tables) > _STUB_TABLES else ""
    return f"{len(tables)} tables: {head}{more}"


__all__ = ["Database", "QueryResult", "get_database", "normalize_url", "stub_tables"]
