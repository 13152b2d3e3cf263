"""A state store that cannot serve fails at start in one line, and `fim store migrate` makes
every table fim can need ahead of a deploy (newcomer7 #2, #3).

The deploying team's setup: the tables' owner runs `fim store migrate` once; the
application's role has only DML (PostgreSQL 15 gives no one CREATE on `public`). Then no
run, and no fim.yaml change (a daily budget added), needs CREATE; and a wrong URL or a
role without grants stops `fim serve` / `fim worker` at start, not every run after it.
"""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import psycopg
import pytest
from typer.testing import CliRunner

from fim.cli import app
from fim.errors import RunError
from fim.store import Store, holds
from fim.store.health import open_or_fail, store_failure

ROOT = Path(__file__).resolve().parents[2]


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def project(root: Path, state: str) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "fim.yaml").write_text(
        f"name: p\nmodels: {{general: openai/gpt-4o-mini}}\nstate: {state!r}\n"
    )
    (root / "agents").mkdir(exist_ok=True)
    (root / "agents" / "a.yaml").write_text("name: a\nmodel: general\n")
    return root


def fim(*args: str) -> subprocess.CompletedProcess[str]:
    """The real command line: its exit code and exactly what it prints."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OPENAI_API_KEY": "sk-unused"}
    return subprocess.run(
        [sys.executable, "-c", "from fim.cli import main; main()", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )


def dml_role(db: object) -> str:
    """The database's second role given only DML on what exists (as the owner)."""
    role = db.reader  # type: ignore[attr-defined]
    with psycopg.connect(db.owner_url, autocommit=True) as conn:  # type: ignore[attr-defined]
        conn.execute(
            f"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO {role}"
        )
        conn.execute(f"GRANT USAGE, SELECT, UPDATE ON ALL SEQUENCES IN SCHEMA public TO {role}")
    return str(db.reader_url)  # type: ignore[attr-defined]


# --------------------------------------------------------------------------- at start


@pytest.mark.parametrize("command", ["serve", "worker"])
def test_serve_and_worker_on_a_store_nobody_listens_on_exit_1_with_one_line(
    tmp_path: Path, command: str
) -> None:
    port = closed_port()
    root = project(tmp_path / "p", f"postgresql://app:s3cret@127.0.0.1:{port}/fim")
    extra = ["--port", str(closed_port())] if command == "serve" else []
    done = fim(command, "-p", str(root), *extra)
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith(
        f"error: state store postgresql+psycopg://app:***@127.0.0.1:{port}/fim: "
    )
    assert "s3cret" not in done.stderr and "Traceback" not in done.stderr
    assert "check the host and port of `state:`" in lines[0]


def test_validate_live_opens_the_state_store(tmp_path: Path) -> None:
    root = project(tmp_path / "p", f"postgresql://app@127.0.0.1:{closed_port()}/fim")
    result = CliRunner().invoke(app, ["validate", "-p", str(root), "--live"])
    assert result.exit_code == 1
    assert "fim.yaml:1:1: state store postgresql+psycopg://app@127.0.0.1:" in result.output
    assert "Connection refused" in result.output


def test_a_role_without_create_on_a_fresh_database_fails_at_start_with_the_grant(
    pg_database: Callable[[str], object],
) -> None:
    db = pg_database("")
    store = Store(db.reader_url)  # type: ignore[attr-defined]
    try:
        with pytest.raises(RunError) as caught:
            open_or_fail(store)
    finally:
        store.close()
    role = db.reader  # type: ignore[attr-defined]
    assert "permission denied for schema public" in caught.value.message
    assert caught.value.message.startswith("state store postgresql+psycopg://")
    assert f"GRANT CREATE ON SCHEMA public TO {role}" in (caught.value.hint or "")
    assert "fim store migrate" in (caught.value.hint or "")


