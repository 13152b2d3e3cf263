"""Database connectors against real SQLite files and a real PostgreSQL server.

PostgreSQL runs when FIM_TEST_POSTGRES_URL is set (CI starts one); each test module gets a
throwaway database so the suite never touches anyone else's tables.
"""

from __future__ import annotations

import hashlib
import sqlite3
import tracemalloc
from pathlib import Path
from typing import Any

import pytest

from fim.config.schema import DatabaseConnector
from fim.connectors.database import Database, describe_error
from fim.connectors.database.engine import normalize_url

SEED = """
CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT NOT NULL, email TEXT);
CREATE TABLE orders (
  id INTEGER PRIMARY KEY,
  customer_id INTEGER NOT NULL REFERENCES customers(id),
  amount NUMERIC(10, 2) NOT NULL,
  note TEXT
);
CREATE VIEW big_orders AS SELECT * FROM orders WHERE amount > 50;
INSERT INTO customers VALUES (1, 'Ann', 'ann@example.com'), (2, 'Bob', NULL),
  (3, 'Zoë', 'zoe@example.com');
INSERT INTO orders VALUES (1, 1, 9.50, 'first'), (2, 1, 120.00, NULL), (3, 2, 75.25, 'a|b'),
  (4, 3, 10.00, 'multi
line'), (5, 3, 300.00, NULL);
"""
PG_EXTRA = """
CREATE SEQUENCE order_seq;
CREATE MATERIALIZED VIEW order_totals AS SELECT customer_id, sum(amount) AS total
  FROM orders GROUP BY customer_id;
CREATE FUNCTION evil() RETURNS void LANGUAGE sql AS 'DELETE FROM orders';
CREATE PROCEDURE evil_proc() LANGUAGE sql AS 'DELETE FROM orders';
"""


@pytest.fixture(scope="module")
def pg_db(pg_database):
    """A fresh PostgreSQL database for this module: owned by a non-superuser role, read
    through a role that can only SELECT (what a read-only connector must use)."""
    return pg_database(SEED + PG_EXTRA)


@pytest.fixture(params=["sqlite", "postgres"])
def seeded(request, tmp_path):
    """(connector url, checksum function) of a seeded database of either kind."""
    if request.param == "sqlite":
        path = tmp_path / "shop.db"
        with sqlite3.connect(path) as conn:
            conn.executescript(SEED)
        conn.close()
        return f"sqlite:///{path}", lambda: sqlite_checksum(path)
    pg = request.getfixturevalue("pg_db")
    return pg.reader_url, lambda: pg_checksum(pg.owner_url)


def sqlite_checksum(path: Path) -> str:
    with sqlite3.connect(path) as conn:
        rows = conn.execute("SELECT type, name, sql FROM sqlite_master ORDER BY name").fetchall()
        for table in ("customers", "orders"):
            rows += conn.execute(f"SELECT * FROM {table} ORDER BY id").fetchall()
        rows += conn.execute("PRAGMA user_version").fetchall()
        rows += conn.execute("PRAGMA journal_mode").fetchall()
    conn.close()
    return hashlib.sha256(repr(rows).encode() + path.read_bytes()).hexdigest()


def pg_checksum(url: str) -> str:
    import psycopg

    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT table_name, column_name, data_type FROM information_schema.columns "
            "WHERE table_schema = 'public' ORDER BY 1, 2"
        ).fetchall()
        rows += conn.execute("SELECT relname, relkind FROM pg_class ORDER BY 1").fetchall()
        for table in ("customers", "orders", "order_totals"):
            rows += conn.execute(f"SELECT * FROM {table} ORDER BY 1").fetchall()
        rows += conn.execute("SELECT last_value, is_called FROM order_seq").fetchall()
        rows += conn.execute(
            "SELECT obj_description('orders'::regclass), "
            "current_setting('default_transaction_read_only')"
        ).fetchall()
    return hashlib.sha256(repr(rows).encode()).hexdigest()


