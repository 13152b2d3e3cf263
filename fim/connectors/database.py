"""Database connectors: list tables, describe one, run a query — through SQLAlchemy.

SQLAlchemy is synchronous, so every call runs in a worker thread of a pool of its own
(`fim-db`): other tools that fill the default thread pool never starve database access,
and the event loop never waits on a query. What `read_only: true` means is decided in
`fim.connectors.readonly` (statement, catalog, role and connection layers).

Limits hold whatever one row costs: PostgreSQL sessions carry `statement_timeout`,
`lock_timeout` and `idle_in_transaction_session_timeout`; SQLite has a progress handler, a
timer that interrupts the statement at the deadline and `SQLITE_LIMIT_LENGTH`, so no single
value (`printf('%.*c', 900000000, 'x')`) can grow past a bound inside one opcode. Rows are
streamed (PostgreSQL single-row mode) and every value and the whole result are capped
while fetching (`max_value_bytes`, `max_result_bytes`); PostgreSQL values over the cap are
cut before Python copies them.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import re
import sqlite3
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import quote

from fim.config.schema import DatabaseConnector
from fim.connectors import readonly
from fim.connectors.render import pipe_table
from fim.connectors.sql_guard import Parsed, SqlRejected, dialect_for
from fim.types import ToolResult

_MAX_OUTPUT_CHARS = 20_000
_STUB_TABLES = 12
_CONNECT_TIMEOUT = 5
_DB_THREADS = 16
"""Worker threads for all database connectors of the process (timeouts free them)."""
_FETCH_CHUNK = 50

T = TypeVar("T")


class Truncated(str):
    """A value cut at the per-value byte cap; the text says so, `size` is the original."""

    size: int

    @classmethod
    def of(cls, head: str, size: int, cap: int) -> Truncated:
        value = cls(f"{head}... [value truncated at {cap} bytes of {size}]")
        value.size = size
        return value


@dataclass
class QueryResult:
    columns: list[str]
    rows: list[tuple[Any, ...]]
    cut: bool
    rowcount: int = -1
    truncated_at: int | None = None
    """The result byte cap, when reading stopped there."""
    values_cut: int = 0
    """How many values were cut at the per-value cap."""


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
        self.catalog = readonly.PgCatalog()

    # ------------------------------------------------------------------ engine

    def engine(self) -> Any:
        """The SQLAlchemy engine, created on first use (thread-safe: callers are threads).

        A read-only PostgreSQL connector is checked on its first connect: if its role is a
        superuser or could write, the engine is thrown away and `ReadOnlyRoleError` raised
        (again on every use, until the role is fixed).
        """
        with self._lock:
            if self._engine is None:
                engine = self._create_engine()
                if self.dialect == "postgres" and self.decl.read_only:
                    try:
                        self._check_role(engine)
                    except BaseException:
                        engine.dispose()
                        raise
                self._engine = engine
                self.catalog = readonly.PgCatalog()
            return self._engine

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

    def _create_engine(self) -> Any:
        # deferred: loading sqlalchemy costs hundreds of ms
        import sqlalchemy as sa
        from sqlalchemy import event

        if self.dialect == "sqlite":
            return self._sqlite_engine(sa)
        connect_args: dict[str, Any] = {}
        url: Any = self.url
        if self.dialect == "postgres":
            url = sa.engine.make_url(self.url)
            own = readonly.pg_options(self.decl.statement_timeout, self.decl.read_only)
            # the URL's own options (e.g. a search_path) come first; ours win
            options = " ".join(filter(None, [url.query.get("options"), own]))
            url = url.difference_update_query(["options"])
            connect_args = {"options": options, "connect_timeout": _CONNECT_TIMEOUT}
        engine = sa.create_engine(url, connect_args=connect_args, pool_pre_ping=True)
        if self.dialect == "postgres":
            readonly.install_pg_pool_reset(engine)
            cap = self.decl.max_value_bytes
            event.listen(engine, "connect", lambda conn, _rec: _cap_pg_loaders(conn, cap))
            if self.decl.read_only:
                # psycopg uses the simple protocol (which runs `;`-batches, e.g.
                # `COMMIT; ...`) when a query has no parameters; preparing forces the
                # extended protocol.
                event.listen(engine, "do_execute", _execute_prepared)
                event.listen(engine, "do_execute_no_params", _execute_prepared_no_params)
        return engine

    def _sqlite_engine(self, sa: Any) -> Any:
        # deferred: loading sqlalchemy costs hundreds of ms
        from sqlalchemy import event
        from sqlalchemy.pool import NullPool

        database = sa.engine.make_url(self.url).database or ""
        limit = 4 * self.decl.max_result_bytes
        if not self.decl.read_only:
            engine = sa.create_engine(self.url, poolclass=NullPool)
            event.listen(engine, "connect", lambda conn, _rec: _sqlite_limits(conn, limit))
            return engine
        if database in ("", ":memory:"):
            raise ValueError("a read-only SQLite connector needs a database file")
        target = database if database.startswith("file:") else f"file:{quote(database)}"

        def connect() -> sqlite3.Connection:
            conn = readonly.open_sqlite_read_only(target)
            _sqlite_limits(conn, limit)
            return conn

        return sa.create_engine("sqlite://", creator=connect, poolclass=NullPool)

    def dispose(self) -> None:
        with self._lock:
            if self._engine is not None:
                self._engine.dispose()
                self._engine = None

    # ------------------------------------------------------------------ sync workers

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

    def execute_sync(
        self, sql: str, params: dict[str, Any] | None = None, parsed: Parsed | None = None
    ) -> QueryResult:
        """Run one statement; on a read-only database its transaction is always rolled back.

        Without `parsed` this is the executor *below* the statement check: it relies only
        on the connection being read-only, which is what the guard-bypass tests exercise.
        With it (PostgreSQL), the catalog check runs first, on the same connection, and
        the exact text that was parsed is streamed row by row.
        """
        # deferred: loading sqlalchemy costs hundreds of ms
        import sqlalchemy as sa

        deadline = time.monotonic() + self.decl.statement_timeout
        rows = _Rows(self.decl, deadline)
        with self.engine().connect() as conn:
            raw = conn.connection.driver_connection
            timer = self._sqlite_deadline(raw, deadline) if self.dialect == "sqlite" else None
            try:
                if self.dialect == "postgres" and self.decl.read_only:
                    readonly.begin_read_only(conn)
                if parsed is not None and self.dialect == "postgres":
                    self.catalog.check(raw, parsed)
                    return self._stream_pg(raw, parsed, params or {}, rows)
                result = conn.execute(sa.text(sql), params or {})
                if result.returns_rows:
                    columns = list(result.keys())
                    while rows.want_more():
                        chunk = result.fetchmany(_FETCH_CHUNK)
                        if not chunk or not all(rows.add(tuple(r)) for r in chunk):
                            break
                    result.close()
                    outcome = rows.result(columns)
                else:
                    outcome = QueryResult([], [], False, result.rowcount)
                if not self.decl.read_only:
                    conn.commit()
                return outcome
            finally:
                if timer is not None:
                    timer.cancel()
                    raw.set_progress_handler(None, 0)
                conn.rollback()

    def _stream_pg(
        self, raw: Any, parsed: Parsed, params: dict[str, Any], rows: _Rows
    ) -> QueryResult:
        # deferred: loading psycopg costs hundreds of ms
        import psycopg

        missing = [n for n in parsed.params if n not in params]
        if missing:
            raise SqlRejected(f"no value given for the placeholder :{missing[0]} (params)")
        cursor = psycopg.RawCursor(raw)
        values = [params[n] for n in parsed.params]
        columns: list[str] = []
        try:
            for row in cursor.stream(parsed.sql, values or None):
                if not columns:
                    columns = [c.name for c in cursor.description or ()]
                if not rows.add(tuple(row)):
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
        text = f"SELECT * FROM (\n{parsed.sql.rstrip().rstrip(';')}\n) AS fim_q LIMIT 0"
        wrapped = readonly.decide(text, "postgres").require()
        cursor.execute(wrapped.sql, values or None)
        return [c.name for c in cursor.description or ()] or ["result"]

    def _sqlite_deadline(self, raw: Any, deadline: float) -> threading.Timer:
        """Stop a SQLite statement at the deadline: a progress handler between opcodes,
        and a timer thread that interrupts it (for long single steps such as sorts)."""
        raw.set_progress_handler(lambda: int(time.monotonic() > deadline), 1000)

        def interrupt() -> None:
            with contextlib.suppress(Exception):  # closed already: the query finished
                raw.interrupt()

        timer = threading.Timer(max(0.0, deadline - time.monotonic()), interrupt)
        timer.daemon = True
        timer.start()
        return timer

    # ------------------------------------------------------------------ async API

    async def in_thread(self, fn: Callable[..., T], *args: Any) -> T:
        """Run `fn` on the database worker pool (never the event loop, never the shared
        default pool that other tools may fill)."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(_executor(), functools.partial(fn, *args))

    async def list_tables(self) -> ToolResult:
        try:
            tables = await self.in_thread(self.tables_sync)
        except Exception as exc:
            return self._failure("could not list tables", exc)
        if not tables:
            return ToolResult(content=f"database '{self.name}' has no tables")
        return ToolResult(content=f"{len(tables)} tables: " + ", ".join(tables))

    async def describe(self, table: str) -> ToolResult:
        try:
            text = await self.in_thread(self.describe_sync, table)
        except LookupError as exc:
            return ToolResult(content=f"Error: {exc.args[0]}", is_error=True)
        except Exception as exc:
            return self._failure(f"could not describe '{table}'", exc)
        return ToolResult(content=text)

    async def run(self, sql: str, params: dict[str, Any] | None = None) -> QueryResult:
        """Run one statement under the connector's read-only decision; raises
        `SqlRejected` for a refused statement (workflow nodes and `query` share this)."""
        if not self.decl.read_only:
            return await self.in_thread(self.execute_sync, sql, params, None)
        # Parsing model-written SQL is untrusted work too: off the event loop, like the query.
        parsed = await self.in_thread(lambda: readonly.decide(sql, self.dialect).require())
        return await self.in_thread(self.execute_sync, sql, params, parsed)

    async def query(self, sql: str, params: dict[str, Any] | None = None) -> ToolResult:
        try:
            result = await self.run(sql, params)
        except SqlRejected as exc:
            return ToolResult(
                content=f"Error: query refused: {exc}. Rewrite it as a single SELECT.",
                is_error=True,
                metadata={"refused": True},
            )
        except Exception as exc:
            return self._failure("the query failed", exc)
        if not result.columns:
            return ToolResult(content=f"statement executed ({result.rowcount} rows affected)")
        text = pipe_table(result.columns, result.rows, cut=result.cut, limit=_MAX_OUTPUT_CHARS)
        notes = []
        if result.truncated_at is not None:
            notes.append(
                f"result truncated at {result.truncated_at} bytes: select fewer or shorter "
                "columns, or fewer rows"
            )
        if result.values_cut:
            notes.append(
                f"{result.values_cut} value(s) cut at {self.decl.max_value_bytes} bytes each"
            )
        if notes:
            text += "\n(" + "; ".join(notes) + ")"
        return ToolResult(
            content=text,
            metadata={
                "rows": len(result.rows),
                "cut": result.cut,
                **({"truncated_at": result.truncated_at} if result.truncated_at else {}),
            },
        )

    def _failure(self, what: str, exc: Exception) -> ToolResult:
        return ToolResult(content=f"Error: {what}: {describe_error(exc, self)}", is_error=True)


