"""The parser half of read-only databases: one plain read statement passes, nothing else."""

from __future__ import annotations

import pytest

from fim.connectors.sql_guard import SqlRejected, check_read_only, dialect_for

READS = [
    ("postgres", "SELECT 1"),
    ("postgres", "select * from orders;"),
    ("postgres", "WITH big AS (SELECT * FROM orders WHERE amount > 10) SELECT count(*) FROM big"),
    ("postgres", "SELECT id FROM a UNION SELECT id FROM b"),
    ("postgres", "SELECT count(*) FROM t WHERE name LIKE 'x%' AND id = :id"),
    ("postgres", "SELECT /* top customers */ name FROM customers"),
    ("postgres", "EXPLAIN SELECT 1"),
    ("postgres", "EXPLAIN (ANALYZE, FORMAT JSON) SELECT * FROM orders"),
    ("postgres", "SHOW statement_timeout"),
    ("postgres", "VALUES (1), (2)"),
    # PostgreSQL's own parser reads comments as the server will: inert
    ("postgres", "SELECT 1 -- ; DELETE FROM t"),
    ("postgres", "SELECT /* DROP */ 1"),
    ("postgres", "SELECT U&\"l\\006Fwer\"('X')"),
    ("sqlite", "SELECT * FROM orders WHERE id = :id"),
    ("sqlite", "EXPLAIN QUERY PLAN SELECT * FROM orders"),
    ("sqlite", "PRAGMA table_info(orders)"),
    ("sqlite", "PRAGMA main.foreign_key_list(orders)"),
    ("sqlite", "PRAGMA user_version"),
]

WRITES = [
    ("postgres", "WITH d AS (DELETE FROM t RETURNING *) SELECT * FROM d", "DELETE"),
    ("postgres", "EXPLAIN ANALYZE DELETE FROM t", "DELETE"),
    ("postgres", "COPY t TO '/tmp/x'", "COPY"),
    ("postgres", "SELECT * INTO t2 FROM t", "INTO"),
    ("postgres", "SELECT pg_terminate_backend(1)", "pg_terminate_backend"),
    ("postgres", "SELECT nextval('s')", "nextval"),
    ("postgres", "SELECT set_config('a', 'b', false)", "set_config"),
    ("postgres", "SELECT dblink_exec('x', 'y')", "dblink_exec"),
    ("postgres", "SELECT lo_import('/etc/passwd')", "lo_import"),
    ("postgres", "SELECT pg_advisory_lock(1)", "pg_advisory_lock"),
    ("postgres", "/* x */ DELETE FROM t", "DELETE"),
    ("postgres", "SELECT 1; DELETE FROM t", "2 statements"),
    ("postgres", 'SELECT U&"pg_\\0061dvisory_lock"(74211)', "pg_advisory_lock"),
    ("postgres", "SELECT ts_stat('SELECT 1')", "ts_stat"),
    ("postgres", "SET x = 1", "SET"),
    ("postgres", "SET TRANSACTION READ WRITE", "SET"),
    ("postgres", "BEGIN", "BEGIN"),
    ("postgres", "COMMIT", "COMMIT"),
    ("postgres", "GRANT ALL ON t TO x", "GRANT"),
    ("postgres", "VACUUM", "VACUUM"),
    ("postgres", "REINDEX TABLE t", "REINDEX"),
    ("postgres", "SELECT * FROM t FOR UPDATE", "FOR UPDATE"),
    ("postgres", "CREATE TEMP TABLE x AS SELECT 1", "CREATE"),
    ("postgres", "TRUNCATE t", "TRUNCATE"),
    ("postgres", "LOCK TABLE t", "LOCK"),
    ("postgres", "CALL p()", "CALL"),
    ("postgres", "DO $$ BEGIN DELETE FROM t; END $$", "DO"),
    ("postgres", "LISTEN x", "LISTEN"),
    ("postgres", "PREPARE p AS DELETE FROM t", "PREPARE"),
    ("postgres", "DISCARD ALL", "DISCARD"),
    ("postgres", "CHECKPOINT", "CHECKPOINT"),
    ("postgres", "SHOW x; DELETE FROM t", "2 statements"),
    ("postgres", "SELECT * FROM (DELETE FROM t RETURNING *) x", "parsed"),
    ("postgres", "", "empty"),
    ("sqlite", "PRAGMA user_version = 3", "with a value"),
    ("sqlite", "PRAGMA user_version(3)", "with a value"),
    ("sqlite", "PRAGMA query_only = 0", "with a value"),
    ("sqlite", "PRAGMA optimize", "PRAGMA optimize"),
    ("sqlite", "ATTACH DATABASE 'x.db' AS x", "ATTACH"),
    ("sqlite", "SELECT load_extension('x')", "load_extension"),
    ("sqlite", "SELECT writefile('x', 'y')", "writefile"),
    ("sqlite", "REPLACE INTO t VALUES (1)", "REPLACE"),
    ("sqlite", "INSERT OR REPLACE INTO t VALUES (1)", "INSERT"),
    ("sqlite", "SAVEPOINT a", "SAVEPOINT"),
    ("sqlite", "END", "END"),
    ("mysql", "SELECT /*! 1; DELETE FROM t */ 2", "comments"),
]


@pytest.mark.parametrize(("dialect", "sql"), READS)
def test_single_read_statements_pass(dialect, sql):
    check_read_only(sql, dialect)


@pytest.mark.parametrize(("dialect", "sql", "reason"), WRITES)
def test_everything_else_is_refused_with_a_reason(dialect, sql, reason):
    with pytest.raises(SqlRejected) as refused:
        check_read_only(sql, dialect)
    assert reason in str(refused.value)


def test_refusals_tell_the_model_what_is_accepted():
    with pytest.raises(SqlRejected, match=r"Only SELECT \(optionally WITH \.\.\. SELECT\)"):
        check_read_only("DELETE FROM orders", "sqlite")


@pytest.mark.parametrize(
    ("url", "dialect"),
    [
        ("sqlite:///data/shop.db", "sqlite"),
        ("postgresql+psycopg://u@h/db", "postgres"),
        ("postgres://u@h/db", "postgres"),
        ("mysql+pymysql://u@h/db", "mysql"),
        ("firebird://u@h/db", None),
    ],
)
def test_the_dialect_comes_from_the_url(url, dialect):
    assert dialect_for(url) == dialect


@pytest.mark.parametrize(
    ("sql", "statement"),
    [
        ("SELECT 1", "SELECT 1"),
        ("SELECT 1; -- trailing", "SELECT 1"),
        ("-- why\nSELECT 'é;', 2 ;  /* done */ ", "SELECT 'é;', 2"),
        ("SELECT 1 -- no newline", "SELECT 1 -- no newline"),
        ("SELECT :a", "SELECT $1"),
    ],
)
def test_postgres_reports_the_statement_alone_so_it_can_be_nested(sql, statement):
    """fim nests a checked SELECT in its own query (`FROM (statement)`): a `;` or a
    comment after it must not come along, and what is nested is what was parsed."""
    parsed = check_read_only(sql, "postgres")
    assert (parsed.statement or parsed.sql) == statement