def database(url: str, **fields) -> Database:
    decl = DatabaseConnector.model_validate({"kind": "database", "url": url, **fields})
    return Database("shop", decl, Path("."))


@pytest.fixture
def db(seeded):
    url, _ = seeded
    database_ = database(url)
    yield database_
    database_.dispose()


# ------------------------------------------------------------------ reading


async def test_list_tables_includes_views(db):
    result = await db.list_tables()
    assert result.content.startswith(("3 tables: big_orders, customers, orders", "4 tables"))
    assert "customers" in result.content and "orders" in result.content


async def test_describe_shows_columns_types_nullability_and_keys(db):
    text = (await db.describe("orders")).content
    lines = text.splitlines()
    assert lines[0] == "table orders (4 columns)"
    assert lines[1].startswith("- id INTEGER") and "PRIMARY KEY" in lines[1]
    assert lines[2] == "- customer_id INTEGER NOT NULL -> customers.id"
    assert lines[3] == "- amount NUMERIC(10, 2) NOT NULL"
    assert lines[4] == "- note TEXT NULL"


async def test_describe_of_an_unknown_table_lists_the_real_ones(db):
    result = await db.describe("order")
    assert result.is_error
    assert "no table 'order'" in result.content
    assert "customers, orders" in result.content


async def test_declared_schemas_qualify_table_names(seeded):
    url, _ = seeded
    schema = "main" if url.startswith("sqlite") else "public"
    scoped = database(url, schemas=[schema])
    listed = (await scoped.list_tables()).content
    described = (await scoped.describe(f"{schema}.orders")).content
    scoped.dispose()
    assert f"{schema}.customers, {schema}.orders" in listed
    assert described.splitlines()[0] == f"table {schema}.orders (4 columns)"


async def test_query_returns_a_compact_pipe_table_with_bound_parameters(db):
    result = await db.query(
        "SELECT id, note FROM orders WHERE customer_id = :c ORDER BY id", {"c": 3}
    )
    assert result.content == "id | note\n4 | multi\\nline\n5 | NULL\n(2 rows)"


async def test_pipes_in_values_are_escaped(db):
    result = await db.query("SELECT note FROM orders WHERE id = 3")
    assert result.content == "note\na\\|b\n(1 row)"


async def test_max_rows_cuts_and_says_so(seeded):
    url, _ = seeded
    limited = database(url, max_rows=2)
    result = await limited.query("SELECT id FROM orders ORDER BY id")
    limited.dispose()
    assert result.content.splitlines()[:3] == ["id", "1", "2"]
    assert "2 rows shown; more rows exist" in result.content
    assert result.metadata == {"rows": 2, "cut": True}


async def test_the_statement_timeout_stops_long_queries(seeded):
    url, _ = seeded
    slow = database(url, statement_timeout=0.3)
    sql = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c"
    result = await slow.query(sql)
    slow.dispose()
    assert result.is_error
    assert "exceeded the statement timeout of 0.3s" in result.content


async def test_a_bad_query_is_an_observation(db):
    result = await db.query("SELECT nope FROM orders")
    assert result.is_error
    assert result.content.startswith("Error: the query failed:")
    assert "nope" in result.content


# ------------------------------------------------------------------ read-only in depth

