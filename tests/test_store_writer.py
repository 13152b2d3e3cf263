"""SQLite's writer thread (fim.store.writer): group commit, a failing unit alone, deferred
writes in order and never lost, and the store's `synchronous` level."""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path

import pytest
from sqlalchemy import Connection

from fim.store import SQLITE_SYNCHRONOUS, Store
from fim.store.schema import table
from fim.store.usage import record, spent, utc_day
from fim.types import Usage


def _store(tmp_path: Path) -> Store:
    return Store(f"sqlite:///{tmp_path / 'state.db'}")


def test_concurrent_writes_share_transactions_and_a_failure_stays_alone(tmp_path: Path) -> None:
    store = _store(tmp_path)

    def failing(conn: Connection) -> None:
        values = {"kind": "agent", "name": "a", "status": "ok", "data": {}}
        conn.execute(table("runs").insert().values(id="dup", created_at=0, updated_at=0, **values))
        raise RuntimeError("unit fails after writing")  # its SAVEPOINT is rolled back

    async def main() -> None:
        await store.put_run("first", "agent", "a", "ok", {})  # opens the engine
        writer = store._group_writer()
        before = writer.batches
        writes = [store.put_run(f"r{i}", "agent", "a", "ok", {"i": i}) for i in range(20)]
        results = await asyncio.gather(*writes, store._tx(failing), return_exceptions=True)
        assert isinstance(results[-1], RuntimeError)
        assert results[:-1] == [None] * 20
        assert writer.batches - before < 21  # queued together, committed together
        runs = await store.list_runs(limit=100)
        assert {r.id for r in runs} == {"first", *(f"r{i}" for i in range(20))}  # not "dup"
        found = await store.get_run("r7")
        assert found is not None and found.data == {"i": 7}

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


def test_prepared_statements_write_what_sqlalchemy_writes(tmp_path: Path) -> None:
    from fim.store.prepared import Prepared

    store = _store(tmp_path)
    events = table("run_events")
    event = {"type": "message", "text": 'naïve "quoted" \\ text', "n": [1, 2.5, None]}
    prepared = Prepared(events.insert, ["run_id", "seq", "event"])

    def write(conn: Connection) -> list[tuple[str, int, str]]:
        conn.execute(events.insert(), [{"run_id": "core", "seq": 1, "event": event}])
        prepared.execute(conn, [{"run_id": "prep", "seq": 1, "event": event}])
        prepared.execute(conn, [{"run_id": "prep", "seq": n, "event": event} for n in (2, 3)])
        raw = "SELECT run_id, seq, event FROM fim_run_events ORDER BY run_id, seq"
        return [(str(r[0]), int(r[1]), str(r[2])) for r in conn.exec_driver_sql(raw)]

    try:
        rows = asyncio.run(store._tx(write))
    finally:
        store.close()
    assert [r[:2] for r in rows] == [("core", 1), ("prep", 1), ("prep", 2), ("prep", 3)]
    assert {r[2] for r in rows} == {rows[0][2]}  # the same JSON text, byte for byte


def test_json_columns_round_trip_what_json_does() -> None:
    import json
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
