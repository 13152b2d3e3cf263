"""The job queue reads the state URL exactly as fim's store does (attack-47 F5).

fim's store parses `state:` with SQLAlchemy; the queue (procrastinate's pool, the
worker's outage probe) handed the URL text to libpq, which reads some forms otherwise:
Azure's `user@server:pw@host` login was user `user` at host `server`, a raw `/` in a
password (base64) ended the host, a stray `%` was refused. Each passed `fim worker`'s
start check, then the queue's pool failed for 30 s and ended in a PoolTimeout traceback.
Now the queue's connection info is built from the store's own parse, and a pool that
cannot open at start is one line naming the store."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

import pytest
from psycopg.conninfo import conninfo_to_dict
from sqlalchemy.engine import make_url

from fim.errors import RunError
from fim.workflows.queue_rows import postgres_dsn


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        (  # Azure Database for PostgreSQL: the login is user@server
            "postgresql://fim@corp:Hunter2Secret@db.example.com:6432/app",
            {
                "user": "fim@corp",
                "password": "Hunter2Secret",
                "host": "db.example.com",
                "port": "6432",
                "dbname": "app",
            },
        ),
        (  # a base64 password: its raw `/`
            "postgresql://fim:Hunter/2Secret@db/x",
            {"user": "fim", "password": "Hunter/2Secret", "host": "db", "dbname": "x"},
        ),
        (  # a `%` that is no percent-encoding: libpq refused the whole URL
            "postgres://fim:Xy%9zSecret@db/x",
            {"user": "fim", "password": "Xy%9zSecret", "host": "db", "dbname": "x"},
        ),
        (  # percent-encoding is decoded once, as by the store
            "postgresql+psycopg://fim:Hunter%402Secret@[::1]:5432/x?sslmode=require",
            {
                "user": "fim",
                "password": "Hunter@2Secret",
                "host": "::1",
                "port": "5432",
                "dbname": "x",
                "sslmode": "require",
            },
        ),
        (  # the store's multi-host form
            "postgresql://fim@/x?host=h1:5432&host=h2:5433",
            {"user": "fim", "host": "h1,h2", "port": "5432,5433", "dbname": "x"},
        ),
        (  # a space in a password or an option survives libpq's key=value quoting
            "postgresql://fim:a%20b@db/x?options=-c%20statement_timeout%3D5s",
            {
                "user": "fim",
                "password": "a b",
                "host": "db",
                "dbname": "x",
                "options": "-c statement_timeout=5s",
            },
        ),
    ],
)
def test_the_queue_connects_with_what_the_store_reads(url: str, expected: dict[str, str]) -> None:
    assert conninfo_to_dict(postgres_dsn(url)) == expected
    store = make_url(url.replace("postgres://", "postgresql://", 1))
    if store.password is not None:
        assert expected["password"] == store.password


def test_a_url_the_store_cannot_read_is_one_line_without_its_password() -> None:
    with pytest.raises(RunError) as refused:
        postgres_dsn("postgresql://fim:Hunter2Secret@db:notaport/x")
    assert refused.value.message == (
        "state store postgresql://fim:***@db:notaport/x is no URL: ValueError"
    )
    with pytest.raises(RunError, match="need a PostgreSQL state store"):
        postgres_dsn("sqlite:///.fim/state.db")


def test_an_azure_login_with_a_slash_and_a_percent_in_its_password_runs_the_queue(
    pg_database: Any,
) -> None:
    """A real role named `user@server` (the test server trusts it: libpq never sends the
    password, whose `/` and `%` only have to be read right)."""
    import psycopg

    db = pg_database("")
    role = f"fim_q_{uuid.uuid4().hex[:6]}@corp"
    with psycopg.connect(db.admin_url, autocommit=True) as conn:
        conn.execute(f'CREATE ROLE "{role}" LOGIN')
        conn.execute(f'GRANT ALL ON SCHEMA public TO "{role}"')
    try:
        base = make_url(db.admin_url)
        url = f"postgresql://{role}:Hu/nt%er2@{base.host}:{base.port}/{db.name}"
        assert asyncio.run(_queue_user(url)) == role
    finally:
        with psycopg.connect(db.admin_url, autocommit=True) as conn:
            conn.execute(f'DROP OWNED BY "{role}"')
            conn.execute(f'DROP ROLE "{role}"')


async def _queue_user(url: str) -> str:
    """Who the queue's pool connects as, and the worker's outage probe connects at all."""
    from fim.workflows.durable import make_app
    from fim.workflows.worker_store import postgres_probe

    await postgres_probe(postgres_dsn(url))()
    app = make_app(url)
    async with app.open_async():
        row = await app.connector.execute_query_one_async("SELECT current_user AS who")
    return str(row["who"])


def test_a_queue_pool_that_cannot_open_at_start_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The store's check passed, then the pool's first connections failed: procrastinate's
    `open_async` waits 30 s and raises PoolTimeout, which ended `fim worker` in a
    traceback outside its one-line handling."""
    import psycopg_pool

    from fim.commands import worker as command
    from fim.store import health
    from fim.store.engine import Database

    url = "postgresql://fim@corp:Hunter2Secret@db.invalid/app"
    monkeypatch.setattr(health, "check_at_start", lambda state, root: Database(state, root))

    class App:
        def open_async(self) -> Any:
            raise psycopg_pool.PoolTimeout("pool initialization incomplete after 30.0 sec")

    opened = command._store_at_start(url, tmp_path)
    with pytest.raises(RunError) as failed:
        asyncio.run(opened(App()))
    assert failed.value.message == (
        "state store postgresql+psycopg://fim@corp:***@db.invalid/app: job queue: "
        "pool initialization incomplete after 30.0 sec"
    )