COMMON_WRITES = [
    "INSERT INTO customers VALUES (9, 'Eve', 'eve@example.com')",
    "UPDATE customers SET name = 'X'",
    "DELETE FROM orders",
    "DROP TABLE orders",
    "DROP VIEW big_orders",
    "CREATE TABLE evil (id INTEGER)",
    "CREATE INDEX evil_ix ON orders (amount)",
    "CREATE VIEW evil_v AS SELECT 1 AS x",
    "CREATE TEMP TABLE evil_tmp AS SELECT * FROM customers",
    "ALTER TABLE customers ADD COLUMN evil INTEGER",
    "ALTER TABLE orders RENAME TO orders2",
    "SELECT 1; DELETE FROM orders",
    "DELETE FROM orders; SELECT 1",
    "SELECT 1;\nDROP TABLE customers",
    "/* harmless */ DELETE FROM orders",
    "SELECT 1 /* ; DELETE FROM orders */",
    "SELECT 1 -- ; DROP TABLE orders",
    "SELECT * INTO evil FROM customers",
    "INSERT INTO orders SELECT id + 100, customer_id, amount, note FROM orders",
    "UPDATE orders SET amount = 0 WHERE id IN (SELECT id FROM orders)",
    "REPLACE INTO customers VALUES (1, 'x', 'y')",
    "VACUUM",
    "REINDEX",
    "ANALYZE",
    "GRANT SELECT ON customers TO PUBLIC",
    "BEGIN",
    "COMMIT",
    "ROLLBACK",
    "SAVEPOINT s1",
    "TRUNCATE TABLE orders",
]
SQLITE_WRITES = [
    "ATTACH DATABASE '{tmp}/evil.db' AS evil",
    "DETACH DATABASE main",
    "PRAGMA user_version = 42",
    "PRAGMA user_version(42)",
    "PRAGMA journal_mode = WAL",
    "PRAGMA query_only = 0",
    "PRAGMA writable_schema = 1",
    "SELECT load_extension('{tmp}/evil')",
    "SELECT writefile('{tmp}/out.txt', 'x')",
    "INSERT OR REPLACE INTO customers VALUES (1, 'x', 'y')",
    "WITH d AS (SELECT 1) DELETE FROM orders",
]
PG_WRITES = [
    "WITH d AS (DELETE FROM orders RETURNING *) SELECT * FROM d",
    "WITH u AS (UPDATE customers SET name = 'x' RETURNING id) SELECT count(*) FROM u",
    "EXPLAIN ANALYZE DELETE FROM orders",
    "COPY customers TO '{tmp}/dump.csv'",
    "COPY customers FROM '{tmp}/dump.csv'",
    "SELECT pg_terminate_backend(pg_backend_pid())",
    "SELECT set_config('default_transaction_read_only', 'off', false)",
    "SELECT nextval('order_seq')",
    "SELECT setval('order_seq', 100)",
    "SELECT lo_import('/etc/hostname')",
    "SELECT dblink_exec('dbname=x', 'DELETE FROM orders')",
    "SELECT pg_advisory_lock(1)",
    "SELECT evil()",
    "SET default_transaction_read_only = off",
    "SET TRANSACTION READ WRITE",
    "SELECT * FROM orders FOR UPDATE",
    "DO $$ BEGIN DELETE FROM orders; END $$",
    "CALL evil_proc()",
    "LOCK TABLE orders",
    "REFRESH MATERIALIZED VIEW order_totals",
    "COMMENT ON TABLE orders IS 'owned'",
    "PREPARE p AS DELETE FROM orders",
    "CREATE EXTENSION IF NOT EXISTS dblink",
    "NOTIFY chan",
    "DISCARD ALL",
    "CLUSTER orders",
    "CHECKPOINT",
    "SECURITY LABEL ON TABLE orders IS 'x'",
]


def write_corpus(dialect: str | None, tmp: Path) -> list[str]:
    extra = SQLITE_WRITES if dialect == "sqlite" else PG_WRITES
    return [sql.replace("{tmp}", str(tmp)) for sql in COMMON_WRITES + extra]


