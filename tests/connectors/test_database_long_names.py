"""A database connector whose name leaves `{db}__{action}` over 64 characters.

Its tools are named by the one rule connector actions and MCP tools are named by
(`fim.tools.naming.tool_name`: 54 characters and a digest of the whole), in legacy mode,
in the `database` meta-tool's hook view and in a workflow's `database` node alike; hook
matchers are tried against that name and the full one, and `fim validate` takes a matcher
written with either (tests/connectors/test_connector_long_names.py is the same for HTTP
actions). Before, the names were `{db}__list_tables` whatever their length, which
providers refuse past 64 characters.
"""

from __future__ import annotations

import dataclasses
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from fim.config.schema import DatabaseConnector, WorkflowDecl
from fim.connectors.database import Database
from fim.connectors.meta import DatabaseMetaTool
from fim.connectors.provider import DATABASE_ACTIONS, database_tools
from fim.hooks import HookResult, PreToolUseHook, check_hooks
from fim.hooks.runner import HookChain
from fim.testing.hooks import call_tool, make_context
from fim.tools.naming import NAME_LIMIT, tool_name
from fim.tools.view import view_of
from fim.types import HookContext

DB = "warehouse_inventory_and_fulfilment_records_of_the_eu_region"  # 59 characters
FULL_QUERY = f"{DB}__query"


class Refuse(PreToolUseHook):
    async def __call__(self, context: HookContext) -> HookResult:
        return HookResult(allow=False, error="no statements on the warehouse")


def refuse(matcher: str) -> HookChain:
    hook = Refuse()
    hook.set_matcher(matcher)
    return HookChain([hook])


@pytest.fixture
def db(tmp_path: Path) -> Any:
    path = tmp_path / "w.db"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE stock (id INTEGER PRIMARY KEY, qty INTEGER)")
        conn.execute("INSERT INTO stock VALUES (1, 5)")
    conn.close()
    decl = DatabaseConnector.model_validate(
        {"kind": "database", "url": f"sqlite:///{path}", "read_only": False}
    )
    database = Database(DB, decl, tmp_path)
    yield database
    database.dispose()


def rows(db: Database) -> int:
    path = str(db.decl.url).removeprefix("sqlite:///")
    with sqlite3.connect(path) as conn:
        (count,) = conn.execute("SELECT count(*) FROM stock").fetchone()
    conn.close()
    return int(count)


def test_legacy_tools_of_a_long_database_name_fit_every_provider(db: Database) -> None:
    names = [tool.name for tool in database_tools(db)]

    assert names == [tool_name(DB, action) for action in DATABASE_ACTIONS]
    assert all(len(name) <= NAME_LIMIT for name in names), names
    assert len(set(names)) == 3  # the digest keeps the three apart though they share 54
    assert len(f"{DB}__list_tables") > NAME_LIMIT  # what they were called before


def test_a_short_database_name_keeps_its_plain_tool_names(tmp_path: Path) -> None:
    decl = DatabaseConnector.model_validate({"kind": "database", "url": "sqlite:///x.db"})
    names = [tool.name for tool in database_tools(Database("shop", decl, tmp_path))]
    assert names == ["shop__list_tables", "shop__describe", "shop__query"]


def test_the_meta_tool_shows_hooks_the_legacy_tools_name(db: Database) -> None:
    meta = DatabaseMetaTool([db])
    for sub, action in (
        ("query", "query"),
        ("list_tables", "list_tables"),
        ("discover", "describe"),
    ):
        args = {"subcommand": sub, "database": DB, "sql": "SELECT 1", "table": "stock"}
        assert view_of(meta, args).name == tool_name(DB, action)


def routes(db: Database) -> dict[str, tuple[Any, dict[str, Any]]]:
    legacy = {tool.name: tool for tool in database_tools(db)}[tool_name(DB, "query")]
    sql = "DELETE FROM stock"
    meta_args = {"subcommand": "query", "database": DB, "sql": sql}
    return {"legacy": (legacy, {"sql": sql}), "progressive": (DatabaseMetaTool([db]), meta_args)}


@pytest.mark.parametrize("route", ["legacy", "progressive"])
@pytest.mark.parametrize("matcher", [FULL_QUERY, "*__query", "shortened"])
async def test_a_hook_on_the_full_name_its_tail_or_the_short_name_blocks_the_query(
    db: Database, route: str, matcher: str
) -> None:
    matcher = tool_name(DB, "query") if matcher == "shortened" else matcher
    tool, args = routes(db)[route]

    outcome = await call_tool(refuse(matcher), tool, args)

    assert outcome.blocked and not outcome.ran
    assert "no statements on the warehouse" in outcome.observation
    assert rows(db) == 1
    # a hook on another name lets the same statement run
    assert (await call_tool(refuse("*__describe"), tool, args)).ran
    assert rows(db) == 0


@pytest.mark.parametrize("matcher", [FULL_QUERY, "re:_h[0-9a-f]{8}$", "shortened"])
@pytest.mark.parametrize("via", ["agent", "workflow"])
def test_validate_takes_a_matcher_on_the_shortened_or_the_full_name(
    tmp_path: Path, matcher: str, via: str
) -> None:
    """On an agent with the connector, and on one that starts a workflow with a `database`
    node on it: a matcher on the name hooks see is not said to match nothing."""
    matcher = tool_name(DB, "query") if matcher == "shortened" else matcher
    agent = {"connectors": [DB]} if via == "agent" else {"workflows": ["restock"]}
    ctx = make_context(
        tmp_path,
        [{"event": "PreToolUse", "command": "true", "matcher": matcher}],
        agent=agent,
    )
    decl = DatabaseConnector.model_validate(
        {"name": DB, "kind": "database", "url": "sqlite:///x.db"}
    )
    node = {"type": "database", "connector": DB, "sql": "UPDATE stock SET qty = 0"}
    flow = WorkflowDecl.model_validate({"name": "restock", "nodes": {"q": node}})
    snapshot = dataclasses.replace(ctx.snapshot, connectors={DB: decl}, workflows={"restock": flow})
    assert check_hooks(snapshot) == []
