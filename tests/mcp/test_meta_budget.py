"""Every meta-tool observation stays under the budget (issue 21): the `mcp` listing of a
server with hundreds of tools and the `database` answers for a schema of many tables are cut
(MCP: in pages; database: with a note), never sent whole."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from fim.config.schema import DatabaseConnector, StdioServer
from fim.connectors.database import Database
from fim.connectors.meta import DatabaseMetaTool
from fim.mcp.connection import ServerConnection
from fim.mcp.info import ToolInfo
from fim.mcp.meta import McpMetaTool
from fim.run.budget import budget_tokens
from fim.run.tokens import count_tokens


def _tokens(text: str) -> int:
    return count_tokens(text, "openai/gpt-4o")


async def test_mcp_discover_of_a_huge_server_is_bounded_and_names_the_rest(tmp_path: Path):
    conn = ServerConnection("big", StdioServer(command="big-mcp-server"), tmp_path)
    conn.state = "ready"
    schema = {
        "type": "object",
        "properties": {f"field_{i}": {"type": "string"} for i in range(6)},
        "required": ["field_0"],
    }
    conn.tools = [
        ToolInfo(f"tool_{i:03d}", f"Does thing number {i} for the team. " * 4, schema)
        for i in range(400)
    ]
    tool = McpMetaTool({"big": conn})
    first = await tool.run(subcommand="discover", server="big")
    assert "[page 1 of " in first.content and "next: page=2" in first.content
    pages = int(first.content.rsplit("[page 1 of ", 1)[1].split(" ")[0])
    listed = ""
    for page in range(1, pages + 1):
        result = await tool.run(subcommand="discover", server="big", page=page)
        assert _tokens(result.content) <= budget_tokens()
        listed += result.content
    assert all(f"- tool_{i:03d}(" in listed for i in range(400)), "every tool on some page"


async def test_database_answers_are_bounded(tmp_path: Path):
    path = tmp_path / "wide.db"
    conn = sqlite3.connect(path)
    tables = "".join(
        f"CREATE TABLE table_with_a_rather_long_name_{i} (id INTEGER);" for i in range(1500)
    )
    conn.executescript(f"BEGIN;{tables}COMMIT;")  # one commit, not 1,500 synced ones
    conn.close()
    db = Database("wide", DatabaseConnector(kind="database", url=f"sqlite:///{path}"), tmp_path)
    try:
        tool = DatabaseMetaTool([db])
        result = await tool.run(subcommand="list_tables", database="wide")
        assert _tokens(result.content) <= budget_tokens()
        assert result.content.startswith("1500 tables: ")
        assert "cut at the observation budget" in result.content
    finally:
        db.dispose()
