"""Read-only in depth on a real PostgreSQL server, tried as an attacker would.

The database is owned by a non-superuser role and read through a role that can only
SELECT (`pg_database` in conftest). Every escape attempt goes through the connector's
full path (`Database.query`: statement, catalog and connection layers); afterwards nothing
changed: the data (checksum), locks (`pg_locks`), other sessions (a sentinel connection),
files (a world-writable directory the server could write to), and the pool (a fresh
checkout has no locks and default settings). Also here: the role check on first connect
and in `fim validate --live`, and the SQL limits (timeouts, byte caps while fetching) on
both backends. Skipped with a reason when FIM_TEST_POSTGRES_URL is unset; CI sets it.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import sqlite3
import subprocess
import sys
import tempfile
import threading
import tracemalloc
import uuid
from concurrent.futures import ThreadPoolExecutor
from decimal import Decimal
from pathlib import Path

import pytest

from fim.config.schema import DatabaseConnector
from fim.connectors.database import Database
from fim.connectors.database.rows import Truncated
from fim.connectors.readonly import decide

SEED = """
CREATE SCHEMA shop;
CREATE TABLE shop.orders (id integer PRIMARY KEY, note text);
INSERT INTO shop.orders SELECT g, 'order ' || g FROM generate_series(1, 5) g;
CREATE SEQUENCE shop.order_seq;
CREATE FUNCTION shop.owner_volatile() RETURNS bigint LANGUAGE sql
  AS 'SELECT pg_advisory_lock(4242); SELECT 1::bigint';
CREATE FUNCTION shop.owner_stable(i integer) RETURNS integer LANGUAGE sql STABLE
  AS 'SELECT i + 1';
CREATE FUNCTION shop.lock_op(a integer, b integer) RETURNS boolean LANGUAGE sql
  AS 'SELECT pg_try_advisory_lock(a, b)';
CREATE OPERATOR shop.### (LEFTARG = integer, RIGHTARG = integer, FUNCTION = shop.lock_op);
CREATE DOMAIN shop.locked AS integer CHECK (pg_try_advisory_lock(VALUE));
CREATE PROCEDURE shop.evil_proc() LANGUAGE sql AS 'DELETE FROM shop.orders';
CREATE VIEW shop.recent AS SELECT * FROM shop.orders WHERE id > 2;
"""


@pytest.fixture(scope="module")
def pg(pg_database):
    db = pg_database(SEED)
    import psycopg

    with psycopg.connect(db.owner_url, autocommit=True) as conn:
        conn.execute(f"GRANT USAGE ON SCHEMA shop TO {db.reader}")
        conn.execute(f"GRANT SELECT ON ALL TABLES IN SCHEMA shop TO {db.reader}")
    with psycopg.connect(db.admin_url, autocommit=True) as conn:
        # untrusted extensions, installed the way an attacker would most like them:
        # dblink in pg_catalog, so only the extension rule (and the name) can stop it
        for ext in ("dblink SCHEMA pg_catalog", "pg_trgm SCHEMA pg_catalog"):
            # contrib missing: the name and schema rules still apply
            with contextlib.suppress(psycopg.Error):
                conn.execute(f"CREATE EXTENSION IF NOT EXISTS {ext}")
    return db


@pytest.fixture(scope="module")
def outdir():
    """A directory the server's OS user could write to, to prove it wrote nothing."""
    path = Path(tempfile.mkdtemp(prefix="fim-pgro-"))
    path.chmod(0o777)
    yield path
    for child in path.iterdir():
        child.unlink()
    path.rmdir()


def connector(url: str, **fields) -> Database:
    decl = DatabaseConnector.model_validate({"kind": "database", "url": url, **fields})
    return Database("shop", decl, Path("."))


