"""A call a `readonly_guard` allows never writes, however the guard was turned on; `confirm`
asks before a statement that may write through a function (attack-21 findings #1, #2).

- A `readonly_guard` declared on an agent that is not `read_only: true` (`with: {always:
  true}`) judges the SQL text; what the text cannot show (a view that writes) the database
  stops: a query the guard judges runs as on a read-only connector (PostgreSQL: catalog
  check and a read-only transaction; SQLite: a read-only connection). The guard's own
  decision decides it, call by call: a guard whose matcher misses the query leaves it as
  it was.
- On PostgreSQL the hook view of a query on a writable connector includes the catalog
  check of a read-only connector: a function outside `pg_catalog`/`information_schema`
  (or a VOLATILE one) makes the statement a write, so `confirm` asks and `readonly_guard`
  blocks. A plain SELECT of a table or of a built-in function stays a read, and its
  verdict is memoised.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from fim.build.compile import compile_project
from fim.config.schema import DatabaseConnector
from fim.connectors.database import Database
from fim.connectors.database.worker import Worker
from fim.connectors.meta import UNCHECKED, database_metadata, prepare_query
from fim.llm.script import text, tool_call
from fim.llm.scripted import ScriptedModel
from fim.testing.runs import run_events

FIM_YAML = {
    "name": "ro-guard",
    "state": "sqlite:///.fim/state.db",
    "models": {"general": "scripted"},
    "tool_selection": {"enabled": False},
}

ALWAYS = {"use": "readonly_guard", "with": {"always": True}}
ASK = {"use": "confirm", "with": {"timeout": 0.2, "poll": 0.02}}
MODES = ["progressive", "legacy"]


def project(root: Path, url: str, hooks: list[dict[str, Any]], mode: str) -> Path:
    """A writable connector `shop` and agent `clerk` (not read-only; `file_ops` too, for
    a matcher that matches something else) with `hooks`, its databases in `mode`."""
    files = {
        "fim.yaml": FIM_YAML,
        "connectors/shop.yaml": {"kind": "database", "url": url, "read_only": False},
        "agents/clerk.yaml": {
            "description": "d",
            "model": "general",
            "connectors": ["shop"],
            "tools": ["file_ops"],
            "hooks": hooks,
            "tool_modes": {"databases": mode},
        },
    }
    for name, body in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(body))
    return root


def query(mode: str, sql: str) -> Any:
    if mode == "progressive":
        return tool_call("database", {"subcommand": "query", "database": "shop", "sql": sql})
    return tool_call("shop__query", {"sql": sql})


def run(root: Path, mode: str, sql: str) -> tuple[str, list[Any]]:
    """One run of `clerk` asking for `sql` once: its tool result and its hook events."""
    model = ScriptedModel([query(mode, sql), text("done")])
    events = asyncio.run(run_events(compile_project(root), "clerk", "go", model=model))
    (shown,) = [str(getattr(e, "content", "")) for e in events if e.type == "tool_result"]
    return shown, [e for e in events if e.type == "hook"]


# ------------------------------------------------------------------------ PostgreSQL

PG_SEED = """
CREATE SCHEMA shop;
CREATE TABLE shop.orders (id integer PRIMARY KEY, note text);
INSERT INTO shop.orders SELECT g, 'order ' || g FROM generate_series(1, 5) g;
CREATE FUNCTION shop.cancel_order(i integer) RETURNS text LANGUAGE sql
  AS 'DELETE FROM shop.orders WHERE id = i RETURNING ''cancelled''';