def describe_error(exc: Exception, db: Database) -> str:
    """One line the model can act on, without the URL (which may hold a password)."""
    orig = getattr(exc, "orig", None) or exc
    text = (str(orig).strip().splitlines() or [type(orig).__name__])[0]
    lowered = text.lower()
    if isinstance(orig, readonly.ReadOnlyRoleError | SqlRejected):
        return text
    if isinstance(orig, _Timeout) or "interrupted" in lowered or "statement timeout" in lowered:
        return (
            f"the query exceeded the statement timeout of {db.decl.statement_timeout:g}s; "
            "make it cheaper (filter, aggregate, LIMIT)"
        )
    if "lock timeout" in lowered:
        return "the query waited too long for a lock held by another session; try again later"
    if "string or blob too big" in lowered or "user-defined function raised" in lowered:
        return (
            f"a value grew past the size limit of {4 * db.decl.max_result_bytes} bytes; "
            "select less (substr, LIMIT)"
        )
    if "readonly" in lowered or "read-only" in lowered or "query_only" in lowered:
        return f"{text} (this database is read-only; only SELECT queries are possible)"
    text = text.replace(db.decl.url, "<url>").replace(db.url, "<url>")
    # a driver may quote the offending value: never hand a huge one to the model
    return text if len(text) <= 500 else text[:500] + "... [message cut]"


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