def checksum(url: str) -> str:
    import psycopg

    with psycopg.connect(url) as conn:
        rows = conn.execute("SELECT * FROM shop.orders ORDER BY id").fetchall()
        rows += conn.execute("SELECT last_value, is_called FROM shop.order_seq").fetchall()
        rows += conn.execute(
            "SELECT n.nspname, c.relname, c.relkind FROM pg_class c JOIN pg_namespace n "
            "ON n.oid = c.relnamespace WHERE n.nspname NOT LIKE 'pg\\_%' ORDER BY 1, 2"
        ).fetchall()
        rows += conn.execute("SELECT count(*) FROM pg_largeobject_metadata").fetchall()
    return hashlib.sha256(repr(rows).encode()).hexdigest()


def advisory_locks(admin_url: str) -> int:
    import psycopg

    with psycopg.connect(admin_url) as conn:
        return conn.execute(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' "
            "AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
        ).fetchone()[0]


# ------------------------------------------------------------------ the escape corpus

REFUSED = [
    # the Unicode-escaped identifiers, and their relatives
    'SELECT U&"pg_\\0061dvisory_lock"(74211)',
    "SELECT U&\"pg_!0061dvisory_lock\" UESCAPE '!' (74211)",
    'SELECT U&"pg_ad\\+000076isory_lock"(74212)',
    'SELECT U&"pg_terminate_backen\\0064"({pid})',
    "SELECT U&\"\\0064blink_exec\"('{dsn}', 'DELETE FROM shop.orders')",
    # quoting, case, schema qualification, whitespace and comments between the parts
    "SELECT PG_ADVISORY_LOCK(74213)",
    'SELECT "pg_advisory_lock"(74214)',
    'SELECT pg_catalog."pg_advisory_xact_lock"(74215)',
    "SELECT pg_catalog . pg_try_advisory_lock /* x */ (74216)",
    "SELECT pg_advisory_lock--\n(74217)",
    "SELECT * FROM pg_catalog.pg_advisory_lock(74218)",
    # other sessions, server files and programs
    "SELECT pg_terminate_backend({pid})",
    'SELECT "pg_cancel_backend"({pid})',
    "SELECT pg_read_file('/etc/hostname')",
    "SELECT pg_read_binary_file('/etc/hostname')",
    "SELECT pg_ls_dir('.')",
    "SELECT lo_import('/etc/hostname')",
    "SELECT lo_from_bytea(0, 'x')",
    "COPY (SELECT 1) TO PROGRAM 'touch {out}/program'",
    "COPY shop.orders TO '{out}/dump.csv'",
    # SQL hidden in a string
    "SELECT ts_stat('WITH d AS (DELETE FROM shop.orders RETURNING note) "
    "SELECT to_tsvector(note) FROM d')",
    "SELECT ts_rewrite('a'::tsquery, 'SELECT ''a''::tsquery, ''b''::tsquery')",
    "SELECT query_to_xml('DELETE FROM shop.orders RETURNING *', true, true, '')",
    "SELECT query_to_xml_and_xmlschema('SELECT 1', true, true, '')",
    "SELECT cursor_to_xml('c', 1, true, true, '')",
    "SELECT table_to_xml('shop.orders', true, true, '')",
    "SELECT dblink_exec('{dsn}', 'DELETE FROM shop.orders')",
    "SELECT * FROM dblink('{dsn}', 'DELETE FROM shop.orders RETURNING id') AS t(id int)",
    # settings, sequences, sleeping, notifications, server control
    "SELECT set_config('statement_timeout', '0', false)",
    "SELECT nextval('shop.order_seq')",
    "SELECT pg_catalog.setval('shop.order_seq', 100)",
    "SELECT pg_sleep(30)",
    "SELECT pg_notify('chan', 'x')",
    "SELECT pg_reload_conf()",
    "SELECT pg_stat_reset()",
    "SELECT txid_current()",
    # locks and writes
    "SELECT * FROM shop.orders FOR UPDATE",
    "SELECT * FROM shop.orders FOR SHARE NOWAIT",
    "LOCK TABLE shop.orders IN ACCESS EXCLUSIVE MODE",
    "WITH d AS (DELETE FROM shop.orders RETURNING *) SELECT count(*) FROM d",
    "SELECT * INTO shop.stolen FROM shop.orders",
    "CALL shop.evil_proc()",
    "DO $$ BEGIN PERFORM pg_advisory_lock(74219); END $$",
    "SET statement_timeout = 0",
    "SET ROLE {owner}",
    "PREPARE p AS SELECT 1",
    # batches hidden by strings of every kind
    "SELECT 1; DELETE FROM shop.orders",
    "SELECT 1 /* */; SELECT pg_advisory_lock(74220)",
    "SELECT E'\\''; SELECT pg_advisory_lock(74221)",
    "SELECT $$ $$; SELECT pg_advisory_lock(74222)",
    "SELECT U&'\\0027'; SELECT pg_advisory_lock(74223)",
    # the call buried in an expression
    "EXPLAIN ANALYZE SELECT pg_advisory_lock(74224)",
    "SELECT (SELECT pg_advisory_lock(74225))",
    "SELECT ARRAY(SELECT pg_try_advisory_lock(74226))",
    "VALUES (pg_advisory_lock(74227))",
    "SELECT CASE WHEN true THEN pg_advisory_lock(74228) END",
    "SELECT count(*) FILTER (WHERE pg_try_advisory_lock(74229)) FROM shop.orders",
    "SELECT * FROM shop.orders ORDER BY pg_advisory_lock(74230)",
    "SELECT format('%s', pg_advisory_lock(74231))",
    "SELECT 1 WHERE U&'\\0027' = '' OR pg_advisory_lock(74232) IS NULL",
    # the owner's own objects: volatile, stable, an operator, a domain
    "SELECT shop.owner_volatile()",
    "SELECT shop.owner_stable(1)",
    "SELECT 1 OPERATOR(shop.###) 2",
    "SELECT 1::shop.locked",
    "SELECT similarity('a', 'b')",
]
HARMLESS = [
    # strings, comments and aliases that only look dangerous
    "SELECT $a$ ; DELETE FROM shop.orders; $a$",
    "SELECT 'x' -- '; SELECT pg_advisory_lock(1)",
    'SELECT 1 AS "pg_advisory_lock"',
    "SELECT E'\\x27; DELETE FROM shop.orders --'",
    "SELECT note FROM shop.recent WHERE note LIKE '%; DROP TABLE shop.orders%'",
    "SELECT xpath('/x/text()', xmlparse(document '<!DOCTYPE x [<!ENTITY e SYSTEM "
    '"file:///etc/passwd">]><x>&e;</x>\'))',
]