CREATE VIEW shop.cancelled AS SELECT shop.cancel_order(id) AS what FROM shop.orders;
"""

FUNCTION = "SELECT shop.cancel_order(1)"
VIEW = "SELECT * FROM shop.cancelled"
"""A view that writes: its text names only a view, so no hook can see the function."""


def orders(url: str) -> int:
    import psycopg

    with psycopg.connect(url) as conn:
        row = conn.execute("SELECT count(*) FROM shop.orders").fetchone()
    assert row is not None
    return int(row[0])


def pg(root: Path, pg_database: Any, hooks: list[dict[str, Any]], mode: str) -> str:
    """The project on a fresh database; returns the owner URL (to count the orders)."""
    db = pg_database(PG_SEED)
    project(root, db.owner_url.replace("postgresql://", "postgresql+psycopg://", 1), hooks, mode)
    return str(db.owner_url)


@pytest.mark.parametrize("mode", MODES)
def test_a_declared_readonly_guard_makes_the_database_refuse_a_view_that_writes(
    tmp_path: Path, pg_database: Any, mode: str
) -> None:
    """The guard reads `SELECT * FROM shop.cancelled` as a read; the database runs it in a
    read-only transaction, and the DELETE inside the view fails."""
    url = pg(tmp_path, pg_database, [ALWAYS], mode)
    shown, _ = run(tmp_path, mode, VIEW)
    assert shown.startswith("Error:") and "read-only transaction" in shown, shown
    assert orders(url) == 5


@pytest.mark.parametrize("mode", MODES)
def test_a_declared_readonly_guard_blocks_a_select_of_a_function_that_writes(
    tmp_path: Path, pg_database: Any, mode: str
) -> None:
    url = pg(tmp_path, pg_database, [ALWAYS], mode)
    shown, _ = run(tmp_path, mode, FUNCTION)
    assert shown.startswith("Blocked:") and "shop.cancel_order()" in shown, shown
    assert orders(url) == 5


@pytest.mark.parametrize("mode", MODES)
def test_a_readonly_guard_whose_matcher_takes_the_query_makes_it_read_only(
    tmp_path: Path, pg_database: Any, mode: str
) -> None:
    url = pg(tmp_path, pg_database, [{**ALWAYS, "matcher": "shop__*"}], mode)
    shown, _ = run(tmp_path, mode, VIEW)
    assert "read-only transaction" in shown, shown
    assert orders(url) == 5


@pytest.mark.parametrize("mode", MODES)
def test_a_readonly_guard_whose_matcher_misses_the_query_leaves_it_as_it_was(
    tmp_path: Path, pg_database: Any, mode: str
) -> None:
    """The guard judges `file_ops` only: the query is the writable agent's as before."""
    url = pg(tmp_path, pg_database, [{**ALWAYS, "matcher": "file_ops"}], mode)
    shown, _ = run(tmp_path, mode, VIEW)
    assert "cancelled" in shown, shown
    assert orders(url) == 0