async def test_every_write_attempt_is_refused_and_the_data_is_unchanged(seeded, tmp_path):
    url, checksum = seeded
    db = database(url)
    before = checksum()
    corpus = write_corpus(db.dialect, tmp_path)
    assert len(corpus) >= 30
    accepted, by_connection = [], []
    for sql in corpus:
        result = await db.query(sql)
        if result.is_error and "query refused" in result.content:
            continue
        if result.is_error and "read-only transaction" in result.content:
            by_connection.append(sql)
            continue
        accepted.append((sql, result.content))
    # The model can still read afterwards: the connection is healthy.
    assert "(3 rows)" in (await db.query("SELECT id FROM customers")).content
    db.dispose()
    # PostgreSQL's own parser reads these as `SELECT 1` plus a comment: they run, harmlessly
    harmless = {"SELECT 1 /* ; DELETE FROM orders */", "SELECT 1 -- ; DROP TABLE orders"}
    assert {sql for sql, _ in accepted} == (set() if db.dialect == "sqlite" else harmless)
    assert all(out.startswith("?column?\n1\n") for _, out in accepted)
    # PostgreSQL: the owner's evil() is not a pg_catalog function, so the catalog layer
    # refuses it before it runs (the read-only transaction would stop its DELETE too)
    assert by_connection == []
    assert checksum() == before
    assert not (tmp_path / "evil.db").exists()


BYPASS_COMMON = [
    "INSERT INTO customers VALUES (9, 'Eve', NULL)",
    "UPDATE customers SET name = 'X'",
    "DELETE FROM orders",
    "DROP TABLE orders",
    "CREATE TABLE evil (id INTEGER)",
    "ALTER TABLE customers ADD COLUMN evil INTEGER",
    "CREATE TEMP TABLE evil_tmp (id INTEGER)",
]
BYPASS_SQLITE = [
    "PRAGMA user_version = 42",
    "PRAGMA query_only = 0",
    "SELECT writefile('{tmp}/out.txt', 'x')",
    "ATTACH DATABASE '{tmp}/evil.db' AS evil",
    "SELECT load_extension('{tmp}/evil')",
    "INSERT OR REPLACE INTO customers VALUES (1, 'x', 'y')",
]
BYPASS_PG = [
    "WITH d AS (DELETE FROM orders RETURNING *) SELECT * FROM d",
    "SET TRANSACTION READ WRITE",
    "SET TRANSACTION READ WRITE; DELETE FROM orders",
    "COMMIT; SET default_transaction_read_only = off; DELETE FROM orders",
    "SELECT nextval('order_seq')",
    "SELECT evil()",
    "CALL evil_proc()",
    "COPY customers TO '{tmp}/dump.csv'",
    "REFRESH MATERIALIZED VIEW order_totals",
    "SELECT * FROM orders FOR UPDATE",
]


async def test_writes_that_bypass_the_parser_are_refused_by_the_connection(seeded, tmp_path):
    """Defence in depth: the executor below the guard, fed writes directly, cannot write."""
    import sqlalchemy.exc

    url, checksum = seeded
    db = database(url)
    before = checksum()
    extra = BYPASS_SQLITE if db.dialect == "sqlite" else BYPASS_PG
    executed = []
    for sql in BYPASS_COMMON + [s.replace("{tmp}", str(tmp_path)) for s in extra]:
        try:
            db.execute_sync(sql)
        except (sqlalchemy.exc.DBAPIError, sqlite3.Error):  # SQLite runs on sqlite3 itself
            continue
        executed.append(sql)
    assert executed == []
    assert "(5 rows)" in (await db.query("SELECT id FROM orders")).content
    db.dispose()
    assert checksum() == before
    assert not (tmp_path / "evil.db").exists() and not (tmp_path / "dump.csv").exists()


async def test_session_settings_changed_below_the_guard_do_not_outlive_the_query(pg_db):
    """PostgreSQL: SET is transactional, and every query's transaction is rolled back."""
    import sqlalchemy.exc

    db = database(pg_db.reader_url)
    before = pg_checksum(pg_db.owner_url)
    db.execute_sync("SET SESSION CHARACTERISTICS AS TRANSACTION READ WRITE")
    db.execute_sync("SET default_transaction_read_only = off")
    with pytest.raises(sqlalchemy.exc.DBAPIError, match=r"read-only transaction|permission"):
        db.execute_sync("DELETE FROM orders")
    db.dispose()
    assert pg_checksum(pg_db.owner_url) == before