async def test_escape_attempts_are_refused_and_change_nothing(pg, outdir):
    import psycopg

    sentinel = psycopg.connect(pg.owner_url, autocommit=True)
    pid = sentinel.info.backend_pid
    db = connector(pg.reader_url)
    before = checksum(pg.owner_url)
    fill = {"pid": str(pid), "out": str(outdir), "owner": pg.owner}
    fill["dsn"] = f"dbname={pg.name} user={pg.owner} host=127.0.0.1"
    corpus = [sql.format(**fill) for sql in REFUSED]
    assert len(corpus) >= 40
    not_refused = []
    for sql in corpus:
        result = await db.query(sql)
        if not (result.is_error and "query refused" in result.content):
            not_refused.append((sql, result.content))
    for sql in HARMLESS:
        result = await db.query(sql)
        assert "query refused" not in result.content, (sql, result.content)
    assert not_refused == []
    # nothing changed: data, locks, other sessions, files
    assert checksum(pg.owner_url) == before
    assert advisory_locks(pg.admin_url) == 0
    assert sentinel.execute("SELECT pg_backend_pid()").fetchone()[0] == pid
    sentinel.close()
    assert list(outdir.iterdir()) == []
    # and the connector still reads
    assert "(5 rows)" in (await db.query("SELECT id FROM shop.orders")).content
    db.dispose()


