"""A stdio MCP server's failing call and its first call, as a developer reads them
(newcomer-54 #4, #5).

- #4: a tool that raises inside the server answered "Error executing tool get_stock" and
  the traceback the server printed to its stderr went nowhere while it ran. Now what the
  server wrote to stderr during a failed call is in the call's `tool_result` event (`at`:
  its last line; `traceback`: its tail, masked, never sent to the model), `fim run -v`
  prints the `at` line, and the logger `fim.mcp.<server>` logs it.
- #5: the first call of a stdio server that waited for the server's start showed the
  start as call time (`3397 ms + 1 ms start-up`): the wait for the session to be ready is
  start-up now (`startup_ms`, `fim.startup_cost`), apart from the call's own time, whether
  the call starts the server or waits for a start a run began in the background. The
  clock is fake: the times asserted are the ones the test advanced it by.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
from pathlib import Path
from typing import Any

import pytest

from fim import startup_cost
from fim.build.compile import compile_project
from fim.config.schema import StdioServer
from fim.events import ToolResultEvent
from fim.mcp.calls import call_tool
from fim.mcp.connection import ServerConnection
from fim.mcp.manager import McpManager
from fim.mcp.session import Session
from fim.testing.runs import run_events

STOCK = Path(__file__).parents[1] / "mcp_servers" / "stock54.py"
TOKEN = "wh-tok-54-9f8e7d6c5b4a"


def project(root: Path) -> Path:
    servers = {
        "inventory": {
            "command": sys.executable,
            "args": [str(STOCK)],
            "env": {"WAREHOUSE_TOKEN": "${N54_WAREHOUSE_TOKEN}"},
        }
    }
    (root / "fim.yaml").write_text(json.dumps({"name": "shop", "mcp_servers": servers}))
    (root / "agents").mkdir()
    (root / "agents" / "shop.yaml").write_text("model: scripted:shop.yaml\nmcp: [inventory]\n")
    call = (
        "{name: mcp, arguments: {subcommand: call, server: inventory, tool: get_stock, "
        "parameters: {sku: SKU-9}}}"
    )
    (root / "shop.yaml").write_text(f'- tool_calls: [{call}]\n- text: "no such SKU"\n')
    return root


async def test_a_failed_call_keeps_what_the_server_wrote_to_stderr(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
):
    monkeypatch.setenv("N54_WAREHOUSE_TOKEN", TOKEN)
    snapshot = compile_project(project(tmp_path))
    with caplog.at_level(logging.INFO, logger="fim.mcp.inventory"):
        events = await run_events(snapshot, "shop", "SKU-9 stock?")
    (result,) = [e for e in events if isinstance(e, ToolResultEvent)]
    assert result.is_error and "get_stock" in result.content
    assert "Traceback" not in result.content  # the model reads the server's answer only
    assert result.at == (
        "MCP server 'inventory' stderr: ValueError: unknown sku 'SKU-9'; known: SKU-1"
    )
    assert result.traceback is not None
    assert "Traceback (most recent call last)" in result.traceback
    assert "stock54: started" not in result.traceback  # written before the call
    assert TOKEN not in result.traceback and "warehouse token" in result.traceback
    logged = [r.getMessage() for r in caplog.records if r.name == "fim.mcp.inventory"]
    assert len(logged) == 1 and "unknown sku 'SKU-9'" in logged[0] and TOKEN not in logged[0]


def test_fim_run_v_prints_where_the_server_failed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    from typer.testing import CliRunner

    from fim.cli import app

    monkeypatch.setenv("N54_WAREHOUSE_TOKEN", TOKEN)
    root = project(tmp_path)
    result = CliRunner().invoke(app, ["run", "shop", "SKU-9 stock?", "-v", "-p", str(root)])
    out = result.output
    assert "at MCP server 'inventory' stderr: ValueError: unknown sku 'SKU-9'" in out, out
    assert TOKEN not in out


@pytest.fixture
async def stock() -> Any:
    manager = McpManager(Path(__file__).parents[1])
    yield manager.connection(
        "inventory", StdioServer(command=sys.executable, args=[str(STOCK)]), STOCK.parent
    )
    await manager.aclose()


@pytest.fixture
def fake_clock(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """`fim.startup_cost.clock`, advanced only where this test says: the server's start
    takes 3 s, each call 12 ms."""
    now = [100.0]
    monkeypatch.setattr(startup_cost, "clock", lambda: now[0])
    launch, submit = Session._launch, ServerConnection._submit

    async def started(self: Session) -> None:
        await launch(self)
        now[0] += 3.0

    async def answered(self: ServerConnection, *args: Any) -> Any:
        now[0] += 0.012
        return await submit(self, *args)

    monkeypatch.setattr(Session, "_launch", started)
    monkeypatch.setattr(ServerConnection, "_submit", answered)
    return now


async def timed(conn: ServerConnection, sku: str) -> tuple[float, float]:
    """(own ms, start-up ms) of one call, measured as the engine measures a tool call."""
    t0 = startup_cost.clock()
    waited = startup_cost.measuring()
    result = await call_tool(conn, "get_stock", {"sku": sku})
    assert not result.is_error, result.content
    own = startup_cost.clock() - t0 - waited[0]
    return round(own * 1000, 3), round(waited[0] * 1000, 3)


async def test_a_call_that_starts_its_server_counts_the_start_as_startup(
    stock: ServerConnection, fake_clock: list[float]
):
    first = await asyncio.create_task(timed(stock, "SKU-1"))  # a task: its own context
    second = await asyncio.create_task(timed(stock, "SKU-1"))
    assert first == (12.0, 3000.0)
    assert second == (12.0, 0.0)


async def test_a_call_waiting_for_a_start_begun_in_the_background_counts_the_wait(
    stock: ServerConnection, fake_clock: list[float]
):
    starting = asyncio.create_task(stock.start())  # as a run does with cached tool lists
    await asyncio.sleep(0)  # it holds the start's lock
    assert await asyncio.create_task(timed(stock, "SKU-1")) == (12.0, 3000.0)
    await starting