@pytest.mark.parametrize("mode", MODES)
def test_confirm_asks_before_a_select_of_a_function_that_writes(
    tmp_path: Path, pg_database: Any, mode: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The approval says why (the function); nobody answers, so the call is blocked."""
    url = pg(tmp_path, pg_database, [ASK], mode)
    with caplog.at_level("WARNING", logger="fim.hooks"):
        shown, hooks = run(tmp_path, mode, FUNCTION)
    assert shown.startswith("Blocked:"), shown
    assert [(h.hook, h.decision) for h in hooks] == [("confirm", "block")]
    (asked,) = [r.getMessage() for r in caplog.records if "needed" in r.getMessage()]
    assert "the function shop.cancel_order() is not allowed" in asked, asked
    assert orders(url) == 5


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(
    "sql",
    [
        "SELECT count(*) FROM shop.orders WHERE id > 1",
        "SELECT lower(note) AS n FROM shop.orders ORDER BY id LIMIT 1",
    ],
)
def test_confirm_lets_a_plain_select_of_a_table_or_a_builtin_function_run(
    tmp_path: Path, pg_database: Any, mode: str, sql: str
) -> None:
    pg(tmp_path, pg_database, [ASK], mode)
    shown, hooks = run(tmp_path, mode, sql)
    assert not shown.startswith(("Blocked:", "Error:")), shown
    assert "4" in shown or "order 1" in shown, shown
    assert [(h.hook, h.decision) for h in hooks] == [("confirm", "allow")]


async def test_a_statements_catalog_verdict_is_memoised(
    pg_database: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The catalog is asked once per statement; the view of its next calls costs nothing."""
    made = pg_database(PG_SEED)
    url = made.owner_url.replace("postgresql://", "postgresql+psycopg://", 1)
    db = Database("shop", DatabaseConnector(kind="database", url=url, read_only=False))
    asked: list[str] = []
    check = Worker.catalog_refusal_sync

    def counted(self: Worker, parsed: Any) -> str | None:
        asked.append(parsed.sql)
        return check(self, parsed)

    monkeypatch.setattr(Worker, "catalog_refusal_sync", counted)
    try:
        for _ in range(3):
            for sql in (FUNCTION, "SELECT lower(note) FROM shop.orders"):
                await prepare_query(db, {"sql": sql})
        function = database_metadata(db, "query", {"sql": FUNCTION})
        plain = database_metadata(db, "query", {"sql": "SELECT lower(note) FROM shop.orders"})
    finally:
        db.dispose()
    assert len(asked) == 2, asked
    assert function["access"] == "write" and "shop.cancel_order()" in function["write_reason"]
    assert plain["access"] == "read" and "write_reason" not in plain


# ------------------------------------------------------------------ offline PostgreSQL


async def test_a_statement_the_catalog_could_not_check_is_a_write(tmp_path: Path) -> None:
    """Nothing listens on the port: a statement naming a function is a write to hooks
    (fail closed, saying why); one naming nothing needs no catalog and stays a read."""
    url = "postgresql+psycopg://fim@127.0.0.1:1/none"
    db = Database("shop", DatabaseConnector(kind="database", url=url, read_only=False))
    try:
        for sql in ("SELECT lower('a')", "SELECT 1"):
            await prepare_query(db, {"sql": sql})
        named = database_metadata(db, "query", {"sql": "SELECT lower('a')"})
        plain = database_metadata(db, "query", {"sql": "SELECT 1"})
    finally:
        db.dispose()
    assert (named["access"], named["write_reason"]) == ("write", UNCHECKED)
    assert plain["access"] == "read"


# ---------------------------------------------------------------------------- SQLite


def sqlite_project(
    root: Path, hooks: list[dict[str, Any]], mode: str, monkeypatch: pytest.MonkeyPatch
) -> list[bool]:
    """The project on a SQLite file; returns, per statement run, whether it ran as on a
    read-only connector (`Database.run`'s `read_only_run`)."""
    path = root / "shop.db"
    with sqlite3.connect(path) as conn:
        conn.executescript(
            "CREATE TABLE orders (id INTEGER PRIMARY KEY); INSERT INTO orders VALUES (1);"
        )
    conn.close()
    project(root, f"sqlite:///{path}", hooks, mode)
    seen: list[bool] = []
    original = Database.run

    async def spied(self: Database, sql: str, params: Any = None, **kw: Any) -> Any:
        seen.append(bool(kw.get("read_only_run")))
        return await original(self, sql, params, **kw)

    monkeypatch.setattr(Database, "run", spied)
    return seen


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(
    ("hooks", "read_only"),
    [
        ([ALWAYS], True),
        ([{**ALWAYS, "matcher": "shop__query"}], True),
        ([{**ALWAYS, "matcher": "file_ops"}], False),
        ([{"use": "readonly_guard"}], False),  # not always, and the agent is not read-only
        ([], False),
    ],
    ids=["always", "matching", "other-matcher", "not-always", "no-guard"],
)
def test_a_sqlite_query_runs_read_only_exactly_when_a_readonly_guard_judges_it(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    mode: str,
    hooks: list[dict[str, Any]],
    read_only: bool,
) -> None:
    seen = sqlite_project(tmp_path, hooks, mode, monkeypatch)
    shown, _ = run(tmp_path, mode, "SELECT count(*) AS n FROM orders")
    assert "1" in shown and not shown.startswith(("Blocked:", "Error:")), shown
    assert seen == [read_only]