def test_the_hook_sees_the_same_decision_without_a_connection():
    """`readonly_guard` and the hook view use `decide` (memoised), so the statement layer
    already refuses the named side effects; the catalog layer adds the rest at run time."""
    first = decide('SELECT U&"pg_\\0061dvisory_lock"(1)', "postgres")
    assert not first.allowed and "pg_advisory_lock" in (first.refusal or "")
    assert decide('SELECT U&"pg_\\0061dvisory_lock"(1)', "postgres") is first
    placeholders = decide("SELECT * FROM t WHERE a = :a AND b = :b AND c = :a", "postgres")
    assert placeholders.parsed is not None
    assert placeholders.parsed.sql == "SELECT * FROM t WHERE a = $1 AND b = $2 AND c = $1"
    assert placeholders.parsed.params == ("a", "b")


async def test_the_pool_is_clean_after_a_connection_is_returned(pg):
    """Below every guard (`execute_sync` without a parsed statement), a session takes an
    advisory lock and prepares a statement; `DISCARD ALL` on return drops both, and the
    session defaults (timeouts, read-only) survive it."""
    db = connector(pg.reader_url, statement_timeout=7)
    taken = db.execute_sync("SELECT pg_advisory_lock(99), pg_backend_pid()")
    db.execute_sync("PREPARE fim_left_over AS SELECT 1")
    pid = taken.rows[0][1]
    with db.engine().connect() as conn:
        raw = conn.connection.driver_connection
        row = raw.execute(
            "SELECT pg_backend_pid(), (SELECT count(*) FROM pg_locks WHERE locktype = "
            "'advisory' AND pid = pg_backend_pid()), (SELECT count(*) FROM "
            "pg_prepared_statements WHERE name = 'fim_left_over'), "
            "current_setting('statement_timeout'), current_setting('lock_timeout'), "
            "current_setting('idle_in_transaction_session_timeout'), "
            "current_setting('default_transaction_read_only')"
        ).fetchone()
        conn.rollback()
    db.dispose()
    assert row == (pid, 0, 0, "7s", "5s", "17s", "on")
    assert advisory_locks(pg.admin_url) == 0


@pytest.mark.parametrize("mode", ["read-only", "writable"])
async def test_one_pooled_connection_runs_the_same_statement_again_and_again(pg, mode):
    """psycopg prepares a statement it has run five times; `DISCARD ALL` on return drops
    it on the server, and psycopg must forget it too: a writable connector's sixth
    identical query failed with "prepared statement _pg3_0 does not exist". Twelve run on
    one connection (the same backend), each answering."""
    url, read_only = (pg.reader_url, True) if mode == "read-only" else (pg.owner_url, False)
    db = connector(url, read_only=read_only)
    pids = {db.execute_sync("SELECT pg_backend_pid()").rows[0][0] for _ in range(12)}
    db.dispose()
    assert len(pids) == 1


async def test_ordinary_reads_pass_the_catalog(pg):
    db = connector(pg.reader_url)
    reads = [
        "SELECT id, upper(note), length(note) || '!' FROM shop.orders WHERE note ILIKE "
        "'order%' AND id BETWEEN 1 AND 3 ORDER BY id DESC LIMIT 2",
        "SELECT count(*) FILTER (WHERE id > 1), string_agg(note, ',' ORDER BY id), "
        "avg(id)::numeric(10, 2) FROM shop.orders",
        "SELECT date_trunc('month', now()) - interval '1 day', extract(year FROM "
        "current_date), to_char(now(), 'YYYY'), now() AT TIME ZONE 'UTC'",
        "SELECT id, row_number() OVER (ORDER BY id), coalesce(note, '-'), CASE WHEN id > 2 "
        "THEN 'big' END FROM shop.recent",
        "SELECT '{\"a\": 1}'::jsonb ->> 'a', jsonb_build_object('k', 1), random() < 2, "
        "gen_random_uuid() IS NOT NULL, pg_size_pretty(pg_total_relation_size('shop.orders'))",
        "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 3) "
        "SELECT x FROM c WHERE x = ANY(ARRAY[1, 2]) AND x IN (SELECT id FROM shop.orders)",
        "SELECT table_name FROM information_schema.tables WHERE table_schema = 'shop'",
        "SELECT * FROM shop.orders WHERE id = :id",
        "SHOW statement_timeout",
        "EXPLAIN SELECT * FROM shop.orders",
    ]
    failed = []
    for sql in reads:
        result = await db.query(sql, {"id": 2})
        if result.is_error:
            failed.append((sql, result.content))
    db.dispose()
    assert failed == []


