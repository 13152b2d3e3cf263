"""The state store keeps runs, approvals and the audit log, in SQLite or PostgreSQL.

Every behaviour test runs against both backends; the PostgreSQL half needs a server named
by FIM_TEST_POSTGRES_URL (CI starts one) and is skipped only when that variable is unset.
Each PostgreSQL test gets its own schema, so tests never see each other's rows.
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from pathlib import Path

import pytest

from fim.run.services import Services
from fim.store import MIGRATIONS, Store, get_store, normalize_url
from fim.store.approvals import this_process


@pytest.fixture
async def store(store_url: str) -> Store:
    s = Store(store_url)
    yield s
    s.close()


# ----------------------------------------------------------------------------- schema


async def test_a_new_database_is_migrated_to_the_latest_schema_version(store_url: str) -> None:
    first = Store(store_url)
    assert await first.schema_version() == len(MIGRATIONS)
    await first.put_run("r1", "agent", "support", "ok", {})
    first.close()
    # Reopening applies nothing twice and keeps the data.
    second = Store(store_url)
    assert await second.schema_version() == len(MIGRATIONS)
    assert (await second.get_run("r1")) is not None
    second.close()


def test_relative_sqlite_paths_live_under_the_project_root_in_wal_mode(tmp_path: Path) -> None:
    store = Store("sqlite:///.fim/state.db", root=tmp_path)
    assert store.url == f"sqlite:///{tmp_path / '.fim' / 'state.db'}"
    assert not (tmp_path / ".fim").exists()  # created on first use, not on construction
    asyncio.run(store.put_run("r", "agent", "a", "ok", {}))
    store.close()
    db = tmp_path / ".fim" / "state.db"
    assert db.is_file()
    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_postgres_urls_use_the_psycopg3_driver() -> None:
    assert normalize_url("postgresql://u:p@h/db") == "postgresql+psycopg://u:p@h/db"
    assert normalize_url("postgres://u@h/db") == "postgresql+psycopg://u@h/db"
    assert normalize_url("postgresql+psycopg://u@h/db") == "postgresql+psycopg://u@h/db"
    assert normalize_url("sqlite:////abs/state.db") == "sqlite:////abs/state.db"
    assert Store("postgresql://fim:hunter22@h/db").display_url == (
        "postgresql+psycopg://fim:***@h/db"
    )


async def test_get_store_shares_one_store_per_url_and_closes_it(tmp_path: Path) -> None:
    services = Services(root=tmp_path, state_url="sqlite:///.fim/state.db")
    store = get_store(services)
    assert get_store(services) is store
    await store.put_run("r", "agent", "a", "ok", {})
    assert store._engine is not None
    await services.aclose()
    assert store._engine is None


# ----------------------------------------------------------------------------- runs


async def test_runs_are_upserted_and_listed_newest_first(store: Store) -> None:
    await store.put_run("r1", "agent", "support", "running", {"input": "hi"})
    first = await store.get_run("r1")
    await store.put_run("r1", "agent", "support", "ok", {"output": "done"})
    await store.put_run("r2", "workflow", "refund", "paused", {"node": "approve"})
    updated = await store.get_run("r1")
    assert updated is not None and first is not None
    assert (updated.status, updated.data) == ("ok", {"output": "done"})
    assert updated.created_at == first.created_at <= updated.updated_at
    assert [r.id for r in await store.list_runs()] == ["r2", "r1"]
    assert [r.id for r in await store.list_runs(kind="agent")] == ["r1"]
    assert len(await store.list_runs(limit=1)) == 1
    assert await store.get_run("nope") is None


# ----------------------------------------------------------------------------- approvals


async def test_an_approval_is_pending_until_a_human_decides(store: Store) -> None:
    approval_id = await store.create_approval(
        "run-1",
        "support",
        "crm__create_lead",
        {"name": "Ada"},
        "needs confirmation",
        expires_at=time.time() + 60,
        data={"hook": "confirm"},
    )
    pending = await store.get_approval(approval_id)
    assert pending is not None and pending.status == "pending"
    assert pending.args == {"name": "Ada"} and pending.kind == "tool"
    assert [a.id for a in await store.list_approvals()] == [approval_id]

    decided = await store.resolve_approval(approval_id, True, by="cli:ops", data={"note": "ok"})
    assert decided is not None
    assert (decided.status, decided.resolved_by) == ("approved", "cli:ops")
    assert decided.data == {"hook": "confirm", "note": "ok", "waiter": this_process()}
    assert await store.list_approvals() == []
    assert [a.id for a in await store.list_approvals(None)] == [approval_id]

    # A decided approval stays decided: a second answer changes nothing.
    again = await store.resolve_approval(approval_id, False, by="someone-else")
    assert again is not None and (again.status, again.resolved_by) == ("approved", "cli:ops")
    assert await store.resolve_approval("unknown", True) is None


async def test_an_approval_allows_exactly_one_consumer(store: Store) -> None:
    approval_id = await store.create_approval("r", "a", "t", {}, "why", None)
    assert await store.consume_approval(approval_id) is False  # not approved yet
    await store.resolve_approval(approval_id, True)
    assert await store.consume_approval(approval_id) is True
    assert await store.consume_approval(approval_id) is False


async def test_an_approval_past_its_deadline_reads_as_expired(store: Store) -> None:
    approval_id = await store.create_approval("r", "a", "t", {}, "why", time.time() - 1)
    expired = await store.get_approval(approval_id)
    assert expired is not None and expired.status == "expired"
    assert expired.resolved_by == "timeout"
    late = await store.resolve_approval(approval_id, True)
    assert late is not None and late.status == "expired"


async def test_waiting_ends_with_the_decision_made_by_another_store(
    store: Store, store_url: str
) -> None:
    approval_id = await store.create_approval("r", "a", "t", {}, "why", time.time() + 30)
    other = Store(store_url)  # another process's view of the same database

    async def human() -> None:
        await asyncio.sleep(0.1)
        await other.resolve_approval(approval_id, False, by="cli", data={"note": "no"})

    decided, _ = await asyncio.gather(store.wait_approval(approval_id, 10, poll=0.02), human())
    other.close()
    assert decided is not None and decided.status == "denied"
    assert decided.data["note"] == "no"


async def test_waiting_ends_when_the_approval_expires(store: Store) -> None:
    approval_id = await store.create_approval("r", "a", "t", {}, "why", time.time() + 0.2)
    decided = await store.wait_approval(approval_id, 10, poll=0.05)
    assert decided is not None and decided.status == "expired"


# ----------------------------------------------------------------------------- audit


async def test_audit_entries_are_appended_and_listed_newest_first(store: Store) -> None:
    await store.audit(
        {
            "run_id": "r1",
            "agent": "a",
            "tool": "calc",
            "args": {"x": 1},
            "outcome": "allow",
            "duration_ms": 2.5,
        }
    )
    await store.audit(
        {
            "run_id": "r2",
            "agent": "b",
            "tool": "crm",
            "args": {},
            "outcome": "block",
            "detail": "read-only",
        }
    )
    entries = await store.list_audit()
    assert [(e.tool, e.outcome) for e in entries] == [("crm", "block"), ("calc", "allow")]
    assert entries[1].args == {"x": 1} and entries[1].duration_ms == 2.5
    assert entries[0].detail == "read-only" and entries[0].duration_ms is None
    assert [e.run_id for e in await store.list_audit(agent="a")] == ["r1"]
    assert [e.run_id for e in await store.list_audit(run_id="r2")] == ["r2"]
