"""The store's writer thread (fim.store.writer): group commit, a failing unit reported to its
caller alone, deferred writes in order and never lost, a lost write behind failing the run's
record, a dropped PostgreSQL connection replaced, and SQLite's `synchronous` level.

The tests taking `store_url` run on SQLite and on PostgreSQL (FIM_TEST_POSTGRES_URL; skipped only
when it is unset), each PostgreSQL test in a schema of its own."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from pathlib import Path

import pytest
from sqlalchemy import Connection

from fim.store import SQLITE_SYNCHRONOUS, Store, WriteBehindError
from fim.store.schema import table
from fim.store.usage import record, spent, utc_day
from fim.types import Usage


def _store(tmp_path: Path) -> Store:
    return Store(f"sqlite:///{tmp_path / 'state.db'}")


def test_concurrent_writes_share_transactions_and_a_failure_stays_alone(store_url: str) -> None:
    store = Store(store_url)
    values = {"kind": "agent", "name": "a", "status": "ok", "data": {}}

    def failing(conn: Connection) -> None:
        conn.execute(table("runs").insert().values(id="dup", created_at=0, updated_at=0, **values))
        raise RuntimeError("unit fails after writing")  # rolled back, the others run again

    def duplicate(conn: Connection) -> None:  # the database refuses it (PostgreSQL: the
        # whole transaction is aborted at that point)
        conn.execute(
            table("runs").insert().values(id="first", created_at=0, updated_at=0, **values)
        )

    async def main() -> None:
        await store.put_run("first", "agent", "a", "ok", {})  # opens the engine
        writer = store._group_writer()
        before = writer.batches
        writes = [store.put_run(f"r{i}", "agent", "a", "ok", {"i": i}) for i in range(20)]
        results = await asyncio.gather(
            *writes[:10], store._tx(failing), store._tx(duplicate), *writes[10:],
            return_exceptions=True,
        )  # fmt: skip
        assert isinstance(results[10], RuntimeError)
        assert "first" in str(results[11])  # the IntegrityError, to its own caller
        assert results[:10] + results[12:] == [None] * 20
        assert writer.batches - before < 22  # queued together, committed together
        runs = await store.list_runs(limit=100)
        assert {r.id for r in runs} == {"first", *(f"r{i}" for i in range(20))}  # not "dup"
        found = await store.get_run("r7")
        assert found is not None and found.data == {"i": 7}

    try:
        asyncio.run(main())
    finally:
        store.close()


def test_a_lost_write_behind_fails_the_runs_record_loudly(
    store_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A run's event log that could not be stored: logged, and the run's record (written
    all the same) raises; another run's record does not."""
    from fim.store.live import EventLog

    store = Store(store_url)

    async def main() -> None:
        log = EventLog(store, "lost", "agent", "a")
        log.add({"type": "run_started"})
        log.add({"type": "message", "text": object()})  # not JSON: the INSERT fails
        await log.close()
        await store.put_run("other", "agent", "a", "ok", {})
        with pytest.raises(WriteBehindError, match="the events of run lost"):
            await store.put_run("lost", "agent", "a", "ok", {"output": "done"})
        record = await store.get_run("lost")
        assert record is not None and record.status == "ok"  # the record itself is stored
        await store.put_run("lost", "agent", "a", "ok", {})  # reported once

    try:
        with caplog.at_level(logging.ERROR, logger="fim.store"):
            asyncio.run(main())
    finally:
        store.close()
    assert "could not store the events of run lost" in caplog.text


def test_the_writer_replaces_a_dropped_postgres_connection(store_url: str) -> None:
    if store_url.startswith("sqlite"):
        pytest.skip("PostgreSQL only: a server that drops the connection")
    store = Store(store_url)

    async def main() -> None:
        await store.put_run("before", "agent", "a", "ok", {})
        pid = await store._tx(lambda c: c.exec_driver_sql("SELECT pg_backend_pid()").scalar())
        await store._read(lambda c: c.exec_driver_sql(f"SELECT pg_terminate_backend({pid})"))
        await store.put_run("after", "agent", "a", "ok", {})  # run again on a new connection
        assert {r.id for r in await store.list_runs()} == {"before", "after"}

    try:
        asyncio.run(main())
    finally:
        store.close()


def test_put_run_updates_and_keeps_created_at(tmp_path: Path) -> None:
    store = _store(tmp_path)

    async def main() -> None:
        await store.put_run("r", "agent", "a", "running", {})
        first = await store.get_run("r")
        await store.put_run("r", "agent", "a", "ok", {"output": "done"})
        second = await store.get_run("r")
        assert first is not None and second is not None
        assert (second.status, second.data) == ("ok", {"output": "done"})
        assert second.created_at == first.created_at
        assert second.updated_at >= first.updated_at

    try:
        asyncio.run(main())
    finally:
        store.close()


async def _usage(store: Store, run_id: str) -> None:
    await record(
        store,
        run_id=run_id,
        agent="a",
        model="m",
        status="ok",
        calls=1,
        usage=Usage(prompt_tokens=3, completion_tokens=4),
    )