# ------------------------------------------------------------------ the role check

WRITE_ROLE_SETUPS = {
    "superuser": (None, "is a superuser"),
    "owner": ("owner", "can write to"),
    "signal": ("GRANT pg_signal_backend TO {role}", "is a member of pg_signal_backend"),
    "writer": ("GRANT pg_write_all_data TO {role}", "is a member of pg_write_all_data"),
    "create": ("GRANT CREATE ON SCHEMA shop TO {role}", "has CREATE on schema shop"),
    "insert": ("GRANT INSERT ON shop.orders TO {role}", "can write to shop.orders"),
    "sequence": ("GRANT USAGE ON SEQUENCE shop.order_seq TO {role}", "shop.order_seq"),
    # privileges a NOINHERIT membership does not pass on are one SET ROLE away (attack-49 F1)
    "noinherit-superuser": (
        "ALTER ROLE {role} NOINHERIT; GRANT {admin} TO {role}",
        "(SET ROLE), a superuser",
    ),
    "noinherit-writer": (
        "ALTER ROLE {role} NOINHERIT; GRANT {owner} TO {role}",
        "can write to",
    ),
}


@pytest.fixture(scope="module")
def write_roles(pg):
    """One login role per way of being able to write, each also granted what a reader has."""
    import psycopg

    urls: dict[str, str] = {"superuser": pg.admin_url, "owner": pg.owner_url}
    made: list[str] = []
    with psycopg.connect(pg.admin_url, autocommit=True) as conn:
        for case, (grant, _) in WRITE_ROLE_SETUPS.items():
            if grant is None or grant == "owner":
                continue
            role = f"fim_w_{uuid.uuid4().hex[:8]}"
            conn.execute(f"CREATE ROLE {role} LOGIN IN ROLE {pg.reader}")
            made.append(role)
            for statement in grant.format(role=role, admin=conn.info.user, owner=pg.owner).split(
                ";"
            ):
                conn.execute(statement)
            urls[case] = pg.reader_url.replace(f"{pg.reader}@", f"{role}@")
    yield urls
    with psycopg.connect(pg.admin_url, autocommit=True) as conn:
        for role in made:
            conn.execute(f"DROP OWNED BY {role}")
            conn.execute(f"DROP ROLE {role}")


@pytest.mark.parametrize("case", sorted(WRITE_ROLE_SETUPS))
async def test_a_role_that_can_write_is_refused_on_first_connect(write_roles, case):
    db = connector(write_roles[case])
    result = await db.query("SELECT 1")
    tables = await db.list_tables()
    db.dispose()
    assert result.is_error and tables.is_error
    line = result.content
    assert WRITE_ROLE_SETUPS[case][1] in line
    assert "\n" not in line
    assert "CREATE ROLE" in line and "GRANT SELECT ON ALL TABLES" in line


def test_validate_live_refuses_a_read_only_connector_with_a_writing_role(pg, tmp_path):
    from typer.testing import CliRunner

    from fim.cli import app

    (tmp_path / "fim.yaml").write_text("name: pgro\n")
    (tmp_path / "connectors").mkdir()
    (tmp_path / "connectors" / "owned.yaml").write_text(
        f"kind: database\nurl: {pg.owner_url}\nread_only: true\n"
    )
    (tmp_path / "connectors" / "reader.yaml").write_text(
        f"kind: database\nurl: {pg.reader_url}\nread_only: true\n"
    )
    result = CliRunner().invoke(app, ["validate", "--live", "--project", str(tmp_path)])
    assert result.exit_code == 1, result.output
    problems = [line for line in result.output.splitlines() if "database '" in line]
    assert len(problems) == 1
    assert problems[0].startswith("connectors/owned.yaml:")
    assert f"connects as role '{pg.owner}'" in problems[0] and "CREATE ROLE" in problems[0]


# ------------------------------------------------------------------ SQL limits