class _Timeout(TimeoutError):
    """The client-side deadline passed while rows were still being read."""


class _Rows:
    """Collects rows while they are fetched, enforcing `max_rows`, the per-value and the
    whole-result byte caps and the deadline, so reading stops as soon as one is reached."""

    def __init__(self, decl: DatabaseConnector, deadline: float) -> None:
        self.limit = decl.max_rows
        self.value_cap = decl.max_value_bytes
        self.total_cap = decl.max_result_bytes
        self.deadline = deadline
        self.rows: list[tuple[Any, ...]] = []
        self.bytes = 0
        self.cut = False
        self.truncated = False
        self.values_cut = 0

    def want_more(self) -> bool:
        return not (self.cut or self.truncated)

    def add(self, row: tuple[Any, ...]) -> bool:
        """Keep `row` (values capped); False when reading must stop."""
        if time.monotonic() > self.deadline:
            raise _Timeout("statement timeout (client deadline)")
        if len(self.rows) >= self.limit:
            self.cut = True
            return False
        capped = []
        for value in row:
            value, size = self._cap(value)
            self.bytes += size
            capped.append(value)
        if self.bytes > self.total_cap:
            self.truncated = True
            return False
        self.rows.append(tuple(capped))
        return True

    def _cap(self, value: Any) -> tuple[Any, int]:
        if isinstance(value, Truncated):
            self.values_cut += 1
            return value, self.value_cap
        if value is None or isinstance(value, bool | int | float):
            return value, 8
        cap = self.value_cap
        if isinstance(value, bytes | bytearray | memoryview):
            data = bytes(value[: cap + 1])
            if len(data) > cap:
                self.values_cut += 1
                return data[:cap], cap
            return data, len(data)
        text = value if isinstance(value, str) else str(value)
        if len(text) <= cap:
            size = len(text.encode("utf-8", "surrogatepass"))
            if size <= cap:
                return value, size
        self.values_cut += 1
        head = text[:cap].encode("utf-8", "surrogatepass")[:cap].decode("utf-8", "ignore")
        return Truncated.of(head, len(text), cap), cap

    def result(self, columns: list[str]) -> QueryResult:
        return QueryResult(
            columns,
            self.rows,
            self.cut,
            truncated_at=self.total_cap if self.truncated else None,
            values_cut=self.values_cut,
        )


