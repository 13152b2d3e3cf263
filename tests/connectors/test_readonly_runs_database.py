"""A read-only run touches nothing on a database, whatever the connector's own `read_only`.

An agent (or project) declared `read_only: true` may share a connector declared
`read_only: false` with agents that write. `readonly_guard` judges the read-only agent's
SQL by its text, and the text cannot show what a function or a view does:
`SELECT shop.cancel_order(1)` reads like a read and deletes. So the database is the second
layer: a read-only run's statement runs exactly as a read-only connector's would
(PostgreSQL: only safe `pg_catalog` functions, inside a read-only transaction; SQLite: a
read-only connection), in both tool modes and in the workflow `database` nodes such a run
starts. A writable run on the same connector still writes (attack-20 finding #1).
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
from fim.connectors.sql_guard import SqlRejected
from fim.llm.script import text, tool_call
from fim.llm.scripted import ScriptedModel
from fim.testing.runs import run_events, services_for
from fim.workflows.engine import run_workflow

FIM_YAML = {
    "name": "ro-runs",
    "state": "sqlite:///.fim/state.db",
    "models": {"general": "scripted"},
    "tool_selection": {"enabled": False},
}


def project(root: Path, url: str, files: dict[str, Any] | None = None) -> Path:
    """A writable connector `shop`, a read-only agent `viewer` (which may start the workflow
    `purge`) and a writable agent `admin` on it."""
    agent = {"description": "d", "model": "general", "connectors": ["shop"]}
    every = {
        "fim.yaml": FIM_YAML,
        "connectors/shop.yaml": {"kind": "database", "url": url, "read_only": False},
        "agents/viewer.yaml": {**agent, "read_only": True, "workflows": ["purge"]},
        "agents/admin.yaml": agent,
        **purge("SELECT 1"),
        **(files or {}),
    }
    for name, body in every.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(body))
    return root


def purge(sql: str) -> dict[str, Any]:
    """The workflow `purge`: one `database` node running `sql`."""
    return {
        "workflows/purge.yaml": {
            "description": "purges",
            "nodes": {"gone": {"type": "database", "connector": "shop", "sql": sql}},
        }
    }


def writable(url: str) -> DatabaseConnector:
    return DatabaseConnector(kind="database", url=url, read_only=False)


def query(mode: str, sql: str) -> Any:
    if mode == "progressive":
        return tool_call("database", {"subcommand": "query", "database": "shop", "sql": sql})
    return tool_call("shop__query", {"sql": sql})


def results(root: Path, agent: str, call: Any, mode: str = "progressive") -> list[str]:
    """The tool results of one run of `agent` (its databases in `mode`) making `call` once."""
    path = root / "agents" / f"{agent}.yaml"
    decl = json.loads(path.read_text())
    path.write_text(json.dumps({**decl, "tool_modes": {"databases": mode}}))
    model = ScriptedModel([call, text("done")])
    events = asyncio.run(run_events(compile_project(root), agent, "go", model=model))
    return [str(getattr(e, "content", "")) for e in events if e.type == "tool_result"]


# ------------------------------------------------------------------------ PostgreSQL

PG_SEED = """
CREATE SCHEMA shop;
CREATE TABLE shop.orders (id integer PRIMARY KEY, note text);
INSERT INTO shop.orders SELECT g, 'order ' || g FROM generate_series(1, 5) g;
CREATE FUNCTION shop.cancel_order(i integer) RETURNS text LANGUAGE sql
  AS 'DELETE FROM shop.orders WHERE id = i RETURNING ''cancelled''';
CREATE VIEW shop.cancelled AS SELECT shop.cancel_order(id) AS what FROM shop.orders;
CREATE SEQUENCE shop.tickets;
CREATE VIEW shop.next_ticket AS SELECT nextval('shop.tickets') AS n;
CREATE VIEW shop.open_orders AS SELECT * FROM shop.orders;
CREATE FUNCTION shop.close_order() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN DELETE FROM shop.orders WHERE id = OLD.id; RETURN OLD; END $$;
CREATE TRIGGER close_order INSTEAD OF DELETE ON shop.open_orders
  FOR EACH ROW EXECUTE FUNCTION shop.close_order();