async def test_postgres_values_are_cut_before_python_copies_them(pg):
    """3 rows of 10 MB: each value is sliced in libpq's buffer, so Python never holds
    one (tracemalloc sees every Python allocation; a copy would be >= 10 MB)."""
    db = connector(pg.reader_url, max_value_bytes=1000)
    tracemalloc.start()
    try:
        result = await db.run("SELECT repeat('x', 10000000) AS v FROM generate_series(1, 3)")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    db.dispose()
    assert len(result.rows) == 3
    assert all(isinstance(v, Truncated) and v.size == 10_000_000 for (v,) in result.rows)
    assert all(len(v) < 1100 for (v,) in result.rows)
    assert result.values_cut == 3
    assert peak < 5_000_000


async def test_postgres_stops_reading_at_the_result_cap(pg):
    db = connector(pg.reader_url, max_result_bytes=1_000_000, max_rows=10_000)
    result = await db.query("SELECT repeat('y', 100000) FROM generate_series(1, 100000)")
    after = await db.query("SELECT count(*) FROM shop.orders")
    db.dispose()
    assert not result.is_error
    assert "result truncated at 1000000 bytes" in result.content
    assert result.metadata["truncated_at"] == 1_000_000
    assert result.metadata["rows"] <= 10
    assert "(1 row)" in after.content  # the cancelled stream left the pool usable


async def test_postgres_withholds_a_row_too_big_to_send(pg):
    """libpq reads a whole row before any loader can cut a value (two 400 MB values were
    1.6 GB in fim): PostgreSQL itself measures each row of a SELECT and sends one over 4 x
    max_result_bytes as NULLs, so none of its bytes reach fim. The loader never saw the
    value (nothing was cut); the rows before it are kept and the model is told why."""
    db = connector(pg.reader_url, max_value_bytes=1000, max_result_bytes=250_000)
    sql = (
        "SELECT id, CASE WHEN id = 3 THEN repeat('x', 600000) || repeat('y', 600000) "
        "ELSE note END AS note FROM shop.orders ORDER BY id"
    )
    result = await db.run(sql)
    shown = await db.query(sql)
    db.dispose()
    assert result.rows == [(1, "order 1"), (2, "order 2")]
    assert result.row_too_large is not None and result.row_too_large > 1_200_000
    assert result.values_cut == 0
    assert "stopped at a row of" in shown.content
    assert "over the 1000000 bytes one row may have" in shown.content
    assert shown.metadata["row_too_large"] == result.row_too_large


async def test_what_postgres_sends_whole_is_read_by_a_worker_not_by_fim(pg):
    """What PostgreSQL sends whole, libpq reads whole: an error message quoting a 300 MB
    value the model built (`repeat(...)::int`) took fim's process to 2.3 GB (120 MB here,
    about 1 GB). The statement
    runs in a worker process whose address space is capped, so fim's own memory does not
    move, only the head of the message comes back, and the next statement runs."""
    import resource

    db = connector(pg.reader_url)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    bomb = await db.query("SELECT repeat('x', 120000000)::int AS n")
    grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    after = await db.query("SELECT count(*) AS n FROM shop.orders")
    db.dispose()
    assert bomb.is_error and len(bomb.content) < 1_000, bomb.content[:300]
    assert grown < 100 * 1024  # KiB
    assert after.content == "n\n5\n(1 row)"


async def test_the_worker_connects_with_libpqs_environment(pg, monkeypatch):
    """A statement's worker process starts with an empty environment (no API keys within
    its reach), but libpq's own variables are fim's: a deployment's `PGPASSWORD`,
    `PGSSLMODE` or, here, `PGAPPNAME` reach the connection, and a changed one is used."""
    db = connector(pg.reader_url)
    sql = "SELECT current_setting('application_name') AS app"
    monkeypatch.setenv("PGAPPNAME", "fim-env-one")
    first = await db.run(sql)
    monkeypatch.setenv("PGAPPNAME", "fim-env-two")
    second = await db.run(sql)
    db.dispose()
    assert (first.rows, second.rows) == ([("fim-env-one",)], [("fim-env-two",)])