def _sqlite_limits(conn: Any, max_length: int) -> None:
    """No string or blob (nor row) may exceed `max_length` bytes, LIKE/GLOB patterns stay
    short, and printf()/format() refuse widths and precisions past `max_length`: SQLite's
    `%.*c` keeps looping after the value is too big (0.5 s per 100M, inside one opcode
    that neither the progress handler nor an interrupt can stop)."""

    if hasattr(conn, "setlimit"):  # Python 3.11+
        conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, max_length)
        conn.setlimit(sqlite3.SQLITE_LIMIT_LIKE_PATTERN_LENGTH, 1000)
    guarded = functools.partial(_guarded_printf, max_length)
    for name in ("printf", "format"):
        conn.create_function(name, -1, guarded, deterministic=True)


_PRINTF_SPEC = re.compile(r"%[-+ 0#,!]*(\*|\d*)(?:\.(\*|\d*))?[!]?([a-zA-Z%])")


def _guarded_printf(limit: int, fmt: Any, *args: Any) -> Any:
    """SQLite's printf(), after checking every width and precision against `limit`; the
    formatting itself is SQLite's own, on a private in-memory connection."""

    if fmt is None:
        return None
    used = 0
    for match in _PRINTF_SPEC.finditer(str(fmt)):
        if match.group(3) == "%":
            continue
        for part in match.group(1, 2):
            if part == "*":
                size = _as_int(args[used]) if used < len(args) else 0
                used += 1
            else:
                size = int(part) if part else 0
            if abs(size) > limit:
                raise ValueError(f"printf width or precision over {limit}")
        used += 1
    with contextlib.closing(sqlite3.connect(":memory:")) as mem:
        if hasattr(mem, "setlimit"):
            mem.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, limit)
        marks = ", ".join("?" * (len(args) + 1))
        return mem.execute(f"SELECT printf({marks})", (fmt, *args)).fetchone()[0]


