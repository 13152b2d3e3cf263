"""Database connectors: list tables, describe one, run a query — through SQLAlchemy.

A statement (model-written SQL) is parsed, checked and run in a killable worker process
(`fim.tools.isolate`), never in fim's: a driver reads what the database sends whole (a
PostgreSQL error message quoting a model-built value can be 1 GB) and SQLite builds what
the statement asks for inside the process that runs it, so the worker's address space is
capped by the OS, it is killed past the deadline whatever the driver is doing, and SQLite's
heap limit is its own. fim's own calls (list tables, describe one, `--live` checks) run in
a thread pool of their own (`fim-db`): other tools that fill the default thread pool never
starve them, and the event loop never waits on them. What `read_only: true` means is
decided in `fim.connectors.readonly` (statement, catalog, role and connection layers).

Limits hold whatever one row costs: PostgreSQL sessions carry `statement_timeout`,
`lock_timeout` and `idle_in_transaction_session_timeout`; SQLite has a progress handler
that ends the statement at the deadline and `SQLITE_LIMIT_LENGTH`, so no single
value (`printf('%.*c', 900000000, 'x')`) can grow past a bound inside one opcode, and a
heap limit for the statement (`sqlite.HEAP_LIMIT`) that its sorts and temporary tables use
too.
Rows are read one at a time (SQLite step by step, read-only PostgreSQL in single-row
mode; a writable PostgreSQL connector, like other drivers, gets the whole result from its
driver at once) and every value and the whole result are capped while fetching
(`max_value_bytes`, `max_result_bytes`). Read-only PostgreSQL withholds a SELECT's row
whose text is over 4 x `max_result_bytes` (it is never sent) and cuts values over the cap
in libpq's buffer, before Python copies them; what it may still send whole (an EXPLAIN
line, an error message: up to 1 GB) is said in `postgres`: it is bounded by the worker.

Modules, by concept: `engine` (URL, engine per dialect, role check on first connect),
`worker` (the blocking calls: list, describe, execute within the limits; what a worker
process runs, `execute_isolated`), `rows` (the
result caps while reading), `sqlite` and `postgres` (each driver's own limits),
`sqlite_statement` (one SQLite statement from open to last row); this module
is the async API the tools and workflow nodes use, the thread pool it runs on, and how a
failure is worded for the model.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

from fim.config.schema import DatabaseConnector
from fim.connectors import readonly
from fim.connectors.database import sqlite
from fim.connectors.database.engine import CONNECT_TIMEOUT
from fim.connectors.database.rows import FetchTimeout, QueryResult, size_limit
from fim.connectors.database.worker import Worker, driver_env, execute_isolated
from fim.connectors.render import pipe_table
from fim.connectors.sql_guard import SqlRejected
from fim.masking import known
from fim.tools import isolate
from fim.types import ToolResult

_MAX_OUTPUT_CHARS = 20_000
_ERROR_CHARS = 500
_STUB_TABLES = 12
_DB_THREADS = 16
_KILL_AFTER = 2.0
"""Seconds past a statement's timeout (and connecting) before its worker is killed: the
database's own deadline normally ends it first, with a clearer error."""
STATEMENT_MEMORY = isolate.MEMORY_BYTES + sqlite.HEAP_LIMIT
"""Address space of the worker process running a statement (768 MiB): SQLite's heap and
what a driver holds of a result, on top of what any worker call may use."""
"""Worker threads for all database connectors of the process (timeouts free them)."""

T = TypeVar("T")


class Database(Worker):
    """One database connector's live side: a lazily created engine and the three actions."""

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

    async def run(
        self, sql: str, params: dict[str, Any] | None = None, *, read_only_run: bool = False
    ) -> QueryResult:
        """Run one statement under the connector's read-only decision; raises
        `SqlRejected` for a refused statement (workflow nodes and `query` share this).
        `read_only_run`: the calling run may only read (`readonly.run_reads_only`); its
        statement is then checked and run as a read-only connector's, on this one too.

        The statement is parsed, checked and run in a killable worker process
        (`fim.tools.isolate`), never in fim's: what a driver reads or SQLite builds is
        bounded by the worker's address space (an error message quoting a model-built
        value of 1 GB, an EXPLAIN line, a SQLite sort), the worker is killed past the
        deadline whatever the driver is doing, and SQLite's heap limit is the worker's."""
        sqlite_heap = sqlite.HEAP_LIMIT if self.dialect == "sqlite" else None
        connecting = 0.0 if self.dialect == "sqlite" else CONNECT_TIMEOUT
        try:
            return await isolate.call(
                execute_isolated,
                self.name,
                self.decl,
                self.root,
                sql,
                params or {},
                sqlite_heap,
                driver_env(),
                read_only_run,
                timeout=self.decl.statement_timeout + connecting + _KILL_AFTER,
                memory=STATEMENT_MEMORY,
                workers=isolate.DATABASE,
            )
        except isolate.Stopped as exc:
            if exc.timed_out:
                raise FetchTimeout("statement timeout (the worker was stopped)") from None
            raise RuntimeError(str(exc)) from None

    async def query(
        self, sql: str, params: dict[str, Any] | None = None, *, read_only_run: bool = False
    ) -> ToolResult:
        """The statement's rows as a table for the model (`run`, worded)."""
        try:
            result = await self.run(sql, params, read_only_run=read_only_run)
        except SqlRejected as exc:
            why = READ_ONLY_RUN if read_only_run and not self.decl.read_only else ""
            return ToolResult(
                content=f"Error: query refused: {exc}{why}. Rewrite it as a single SELECT.",
                is_error=True,
                metadata={"refused": True},
            )
        except Exception as exc:
            return self._failure("the query failed", exc, read_only_run)
        if not result.columns:
            return ToolResult(content=f"statement executed ({result.rowcount} rows affected)")
        text = pipe_table(result.columns, result.rows, cut=result.cut, limit=_MAX_OUTPUT_CHARS)
        notes = result.notes(self.decl)
        if notes:
            text += "\n(" + "; ".join(notes) + ")"
        return ToolResult(
            content=text,
            metadata={
                "rows": len(result.rows),
                "cut": result.cut,
                **({"truncated_at": result.truncated_at} if result.truncated_at else {}),
                **(
                    {"row_too_large": result.row_too_large}
                    if result.row_too_large is not None
                    else {}
                ),
            },
        )

    def _failure(self, what: str, exc: Exception, read_only_run: bool = False) -> ToolResult:
        text = describe_error(exc, self, read_only_run)
        return ToolResult(content=f"Error: {what}: {text}", is_error=True)


