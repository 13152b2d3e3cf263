"""Attack-35 #2: a state store that another session keeps locked no longer holds fim's
writes, or its shutdown, for as long as the lock lasts.

- PostgreSQL connections wait `WAIT_FOR_LOCKS_MS` for a lock (`lock_timeout`), as SQLite's
  `busy_timeout` does: a write on a locked table fails then, and says why.
- `close` gives what is queued `CLOSE_WITHIN` seconds: work not begun by then is logged as
  not stored instead of tried (each try may wait for the lock as long again).
- `Services` closes the store in a thread: the event loop is not held meanwhile.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from fim.run.services import Services
from fim.store import Store, engine, get_store
from fim.store.writer import GroupWriter
from tests.pg_schemas import pg_schema


def test_work_not_begun_by_the_close_deadline_is_reported_lost_not_tried(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The first unit fails as a lock wait does, taking the clock past the deadline: the
    other two are not tried again one by one, and each is logged as not stored."""
    from sqlalchemy import create_engine, text

    db = create_engine(f"sqlite:///{tmp_path}/w.db")
    with db.begin() as conn:
        conn.execute(text("CREATE TABLE t (v INTEGER)"))
    now = [0.0]
    writer = GroupWriter(db.connect, clock=lambda: now[0], flush_after=60)
    tried: list[str] = []

    def locked(conn: Any) -> None:
        tried.append("locked")
        now[0] += 31  # as long as a lock wait takes, and the deadline is past
        raise RuntimeError("database is locked")

    def insert(value: int) -> Callable[[Any], None]:
        def work(conn: Any) -> None:
            tried.append(f"insert {value}")
            conn.execute(text("INSERT INTO t VALUES (:v)"), {"v": value})

        return work

    writer.defer(locked, "the locked unit")
    writer.defer(insert(1), "row 1")
    writer.defer(insert(2), "row 2")
    with caplog.at_level(logging.ERROR, logger="fim.store"):
        writer.close(within=30)
    assert tried == ["locked"]  # the batch stopped there, and nothing was tried again
    lost = [(r.getMessage(), str(r.exc_info[1])) for r in caplog.records if r.exc_info]
    closing = (
        "not stored: the state store was closing, and its database did not take the write "
        "in time (locked or unreachable)"
    )
    assert lost == [
        ("could not store the locked unit", "database is locked"),
        ("could not store row 1", closing),
        ("could not store row 2", closing),
    ]
    with db.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM t")).scalar() == 0


def test_before_the_deadline_a_failed_batch_is_still_retried_unit_by_unit(
    tmp_path: Path,
) -> None:
    from sqlalchemy import create_engine, text

    db = create_engine(f"sqlite:///{tmp_path}/w.db")
    with db.begin() as conn:
        conn.execute(text("CREATE TABLE t (v INTEGER)"))
    writer = GroupWriter(db.connect, clock=lambda: 0.0, flush_after=60)

    def failing(conn: Any) -> None:
        raise RuntimeError("a bad unit")

    writer.defer(failing, "the bad unit")
    writer.defer(lambda c: c.execute(text("INSERT INTO t VALUES (1)")), "row 1")
    writer.close(within=30)
    with db.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM t")).scalar() == 1


async def test_a_postgres_write_on_a_locked_table_fails_after_the_lock_wait(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import psycopg

    monkeypatch.setattr(engine, "WAIT_FOR_LOCKS_MS", 200)
    with pg_schema() as url:
        store = Store(url)
        try:
            await store.audit({"run_id": "r0", "tool": "t", "outcome": "ok"})  # tables made
            dsn, _, options = url.partition("?")
            with psycopg.connect(f"{dsn}?{options}") as holder:
                holder.execute("LOCK TABLE fim_audit IN ACCESS EXCLUSIVE MODE")
                with pytest.raises(Exception, match="lock timeout"):
                    await asyncio.wait_for(
                        store.audit({"run_id": "r1", "tool": "t", "outcome": "ok"}), 60
                    )
                holder.rollback()
            await store.audit({"run_id": "r2", "tool": "t", "outcome": "ok"})
            assert [e.run_id for e in await store.list_audit()] == ["r2", "r0"]
        finally:
            await asyncio.to_thread(store.close)


async def test_services_close_the_store_off_the_event_loop(tmp_path: Path) -> None:
    services = Services(root=tmp_path, state_url=f"sqlite:///{tmp_path}/s.db")
    store = get_store(services)
    closed_on: list[threading.Thread] = []
    original = store.close

    def close() -> None:
        closed_on.append(threading.current_thread())
        original()

    store.close = close  # type: ignore[method-assign]
    await services.aclose()
    assert closed_on and closed_on[0] is not threading.main_thread()