async def test_a_writable_database_commits_writes(tmp_path):
    path = tmp_path / "rw.db"
    with sqlite3.connect(path) as conn:
        conn.executescript(SEED)
    conn.close()
    db = database(f"sqlite:///{path}", read_only=False)
    result = await db.query("UPDATE customers SET name = 'Anna' WHERE id = 1")
    assert result.content == "statement executed (1 rows affected)"
    assert "Anna" in (await db.query("SELECT name FROM customers WHERE id = 1")).content
    db.dispose()


@pytest.mark.parametrize(
    "statement",
    [
        "ATTACH DATABASE '{state}' AS fim",
        "ATTACH DATABASE '{beside}' AS planted",
        "PRAGMA hard_heap_limit = 1",
        "PRAGMA temp_store = FILE",
        "PRAGMA journal_mode = OFF",
        "SELECT load_extension('/tmp/evil.so')",
    ],
)
async def test_a_writable_database_changes_itself_and_nothing_else(tmp_path, statement):
    """Writes are what the author allowed, on this database: ATTACH would reach any file
    fim's user can write (the project's `.fim/state.db`, where approvals are decided), and a
    PRAGMA with a value would change SQLite for the whole process (`hard_heap_limit = 1`
    fails every SQLite connection fim has, its own store included)."""
    path = tmp_path / "rw.db"
    with sqlite3.connect(path) as conn:
        conn.executescript(SEED)
    conn.close()
    state = tmp_path / ".fim" / "state.db"
    state.parent.mkdir()
    sqlite3.connect(state).close()
    beside = tmp_path / "planted.db"
    db = database(f"sqlite:///{path}", read_only=False)
    sql = statement.format(state=state, beside=beside)
    result = await db.query(sql)
    assert result.is_error, result.content
    assert "not authorized" in result.content or "prohibited" in result.content
    assert not beside.exists()
    still = await db.query("PRAGMA table_info(customers)")  # reading the schema stays open
    assert not still.is_error and "name" in still.content
    assert "Anna" not in (await db.query("SELECT name FROM customers")).content
    db.dispose()


# ------------------------------------------------------------------ connection problems


async def test_an_unreachable_database_is_an_observation_without_the_password():
    down = database("postgresql://fim:s3cret-pw@127.0.0.1:1/nowhere", statement_timeout=1)
    result = await down.list_tables()
    down.dispose()
    assert result.is_error
    assert result.content.startswith("Error: could not list tables:")
    assert "s3cret-pw" not in result.content


def test_a_driver_message_quoting_a_huge_value_is_worded_from_its_head():
    """PostgreSQL quotes the value that failed (`repeat('x', 900000000)::int`): the model
    gets a short line, and wording it copies nothing past its head (tracemalloc)."""
    db = database("sqlite:///unused.db")
    exc = ValueError('invalid input syntax for type integer: "' + "x" * 50_000_000 + '"\n')
    tracemalloc.start()
    try:
        text = describe_error(exc, db)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert text.startswith('invalid input syntax for type integer: "xxx')
    assert text.endswith("... [message cut]") and len(text) < 600
    assert peak < 100_000


async def test_a_missing_sqlite_file_is_not_created(tmp_path):
    missing = database(f"sqlite:///{tmp_path / 'missing.db'}")
    result = await missing.list_tables()
    missing.dispose()
    assert result.is_error
    assert not (tmp_path / "missing.db").exists()


def test_urls_map_to_psycopg_and_relative_sqlite_paths_to_the_project(tmp_path):
    assert normalize_url("postgresql://u@h/db", tmp_path) == "postgresql+psycopg://u@h/db"
    assert normalize_url("postgres://u@h/db", tmp_path) == "postgresql+psycopg://u@h/db"
    assert normalize_url("sqlite:///data/shop.db", tmp_path) == (
        f"sqlite:///{tmp_path.resolve() / 'data/shop.db'}"
    )
    assert normalize_url("sqlite:////abs/shop.db", tmp_path) == "sqlite:////abs/shop.db"