CREATE FUNCTION shop.close_first() RETURNS text LANGUAGE sql
  AS 'DELETE FROM shop.open_orders WHERE id = 1 RETURNING ''closed''';
"""

PG_WRITES_A_SELECT_HIDES = {
    "function": "SELECT shop.cancel_order(1)",
    "view": "SELECT * FROM shop.cancelled",
    "cte": "WITH c AS (SELECT shop.cancel_order(1) AS r) SELECT r FROM c",
    "nextval": "SELECT n FROM shop.next_ticket",
    "trigger-backed view": "SELECT shop.close_first()",
}
"""Statements that parse as one plain SELECT and write through what they name."""


def pg_state(url: str) -> tuple[int, bool]:
    """(orders left, whether the sequence was ever advanced)."""
    import psycopg

    with psycopg.connect(url) as conn:
        left = conn.execute("SELECT count(*) FROM shop.orders").fetchone()
        called = conn.execute("SELECT is_called FROM shop.tickets").fetchone()
    assert left is not None and called is not None
    return left[0], called[0]


def pg_project(root: Path, pg_database: Any, files: dict[str, Any] | None = None) -> Any:
    db = pg_database(PG_SEED)
    url = db.owner_url.replace("postgresql://", "postgresql+psycopg://", 1)
    project(root, url, files)
    return db


@pytest.mark.parametrize("mode", ["progressive", "legacy"])
@pytest.mark.parametrize("kind", list(PG_WRITES_A_SELECT_HIDES))
def test_a_read_only_run_cannot_write_through_what_a_select_names_on_postgres(
    tmp_path: Path, pg_database: Any, kind: str, mode: str
) -> None:
    """A function the SELECT names is not a built-in one: the guard blocks it already (the
    hook view puts the statement to the catalog check, attack-21 #2); what a view hides
    the text cannot show, and it meets the read-only transaction."""
    db = pg_project(tmp_path, pg_database)
    (shown,) = results(tmp_path, "viewer", query(mode, PG_WRITES_A_SELECT_HIDES[kind]), mode)
    if kind in ("function", "cte", "trigger-backed view"):
        assert shown.startswith("Blocked:") and "not allowed on a read-only database" in shown
    else:
        assert shown.startswith("Error:") and "this run is read-only" in shown, shown
    assert pg_state(db.owner_url) == (5, False)


def test_a_writable_run_on_the_same_postgres_connector_still_writes(
    tmp_path: Path, pg_database: Any
) -> None:
    db = pg_project(tmp_path, pg_database)
    (shown,) = results(tmp_path, "admin", query("progressive", "SELECT shop.cancel_order(1)"))
    assert "cancelled" in shown, shown
    (shown,) = results(
        tmp_path, "admin", query("legacy", "SELECT n FROM shop.next_ticket"), "legacy"
    )
    assert "1" in shown, shown
    assert pg_state(db.owner_url) == (4, True)


def test_a_workflow_database_node_a_read_only_agent_starts_cannot_write_on_postgres(
    tmp_path: Path, pg_database: Any
) -> None:
    """A view that writes (which no hook can see) meets the node's read-only transaction."""
    db = pg_project(tmp_path, pg_database, purge("SELECT * FROM shop.cancelled"))
    (shown,) = results(tmp_path, "viewer", tool_call("run_workflow", {"name": "purge"}))
    assert "failed" in shown and "read-only transaction" in shown, shown
    assert pg_state(db.owner_url) == (5, False)


def test_a_writable_agent_a_read_only_agent_delegates_to_cannot_write_on_postgres(
    tmp_path: Path, pg_database: Any
) -> None:
    """The read-only agent's guard holds over its delegate's calls, and so does the
    read-only transaction: the writable `admin`, asked by `viewer`, cannot cancel."""
    sql = "SELECT shop.cancel_order(1)"
    arguments = {"subcommand": "query", "database": "shop", "sql": sql}
    cancel = {"name": "database", "arguments": arguments}
    files = {
        "admin.json": [{"tool_calls": [cancel]}, {"text": "tried"}],
        "agents/admin.yaml": {
            "description": "d",
            "model": "scripted:admin.json",
            "connectors": ["shop"],
        },
    }
    db = pg_project(tmp_path, pg_database, files)
    viewer = json.loads((tmp_path / "agents/viewer.yaml").read_text())
    viewer["delegates"] = ["admin"]
    (tmp_path / "agents/viewer.yaml").write_text(json.dumps(viewer))
    (shown,) = results(tmp_path, "viewer", tool_call("call_agent", {"agent": "admin", "task": "t"}))
    assert shown == "tried", shown
    assert pg_state(db.owner_url) == (5, False)


@pytest.mark.parametrize(
    "sql",
    [
        "DELETE FROM shop.orders",
        "DELETE FROM shop.open_orders",
        "SELECT nextval('shop.tickets')",
        "WITH d AS (DELETE FROM shop.orders RETURNING id) SELECT id FROM d",
        *PG_WRITES_A_SELECT_HIDES.values(),
    ],
)
def test_below_the_statement_check_a_read_only_run_meets_a_read_only_transaction(
    pg_database: Any, sql: str
) -> None:
    """The executor without the statement and catalog checks (what a parser bug would
    leave): the transaction itself is read-only for a read-only run."""
    db = pg_database(PG_SEED)
    url = db.owner_url.replace("postgresql://", "postgresql+psycopg://", 1)
    worker = Worker("shop", writable(url))
    try:
        with pytest.raises(Exception, match="read-only transaction"):
            worker.execute_sync(sql, read_only_run=True)
    finally:
        worker.dispose()
    assert pg_state(db.owner_url) == (5, False)


# ---------------------------------------------------------------------------- SQLite

SQLITE_SEED = """
CREATE TABLE orders (id INTEGER PRIMARY KEY AUTOINCREMENT, note TEXT);
INSERT INTO orders (note) VALUES ('a'), ('b'), ('c'), ('d'), ('e');
CREATE VIEW open_orders AS SELECT * FROM orders;
CREATE TRIGGER close_order INSTEAD OF DELETE ON open_orders
  BEGIN DELETE FROM orders WHERE id = OLD.id; END;
CREATE TRIGGER note_order INSTEAD OF UPDATE ON open_orders
  BEGIN UPDATE orders SET note = NEW.note WHERE id = OLD.id; END;
"""

SQLITE_WRITES = [
    "DELETE FROM orders",
    "DELETE FROM open_orders WHERE id = 1",
    "INSERT INTO orders (note) VALUES ('f')",
    "WITH n AS (SELECT 'f' AS note) INSERT INTO orders (note) SELECT note FROM n",
    "REPLACE INTO orders (id, note) VALUES (1, 'x')",
    "UPDATE open_orders SET note = 'x'",
]
"""Writes of every shape SQLite has (no SQL function writes, and a view only through its
trigger): what a read-only run's connection must refuse whatever the parser said."""


def sqlite_db(root: Path) -> Path:
    path = root / "shop.db"
    with sqlite3.connect(path) as conn:
        conn.executescript(SQLITE_SEED)
    conn.close()
    return path


def sqlite_state(path: Path) -> tuple[int, str]:
    """(orders left, their notes)."""
    with sqlite3.connect(path) as conn:
        left, notes = conn.execute("SELECT count(*), group_concat(note) FROM orders").fetchone()
    conn.close()
    return left, notes or ""


UNTOUCHED = (5, "a,b,c,d,e")


@pytest.mark.parametrize("sql", SQLITE_WRITES)
def test_below_the_statement_check_a_read_only_run_meets_a_read_only_sqlite_connection(
    tmp_path: Path, sql: str
) -> None:
    path = sqlite_db(tmp_path)
    worker = Worker("shop", writable(f"sqlite:///{path}"))
    with pytest.raises(sqlite3.DatabaseError):
        worker.execute_sync(sql, read_only_run=True)
    assert sqlite_state(path) == UNTOUCHED
    worker.execute_sync(sql)  # a writable run's statement, on the same connector, writes
    assert sqlite_state(path) != UNTOUCHED


async def test_a_read_only_runs_statement_is_checked_by_the_sqlite_connector_itself(
    tmp_path: Path,
) -> None:
    """The connector applies the statement layer too, not only the hook in front of it."""
    path = sqlite_db(tmp_path)
    db = Database("shop", writable(f"sqlite:///{path}"))
    with pytest.raises(SqlRejected):
        await db.run("DELETE FROM orders", read_only_run=True)
    refused = await db.query("DELETE FROM orders", read_only_run=True)
    assert refused.is_error and "this run is read-only" in refused.content, refused.content
    read = await db.run("SELECT count(*) FROM orders", read_only_run=True)
    assert read.rows == [(5,)]
    assert sqlite_state(path) == UNTOUCHED
    await db.run("DELETE FROM orders WHERE id = 1")
    assert sqlite_state(path) == (4, "b,c,d,e")


def test_a_workflow_node_under_a_read_only_agent_cannot_write_on_sqlite_without_its_hooks(
    tmp_path: Path,
) -> None:
    """A workflow run whose call chain holds a read-only agent (as one recovered in another
    process is) runs its `database` nodes read-only even with no hook chain at all."""
    path = sqlite_db(tmp_path)
    root = project(tmp_path / "p", f"sqlite:///{path}", purge("DELETE FROM open_orders"))
    snapshot = compile_project(root)
    services = services_for(snapshot)
    state = asyncio.run(run_workflow(snapshot, "purge", {}, services, parents=("viewer",)))
    assert state.status == "failed" and "query refused" in str(state.error), state.error
    assert sqlite_state(path) == UNTOUCHED
    state = asyncio.run(run_workflow(snapshot, "purge", {}, services, parents=("admin",)))
    assert state.status == "ok", state.error
    assert sqlite_state(path) == (0, "")


@pytest.mark.parametrize("mode", ["progressive", "legacy"])
def test_a_read_only_agent_reads_and_a_writable_agent_writes_on_one_sqlite_connector(
    tmp_path: Path, mode: str
) -> None:
    path = sqlite_db(tmp_path)
    root = project(tmp_path / "p", f"sqlite:///{path}")
    (shown,) = results(root, "viewer", query(mode, "SELECT count(*) AS n FROM open_orders"), mode)
    assert "5" in shown and not shown.startswith("Error"), shown
    (shown,) = results(root, "admin", query(mode, "DELETE FROM open_orders WHERE id = 1"), mode)
    assert shown.startswith("statement executed"), shown
    assert sqlite_state(path) == (4, "b,c,d,e")


@pytest.mark.parametrize(("always", "read_only"), [(True, True), (False, False)])
def test_a_workflow_node_judged_by_a_declared_readonly_guard_runs_read_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, always: bool, read_only: bool
) -> None:
    """A workflow started by a writable agent whose declared `readonly_guard` (`always`)
    judges the node's query: the statement runs as on a read-only connector, as the
    agent's own queries do, so a view or function that writes cannot write through it."""
    from fim.hooks.builtin.readonly_guard import ReadonlyGuard
    from fim.hooks.runner import HookChain

    path = sqlite_db(tmp_path)
    root = project(tmp_path / "p", f"sqlite:///{path}", purge("SELECT count(*) FROM orders"))
    snapshot = compile_project(root)
    services = services_for(snapshot)
    seen: list[bool] = []
    original = Database.run

    async def spied(self: Database, sql: str, params: Any = None, **kw: Any) -> Any:
        seen.append(bool(kw.get("read_only_run")))
        return await original(self, sql, params, **kw)

    monkeypatch.setattr(Database, "run", spied)
    guard = HookChain([ReadonlyGuard(always=always)])
    state = asyncio.run(
        run_workflow(snapshot, "purge", {}, services, parents=("admin",), guard=guard)
    )
    assert state.status == "ok", state.error
    assert seen == [read_only]
