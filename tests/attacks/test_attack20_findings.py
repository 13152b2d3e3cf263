"""Attack round 20: does `read_only` hold, in every mode and on every surface, in the
default configuration? Each confirmed gap is pinned here as a strict xfail asserting the
safe behaviour (`/work/notes/attack-20.md` has the reproduction and the fix location).

Both are calls `fim.hooks.writes.write_of` (the one decision `readonly_guard` and `confirm`
share) takes for reads:

- SQL on a *writable* PostgreSQL connector is judged by the statement layer alone (the
  parser and a list of known side-effect function names). The catalog layer (only
  `pg_catalog` functions that are not VOLATILE) and the read-only transaction belong to
  read-only connectors, so a read-only agent's `SELECT shop.cancel_order(1)` runs the
  function, and it deletes.
- An MCP tool is a write only when its server hints `destructiveHint: true`. A tool with no
  annotations, or one that says `readOnlyHint: false` (it changes its environment) without
  also repeating `destructiveHint: true` (the spec's default), is taken for a read.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

import pytest

from fim.build.compile import compile_project
from fim.llm.script import text, tool_call
from fim.llm.scripted import ScriptedModel
from fim.testing.runs import run_events

FIM_YAML = (
    'name: a20\nstate: "sqlite:///.fim/state.db"\n'
    "models: {general: scripted}\ntool_selection: {enabled: false}\n"
)


def write(root: Path, files: dict[str, str]) -> Path:
    for name, body in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(body)
    return root


def results(root: Path, agent: str, call: Any) -> list[str]:
    """The tool results of one run of `agent` whose model makes `call` once."""
    snapshot = compile_project(root)
    model = ScriptedModel([call, text("done")])
    events = asyncio.run(run_events(snapshot, agent, "go", model=model))
    return [str(getattr(e, "content", "")) for e in events if e.type == "tool_result"]


# ------------------------------ #1 a writable PostgreSQL connector under a read-only agent

SEED = """
CREATE SCHEMA shop;
CREATE TABLE shop.orders (id integer PRIMARY KEY, note text);
INSERT INTO shop.orders SELECT g, 'order ' || g FROM generate_series(1, 5) g;
CREATE FUNCTION shop.cancel_order(i integer) RETURNS text LANGUAGE sql
  AS 'DELETE FROM shop.orders WHERE id = i RETURNING ''cancelled''';
"""


@pytest.mark.parametrize("mode", ["progressive", "legacy"])
def test_a_read_only_agent_never_writes_through_a_function_on_a_writable_database(
    tmp_path: Path, pg_database: Any, mode: str
) -> None:
    """`read_only: true` promises no writes, and a database query from a read-only agent
    must be "one plain read". A connector shared with agents that may write is declared
    `read_only: false`; for the read-only agent the guard then parses the SQL, sees a
    SELECT, and lets `SELECT shop.cancel_order(1)` run: the function deletes the order.
    Safe: the call is refused, or it runs in a read-only transaction (the second layer
    read-only connectors already have), and the order is still there."""
    import psycopg

    db = pg_database(SEED)
    url = db.owner_url.replace("postgresql://", "postgresql+psycopg://", 1)
    call = (
        tool_call(
            "database",
            {"subcommand": "query", "database": "shop", "sql": "SELECT shop.cancel_order(1)"},
        )
        if mode == "progressive"
        else tool_call("shop__query", {"sql": "SELECT shop.cancel_order(1)"})
    )
    write(
        tmp_path,
        {
            "fim.yaml": FIM_YAML,
            "connectors/shop.yaml": f'kind: database\nurl: "{url}"\nread_only: false\n',
            "agents/viewer.yaml": "description: d\nmodel: general\nread_only: true\n"
            f"connectors: [shop]\ntool_modes: {{databases: {mode}}}\n",
        },
    )
    results(tmp_path, "viewer", call)
    with psycopg.connect(db.owner_url) as conn:
        left = conn.execute("SELECT count(*) FROM shop.orders").fetchone()
    assert left == (5,)  # today: (4,), order 1 was deleted


# ------------------------------------------------ #2 MCP tools that do not say they read

SERVER = """
import sys
from mcp.server.mcpserver import MCPServer
from mcp.types import ToolAnnotations

server = MCPServer("tickets", log_level="WARNING")


def record(name: str) -> str:
    with open(sys.argv[1], "a") as log:
        log.write(name + "\\n")
    return "done"


@server.tool(description="Open a ticket")
def open_ticket(title: str = "") -> str:
    return record("open_ticket")


@server.tool(
    description="Close a ticket", annotations=ToolAnnotations(readOnlyHint=False)
)
def close_ticket(id: str = "") -> str:
    return record("close_ticket")


@server.tool(
    description="Add a comment",
    annotations=ToolAnnotations(readOnlyHint=False, destructiveHint=False),
)
def comment(text: str = "") -> str:
    return record("comment")


if __name__ == "__main__":
    server.run("stdio")
"""


def mcp_project(root: Path, mode: str) -> Path:
    """A read-only agent with one MCP server whose calls are logged to `calls.log`."""
    log = root / "calls.log"
    return write(
        root,
        {
            "fim.yaml": FIM_YAML + f"mcp_servers:\n  tickets: {{command: {sys.executable!r}, "
            f"args: [server.py, {str(log)!r}]}}\n",
            "server.py": SERVER,
            "agents/viewer.yaml": "description: d\nmodel: general\nread_only: true\n"
            f"mcp: [tickets]\ntool_modes: {{mcp: {mode}}}\n",
        },
    )


def mcp_call(mode: str, tool: str) -> Any:
    if mode == "legacy":
        return tool_call(f"tickets__{tool}", {})
    return tool_call(
        "mcp", {"subcommand": "call", "server": "tickets", "tool": tool, "parameters": {}}
    )


@pytest.mark.parametrize("mode", ["progressive", "legacy"])
def test_an_mcp_tool_that_says_it_is_not_read_only_never_runs_for_a_read_only_agent(
    tmp_path: Path, mode: str
) -> None:
    """MCP's `readOnlyHint: false` says the tool changes its environment; `destructiveHint`
    then defaults to true in the spec, and `false` only says the change is additive. fim
    takes a write for a tool hinted `destructiveHint: true` only, so `close_ticket` and
    `comment` run for a read-only agent (and `confirm` never asks about them)."""
    root = mcp_project(tmp_path, mode)
    for tool in ("close_ticket", "comment"):
        results(root, "viewer", mcp_call(mode, tool))
    log = root / "calls.log"
    assert not log.exists(), log.read_text()  # today: close_ticket, comment


def test_an_mcp_tool_without_annotations_never_runs_for_a_read_only_agent(
    tmp_path: Path,
) -> None:
    """A tool whose server says nothing about it (most servers: annotations are optional
    hints) is, by the spec's defaults, not read-only and destructive. fim runs it for a
    read-only agent; failing closed means treating it as a write unless it is hinted
    `readOnlyHint: true`."""
    root = mcp_project(tmp_path, "legacy")
    results(root, "viewer", mcp_call("legacy", "open_ticket"))
    log = root / "calls.log"
    assert not log.exists(), log.read_text()  # today: open_ticket