READ_ONLY_RUN = (
    " (this run is read-only, so its statements run as on a read-only database: "
    "built-in functions only, in a read-only transaction)"
)
"""Why a read-only run's statement was refused on a writable connector."""


def describe_error(exc: Exception, db: Database, read_only_run: bool = False) -> str:
    """One line the model can act on, without the URL (which may hold a password).

    A driver's message may quote a value the model built (PostgreSQL's `invalid input
    syntax for type integer: "xxx..."` can be 1 GB), so only its head is ever looked at:
    stripping, splitting or lowering the whole of it would copy it again."""
    orig = getattr(exc, "orig", None) or exc
    if isinstance(orig, readonly.ReadOnlyRoleError | SqlRejected):  # fim's own words
        return (str(orig).strip().splitlines() or [type(orig).__name__])[0]
    # long enough that a URL starting in the part shown is whole, so it is replaced below
    head = str(orig)[: 2 * _ERROR_CHARS + len(db.decl.url) + len(db.url)].strip()
    # masked before its first line is taken: a key or base64 wrapped over lines, cut at
    # its first line break, is a piece of a secret that no form matches
    head = known().text(head)
    text = (head.splitlines() or [type(orig).__name__])[0]
    lowered = text.lower()
    if isinstance(orig, FetchTimeout) or "interrupted" in lowered or "statement timeout" in lowered:
        return (
            f"the query exceeded the statement timeout of {db.decl.statement_timeout:g}s; "
            "make it cheaper (filter, aggregate, LIMIT)"
        )
    if "lock timeout" in lowered:
        return "the query waited too long for a lock held by another session; try again later"
    if "string or blob too big" in lowered or "user-defined function raised" in lowered:
        return (
            f"a value grew past the size limit of {size_limit(db.decl)} bytes; "
            "select less (substr, LIMIT)"
        )
    if db.dialect == "sqlite" and (isinstance(orig, MemoryError) or "out of memory" in lowered):
        return (
            f"the query needed more than the {sqlite.HEAP_LIMIT // 2**20} MiB SQLite may use "
            "for one query; select fewer or shorter values, or sort fewer rows (LIMIT)"
        )
    if "readonly" in lowered or "read-only" in lowered or "query_only" in lowered:
        if read_only_run and not db.decl.read_only:
            return f"{text} (this run is read-only; only SELECT queries are possible)"
        return f"{text} (this database is read-only; only SELECT queries are possible)"
    text = text.replace(db.decl.url, "<url>").replace(db.url, "<url>")
    # a driver may quote the offending value: never hand a huge one to the model, and
    # mask it whole before the cut (`Masker.head`), which leaves no piece of a secret
    shown, cut = known().head(text, _ERROR_CHARS)
    return shown + "... [message cut]" if cut else shown


def get_database(services: Any, name: str, decl: DatabaseConnector, root: Path) -> Database:
    """The Database of a declaration, shared across runs until the declaration changes."""
    digest = hashlib.sha256(decl.model_dump_json().encode()).hexdigest()[:12]
    return services.get(
        f"connector:database:{name}:{digest}:{root}",
        lambda: Database(name, decl, root),
        lambda db: db.dispose(),
    )


_pool_lock = threading.Lock()
_pool: ThreadPoolExecutor | None = None


def _executor() -> ThreadPoolExecutor:
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(_DB_THREADS, thread_name_prefix="fim-db")
        return _pool


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
    "check_live",
    "describe_error",
    "get_database",
    "stub_tables",
]