async def test_a_cancelled_statement_does_not_run_on_in_the_database(pg):
    """Cancelling a run kills the statement's worker at once; PostgreSQL notices its client
    is gone within a second (`client_connection_check_interval`) instead of running the
    query on until `statement_timeout`, so a tenant cancelling and restarting cannot pile up
    backends up to the server's `max_connections`."""
    import psycopg

    db = connector(pg.reader_url, statement_timeout=120)
    marker = "fim_cancel_probe"
    sql = f"SELECT count(*) AS {marker} FROM generate_series(1, 30000000000)"

    def running() -> int:
        with psycopg.connect(pg.admin_url, autocommit=True) as conn:
            row = conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE state = 'active' "
                "AND query LIKE %s AND pid <> pg_backend_pid()",
                (f"%{marker}%",),
            ).fetchone()
        return int(row[0]) if row else 0

    task = asyncio.create_task(db.run(sql))
    for _ in range(600):
        if running():
            break
        await asyncio.sleep(0.05)
    assert running() == 1
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    for _ in range(600):
        if not running():
            break
        await asyncio.sleep(0.05)
    db.dispose()
    assert running() == 0


async def test_a_nested_value_too_big_to_rebuild_comes_back_as_its_text(pg):
    """A statement's result is pickled back from its worker and rebuilt object by object in
    fim's process: seven JSON values of 249,000 empty lists (1 MB of text) were 1.75M lists
    and held the event loop half a second. A JSON or array value comes back as data within
    10,000 items and 32 levels, as its JSON text past them."""
    db = connector(pg.reader_url)
    result = await db.run(
        "SELECT '{\"a\": [1, 2]}'::json AS small, ARRAY[1, 2] AS arr, "
        "('[' || repeat('[],', 20000) || '[]]')::json AS wide, "
        "(repeat('[', 900) || repeat(']', 900))::jsonb AS deep"
    )
    db.dispose()
    small, arr, wide, deep = result.rows[0]
    assert (small, arr) == ({"a": [1, 2]}, [1, 2])
    assert isinstance(wide, str) and wide.startswith("[[], [], ")
    assert isinstance(deep, str) and deep.startswith("[[[[")


async def test_postgres_selects_keep_their_columns_order_and_types(pg):
    """The row check runs the statement inside fim's own query; what the model asked for
    comes back unchanged: duplicate and quoted names, its order, Python types, and a `;`
    with a comment after it (also when no row comes back and the names are looked up)."""
    db = connector(pg.reader_url)
    result = await db.run(
        'SELECT id AS "N", id * 2 AS "N", note, ARRAY[id] AS a, 1.5::numeric AS x '
        "FROM shop.orders ORDER BY id DESC LIMIT 2; -- newest first"
    )
    empty = await db.query("SELECT id FROM shop.orders WHERE id > 99; -- none")
    db.dispose()
    assert result.columns == ["N", "N", "note", "a", "x"]
    assert result.rows == [
        (5, 10, "order 5", [5], Decimal("1.5")),
        (4, 8, "order 4", [4], Decimal("1.5")),
    ]
    assert empty.content == "id\n(0 rows)"


@pytest.fixture
def sqlite_db(tmp_path):
    path = tmp_path / "limits.db"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY)")
        conn.executemany("INSERT INTO t VALUES (?)", [(i,) for i in range(100)])
    conn.close()
    return f"sqlite:///{path}"


@pytest.mark.parametrize(
    "sql", ["SELECT printf('%.*c', 900000000, 'x')", "SELECT randomblob(900000000)"]
)
async def test_sqlite_cannot_build_a_huge_value_in_one_opcode(sqlite_db, sql):
    """The progress handler never runs inside one opcode; SQLITE_LIMIT_LENGTH makes the
    opcode itself fail as soon as the value would pass 4 x max_result_bytes."""
    db = connector(sqlite_db, statement_timeout=60)
    result = await db.query(sql)
    db.dispose()
    assert result.is_error
    assert "size limit of 32000000 bytes" in result.content