def test_deferred_write_is_seen_by_the_next_read_and_flushed_alone(tmp_path: Path) -> None:
    store = _store(tmp_path)
    other = _store(tmp_path)  # another connection: sees only what was committed

    async def main() -> None:
        writer = store._group_writer()
        writer.flush_after = 0.01
        await _usage(store, "r1")
        # a read of this process queues behind it
        assert (await spent(store, utc_day(time.time()))).total_tokens == 7
        await _usage(store, "r2")
        # nobody awaits a write now: the flush timer commits it
        for _ in range(200):
            if (await spent(other, utc_day(time.time()))).total_tokens == 14:
                return
            await asyncio.sleep(0.01)
        raise AssertionError("the deferred usage row was never committed")

    try:
        asyncio.run(main())
    finally:
        store.close()
        other.close()


def test_close_writes_what_is_deferred(tmp_path: Path) -> None:
    store = _store(tmp_path)

    async def main() -> None:
        store._group_writer().flush_after = 3600  # only close() can write it
        await _usage(store, "r1")

    asyncio.run(main())
    store.close()
    reopened = _store(tmp_path)
    try:
        day = utc_day(time.time())
        assert asyncio.run(spent(reopened, day)).total_tokens == 7
    finally:
        reopened.close()


def test_a_failing_deferred_write_is_logged(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = _store(tmp_path)

    def broken(conn: Connection) -> None:
        raise ValueError("no such thing")

    async def main() -> None:
        await store._write_behind(broken, "the broken thing")
        await store.put_run("after", "agent", "a", "ok", {})  # same batch: still written

    try:
        with caplog.at_level(logging.ERROR, logger="fim.store"):
            asyncio.run(main())
        assert asyncio.run(store.get_run("after")) is not None
    finally:
        store.close()
    assert "could not store the broken thing" in caplog.text


def test_sqlite_store_runs_wal_with_synchronous_normal(tmp_path: Path) -> None:
    store = _store(tmp_path)

    async def main() -> tuple[str, int]:
        def pragmas(conn: Connection) -> tuple[str, int]:
            mode = conn.exec_driver_sql("PRAGMA journal_mode").scalar()
            return str(mode), int(conn.exec_driver_sql("PRAGMA synchronous").scalar() or 0)

        return await store._tx(pragmas)

    try:
        assert SQLITE_SYNCHRONOUS == "NORMAL"
        assert asyncio.run(main()) == ("wal", 1)  # 1 = NORMAL
    finally:
        store.close()


def test_prepared_statements_write_what_sqlalchemy_writes(store_url: str) -> None:
    from fim.store.prepared import ROWS_PER_STATEMENT, Prepared

    store = Store(store_url)
    events = table("run_events")
    event = {"type": "message", "text": 'naïve "quoted" \\ text', "n": [1, 2.5, None]}
    prepared = Prepared(events.insert, ["run_id", "seq", "event"])
    many = ROWS_PER_STATEMENT * 2 + 3  # full multi-row statements and a shorter one

    def write(conn: Connection) -> list[tuple[str, int, str]]:
        conn.execute(events.insert(), [{"run_id": "core", "seq": 1, "event": event}])
        prepared.execute(conn, [{"run_id": "prep", "seq": 1, "event": event}])
        rows = [{"run_id": "prep", "seq": n, "event": {**event, "seq": n}} for n in range(2, many)]
        prepared.execute(conn, rows)
        raw = "SELECT run_id, seq, CAST(event AS TEXT) FROM fim_run_events ORDER BY run_id, seq"
        return [(str(r[0]), int(r[1]), str(r[2])) for r in conn.exec_driver_sql(raw)]

    try:
        rows = asyncio.run(store._tx(write))
    finally:
        store.close()
    assert [r[:2] for r in rows] == [("core", 1), *(("prep", n) for n in range(1, many))]
    assert rows[1][2] == rows[0][2]  # the same JSON text, byte for byte
    assert [json.loads(r[2]).get("seq") for r in rows[2:]] == list(range(2, many))


def test_json_columns_round_trip_what_json_does() -> None:
    import math

    from fim.store.schema import json_text

    value = {"text": "naïve ✓", "big": 2**70, "n": [1, 2.5, None, True], "nested": {"a": {}}}
    assert json.loads(json_text(value)) == value  # 2**70: orjson declines, json writes it
    assert json.loads(json_text({1: "int key"})) == {"1": "int key"}  # as json.dumps does
    assert json.loads(json_text({"x": math.nan})) == {"x": None}  # NaN is not JSON


def test_a_process_that_ends_without_closing_the_store_still_writes_what_it_deferred(
    tmp_path: Path,
) -> None:
    import subprocess
    import sys

    db = tmp_path / "state.db"
    script = f"""
import asyncio
from fim.store import Store
from fim.store.usage import record
from fim.types import Usage

store = Store("sqlite:///{db}")
store._group_writer().flush_after = 3600  # no timer: only the exit hook can write it
asyncio.run(record(store, run_id="r", agent="a", model="m", status="ok", calls=1,
                   usage=Usage(prompt_tokens=3, completion_tokens=4)))
"""
    subprocess.run([sys.executable, "-c", script], check=True, timeout=60)
    reopened = _store(tmp_path)
    try:
        assert asyncio.run(spent(reopened, utc_day(time.time()))).total_tokens == 7
    finally:
        reopened.close()