def test_a_schemes_case_does_not_matter(tmp_path):
    """RFC 3986: `PostgreSQL://` is `postgresql://` (attack-59 F5, the connectors' half)."""
    assert normalize_url("PostgreSQL://u@h/db", tmp_path) == "postgresql+psycopg://u@h/db"
    assert normalize_url("SQLite:///data/shop.db", tmp_path) == (
        f"sqlite:///{tmp_path.resolve() / 'data/shop.db'}"
    )


async def test_the_hook_view_never_parses_the_models_sql_on_the_event_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The view is built on the event loop, so a writable database's statement is
    classified by `prepare_query` on a thread first (sqlglot took ~0.1-0.4 s on a hostile
    4,000-character statement); a statement not classified that way, or too long to be,
    is shown to hooks as a write (fail closed)."""
    import threading

    from fim.connectors import meta
    from fim.connectors.meta import VIEW_PARSE_CHARS, database_metadata, prepare_query

    parsed_on: list[str] = []
    real = meta.decide

    def decide(sql: str, dialect: str | None) -> Any:
        parsed_on.append(threading.current_thread().name)
        return real(sql, dialect)

    monkeypatch.setattr(meta, "decide", decide)
    db = database(f"sqlite:///{tmp_path / 'rw.db'}", read_only=False)
    read, write = {"sql": "SELECT 41 + 1"}, {"sql": "DELETE FROM t"}
    assert database_metadata(db, "query", read)["access"] == "write"  # not classified yet
    await prepare_query(db, read)
    await prepare_query(db, write)
    assert database_metadata(db, "query", read)["access"] == "read"
    assert database_metadata(db, "query", write)["access"] == "write"
    long = {"sql": "SELECT " + "+".join(["1"] * (VIEW_PARSE_CHARS // 2))}
    await prepare_query(db, long)
    assert database_metadata(db, "query", long)["access"] == "write"
    assert len(parsed_on) == 2 and threading.main_thread().name not in parsed_on


@pytest.mark.parametrize("route", ["legacy", "progressive"])
async def test_hooks_see_reads_and_writes_of_a_writable_database_in_every_route(
    tmp_path: Path, route: str
) -> None:
    """Through the engine, as a run calls it: `{db}__query` (legacy) and the `database`
    meta-tool (progressive, the default) show a read as `read` and a write as `write`, the
    statements classified off the event loop before the view."""
    from fim.connectors.meta import DatabaseMetaTool
    from fim.connectors.provider import database_tools
    from fim.engines.react import ReactEngine
    from fim.llm.scripted import ScriptedModel, text, tool_call
    from fim.tools import ToolRegistry
    from fim.tools.view import view_of
    from tests.engines.test_engines_react import ScriptedHooks

    path = tmp_path / "rw.db"
    with sqlite3.connect(path) as conn:
        conn.executescript(SEED)
    conn.close()
    db = database(f"sqlite:///{path}", read_only=False)
    try:
        statements = ["SELECT count(*) FROM customers", "DELETE FROM orders WHERE id = 1"]
        if route == "legacy":
            registry = ToolRegistry(database_tools(db))
            calls = [tool_call("shop__query", {"sql": sql}) for sql in statements]
        else:
            registry = ToolRegistry([DatabaseMetaTool([db])])
            calls = [
                tool_call("database", {"subcommand": "query", "database": "shop", "sql": sql})
                for sql in statements
            ]
        hooks = ScriptedHooks()
        engine = ReactEngine(
            model=ScriptedModel([*calls, text("done")]),
            registry=registry,
            system_prompt="",
            agent="a",
            run_id="r",
            hooks=hooks,
            call_view=lambda name, args: view_of(registry.get(name), args),
        )
        [event async for event in engine.run("go")]
    finally:
        db.dispose()
    seen = [(c.tool_name, c.metadata["access"]) for c in hooks.seen if c.point == "PreToolUse"]
    assert seen == [("shop__query", "read"), ("shop__query", "write")]