async def test_sqlite_caps_each_value_and_the_whole_result(sqlite_db):
    db = connector(sqlite_db, max_value_bytes=1000, max_result_bytes=50_000, max_rows=1000)
    cut = await db.run("SELECT printf('%.*c', 5000, 'x'), id FROM t LIMIT 3")
    stopped = await db.query("SELECT randomblob(900), printf('%.*c', 4000, 'y') FROM t")
    db.dispose()
    assert cut.values_cut == 3 and all(v.size == 5000 for v, _ in cut.rows)
    assert "result truncated at 50000 bytes" in stopped.content
    assert stopped.metadata["rows"] < 100


async def test_sqlite_rows_are_fetched_and_cut_one_at_a_time(sqlite_db):
    """The driver copies a whole row, every value at full size, before it can be cut: 40
    rows of a 2 MB value read 50 at a time were 80 MB of Python objects at once. Read one
    at a time, Python never holds more than a row or two of them (tracemalloc sees every
    Python allocation, the driver's copies included)."""
    db = connector(sqlite_db, max_value_bytes=1000, max_result_bytes=1_000_000)
    tracemalloc.start()
    try:
        result = await db.run("SELECT zeroblob(2000000) AS v FROM t LIMIT 40")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    db.dispose()
    assert len(result.rows) == 40 and result.values_cut == 40
    assert peak < 3 * 2_000_000


SQLITE_HEAP_CHILD = """
import asyncio, json, sys
from pathlib import Path
from fim.config.schema import DatabaseConnector
from fim.connectors.database import Database, sqlite

sqlite.HEAP_LIMIT = 16 * 2**20
decl = DatabaseConnector(kind="database", url=sys.argv[1])
db = Database("shop", decl, Path("."))
for sql in sys.argv[2:]:
    result = asyncio.run(db.query(sql))
    print(json.dumps([result.is_error, result.content]))
db.dispose()
"""


def test_sqlite_holds_at_most_its_heap_whatever_the_statement(sqlite_db, tmp_path):
    """A value limit does not bound a statement: it holds every column of a row (each
    zeroblob expanded when read), every argument of a call, every row of a sort (which
    spilled GBs to temporary files in seconds). Each needs 30 MB here, and SQLite's own
    heap limit ends it with SQLite's out-of-memory error; the next query runs as usual.
    The heap limit is one per process, so this runs in a child with a 16 MiB one."""
    blob_columns = ", ".join(f"zeroblob(1000000) AS c{i}" for i in range(30))
    blob_arguments = ", ".join(["randomblob(1000000)"] * 30)
    statements = [
        f"SELECT {blob_columns} FROM t LIMIT 1",
        f"SELECT length(max({blob_arguments}))",
        "SELECT randomblob(3000) AS r FROM t a, t b ORDER BY r",
        "SELECT count(*) FROM t",
    ]
    done = subprocess.run(
        [sys.executable, "-c", SQLITE_HEAP_CHILD, sqlite_db, *statements],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "SQLITE_TMPDIR": str(tmp_path)},
    )
    assert done.returncode == 0, done.stderr
    answers = [json.loads(line) for line in done.stdout.splitlines()]
    for is_error, content in answers[:3]:
        assert is_error
        assert "needed more than the 16 MiB SQLite may use" in content
    assert answers[3] == [False, "count(*)\n100\n(1 row)"]


async def test_database_work_has_its_own_threads(sqlite_db):
    """A full default thread pool (other tools' work) does not hold a query back."""
    loop = asyncio.get_running_loop()
    loop.set_default_executor(ThreadPoolExecutor(1))
    gate = threading.Event()
    blocked = loop.run_in_executor(None, gate.wait)
    db = connector(sqlite_db)
    try:
        result = await asyncio.wait_for(db.query("SELECT count(*) FROM t"), 30)
    finally:
        gate.set()
        await blocked
        db.dispose()
    assert "100" in result.content


async def test_a_select_with_no_rows_still_names_its_columns(pg):
    db = connector(pg.reader_url)
    result = await db.query("SELECT id, note FROM shop.orders WHERE id > :n -- none", {"n": 99})
    db.dispose()
    assert result.content == "id | note\n(0 rows)"
