"""A SQLite connector's statement runs in a killable worker process, not in fim's.

SQLite runs the model's SQL inside whatever process opens the database, and its own
checks (value limit, heap limit, progress handler) are the only bounds there. In a worker
of `fim.tools.isolate` the OS bounds it too: the address space is capped, the worker is
killed past the deadline, and the heap limit (one per process) is the worker's, so fim's
own SQLite store never shares it.
"""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import pytest

from fim.config.schema import DatabaseConnector
from fim.connectors import database as database_module
from fim.connectors.database import Database
from fim.connectors.database.sqlite_statement import SqliteTarget, run_statement
from fim.tools import isolate


@pytest.fixture
def shop(tmp_path: Path) -> Path:
    path = tmp_path / "shop.db"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE t (x INTEGER)")
        conn.executemany("INSERT INTO t VALUES (?)", [(i,) for i in range(100)])
    conn.close()
    return path


def connector(path: Path, **limits: object) -> Database:
    decl = DatabaseConnector(kind="database", url=f"sqlite:///{path}", **limits)
    return Database("shop", decl, path.parent)


def heap_limit_here() -> int:
    with sqlite3.connect(":memory:") as conn:
        limit: int = conn.execute("PRAGMA hard_heap_limit").fetchone()[0]
    conn.close()
    return limit


async def test_a_statement_that_needs_too_much_fails_alone(shop: Path):
    """The statement fails with SQLite's out-of-memory error in its worker; fim's own
    process keeps an unlimited SQLite heap (its state store's writes go on), and the next
    statement runs as usual."""
    db = connector(shop)
    columns = ", ".join(f"zeroblob(20000000) AS c{i}" for i in range(30))  # 600 MB a row
    failed = await db.query(f"SELECT {columns} FROM t LIMIT 1")
    after = await db.query("SELECT count(*) AS n FROM t")
    db.dispose()
    assert failed.is_error and "MiB SQLite may use for one query" in failed.content
    assert after.content == "n\n100\n(1 row)"
    assert heap_limit_here() == 0


async def test_the_os_bounds_a_statement_below_sqlites_own_limits(shop: Path):
    """Without SQLite's heap limit, the worker's address space still holds: a 300 MB value
    is refused with the worker's default memory and built with the ceiling."""
    decl = DatabaseConnector(kind="database", url=f"sqlite:///{shop}", max_result_bytes=10**8)
    target = SqliteTarget(str(shop), read_only=True)
    sql = "SELECT length(randomblob(300000000)) AS n"
    with pytest.raises((MemoryError, sqlite3.Error)):
        await isolate.call(run_statement, target, decl, sql, {}, None, timeout=60)
    ceiling = isolate.MEMORY_CEILING
    built = await isolate.call(
        run_statement, target, decl, sql, {}, None, timeout=60, memory=ceiling
    )
    assert built.rows == [(300_000_000,)]


async def test_a_statement_sqlite_does_not_stop_is_killed(
    shop: Path, monkeypatch: pytest.MonkeyPatch
):
    """A step that runs on inside SQLite (here: waiting for a writer's lock, which no
    progress handler sees) ends when its worker is killed; the kill is brought before the
    statement's own deadline to make that step outlast it. Another worker takes its place."""
    holder = sqlite3.connect(shop, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    monkeypatch.setattr(database_module, "_KILL_AFTER", -9.5)  # killed at 0.5 s of 10
    db = connector(shop, statement_timeout=10)
    pool = isolate.DATABASE
    await pool.started()
    before = set(pool.pids())
    try:
        killed = await db.query("SELECT count(*) FROM t")
    finally:
        holder.rollback()
        holder.close()
    assert killed.is_error and "exceeded the statement timeout of 10s" in killed.content
    for _ in range(500):
        if len(pool.pids()) == pool.size and before - set(pool.pids()):
            break
        await asyncio.sleep(0.01)
    assert len(before - set(pool.pids())) == 1
    monkeypatch.undo()
    assert "100" in (await db.query("SELECT count(*) FROM t")).content
    db.dispose()


async def test_waiting_for_a_writers_lock_ends_at_the_statement_timeout(shop: Path):
    holder = sqlite3.connect(shop, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    db = connector(shop, statement_timeout=0.3)
    try:
        result = await db.query("SELECT count(*) FROM t")
    finally:
        holder.rollback()
        holder.close()
        db.dispose()
    # SQLite's busy wait gives up at the deadline ("database is locked"); on a loaded
    # machine the worker may reach the deadline before the statement even waits (its first
    # statement imports its drivers), and the deadline ends it instead: never a hang
    assert result.is_error
    assert "database is locked" in result.content or "statement timeout of 0.3s" in result.content