def _as_int(value: Any) -> int:
    try:
        return int(float(value))
    except (TypeError, ValueError, OverflowError):
        return 0 if not isinstance(value, float) else 2**31


def _cap_pg_loaders(conn: Any, cap: int) -> None:
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


_pool_lock = threading.Lock()
_pool: ThreadPoolExecutor | None = None


def _executor() -> ThreadPoolExecutor:
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(_DB_THREADS, thread_name_prefix="fim-db")
        return _pool


def _execute_prepared(cursor: Any, statement: str, parameters: Any, context: Any) -> bool:
    cursor.execute(statement, parameters, prepare=True)
    return True


def _execute_prepared_no_params(cursor: Any, statement: str, context: Any) -> bool:
    cursor.execute(statement, prepare=True)
    return True


async def check_live(snapshot: Any) -> list[tuple[str, bool, str]]:
    """Connect to every declared database (for `fim validate --live`): name, ok, detail.

    A read-only PostgreSQL connector whose role is a superuser or could write fails here
    with the same line its first query would give. Connections are closed before this
    returns; the databases are checked concurrently, each within its connect timeout.
    """
    dbs = [
        Database(name, decl, snapshot.root)
        for name, decl in snapshot.connectors.items()
        if isinstance(decl, DatabaseConnector)
    ]

    async def one(db: Database) -> tuple[str, bool, str]:
        try:
            await db.in_thread(db.verify)
            mode = "read-only" if db.decl.read_only else "writable"
            return db.name, True, f"connected ({mode})"
        except Exception as exc:
            return db.name, False, describe_error(exc, db)
        finally:
            db.dispose()

    return list(await asyncio.gather(*(one(db) for db in dbs)))


def stub_tables(tables: list[str] | None) -> str:
    """`12 tables: a, b, ...` for the system prompt, or why they are unknown."""
    if tables is None:
        return "tables unknown (connection failed)"
    head = ", ".join(tables[:_STUB_TABLES])
    more = ", ..." if len(tables) > _STUB_TABLES else ""
    return f"{len(tables)} tables: {head}{more}"


__all__ = [
    "Database",
    "QueryResult",
    "Truncated",
    "check_live",
    "describe_error",
    "get_database",
    "normalize_url",
    "stub_tables",
]