def test_a_role_without_dml_on_migrated_tables_fails_at_start_not_at_its_first_run(
    pg_database: Callable[[str], object],
) -> None:
    db = pg_database("")
    assert CliRunner().invoke(app, ["store", "migrate", "--state", db.owner_url]).exit_code == 0  # type: ignore[attr-defined]
    store = Store(db.reader_url)  # type: ignore[attr-defined]
    try:
        with pytest.raises(RunError) as caught:
            open_or_fail(store)  # migrating reads only: it is reading the tables that fails
    finally:
        store.close()
    assert "permission denied for table fim_schema_version" in caught.value.message
    assert "GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES" in (caught.value.hint or "")


# --------------------------------------------------------------------------- fim store migrate


def test_migrate_as_owner_then_a_dml_only_role_runs_and_a_budget_added_later_needs_no_create(
    pg_database: Callable[[str], object],
) -> None:
    db = pg_database("")
    owner, runner = db.owner_url, CliRunner()  # type: ignore[attr-defined]

    before = runner.invoke(app, ["store", "migrate", "--state", owner, "--check"])
    assert before.exit_code == 1
    assert "missing: fim's tables (schema version 0 of" in before.output
    assert "missing: the job queue's schema" in before.output

    done = runner.invoke(app, ["store", "migrate", "--state", owner])
    assert done.exit_code == 0, done.output
    assert (
        "migrated: fim schema version" in done.output and "job queue (procrastinate" in done.output
    )
    assert runner.invoke(app, ["store", "migrate", "--state", owner, "--check"]).exit_code == 0

    # the app role before its grants: listed, exit 1, nothing changed
    ungranted = runner.invoke(app, ["store", "migrate", "--state", db.reader_url, "--check"])  # type: ignore[attr-defined]
    assert ungranted.exit_code == 1
    assert (
        "the role may not: SELECT, INSERT, UPDATE, DELETE on fim_budget_holds" in ungranted.output
    )
    assert "the role may not: SELECT, INSERT, UPDATE, DELETE on fim_workers" in ungranted.output

    app_url = dml_role(db)
    checked = runner.invoke(app, ["store", "migrate", "--state", app_url, "--check"])
    assert checked.exit_code == 0, checked.output
    store = Store(app_url)
    try:
        open_or_fail(store)  # what `fim serve` and `fim worker` do at start

        async def hold() -> str:  # a daily limit's first call on PostgreSQL: a budget hold
            return await holds.take(
                store,
                "call-1",
                [("day", "2026-12-07", None, None)],
                lambda sums: ("ok", (10, 0.0)),
                60.0,
            )

        assert asyncio.run(hold()) == "ok"  # the table was there: no CREATE by this role
    finally:
        store.close()


def test_migrate_as_a_role_that_may_not_create_fails_in_one_line(
    pg_database: Callable[[str], object],
) -> None:
    db = pg_database("")
    result = CliRunner().invoke(app, ["store", "migrate", "--state", db.reader_url])  # type: ignore[attr-defined]
    assert result.exit_code == 1
    lines = result.output.strip().splitlines()
    assert len(lines) == 1
    assert "permission denied for schema public" in lines[0] and "GRANT CREATE" in lines[0]


def test_migrate_on_sqlite_makes_the_file_and_check_then_passes(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/state/fim.db"
    runner = CliRunner()
    assert runner.invoke(app, ["store", "migrate", "--state", url, "--check"]).exit_code == 1
    assert runner.invoke(app, ["store", "migrate", "--state", url]).exit_code == 0
    result = runner.invoke(app, ["store", "migrate", "--state", url, "--check"])
    assert result.exit_code == 0 and "has every table fim needs" in result.output


def test_a_store_failure_is_told_from_a_wrong_statement() -> None:
    import sqlalchemy

    engine = sqlalchemy.create_engine(f"postgresql+psycopg://x@127.0.0.1:{closed_port()}/x")
    with pytest.raises(sqlalchemy.exc.OperationalError) as refused:
        engine.connect()
    assert "Connection refused" in (store_failure(refused.value) or "")
    assert store_failure(ValueError("no")) is None
    assert store_failure(sqlalchemy.exc.ProgrammingError("SELEC", {}, Exception("syntax"))) is None
