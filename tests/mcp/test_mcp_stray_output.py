"""What a stdio MCP server writes besides its answers does not cost fim the connection
(attack-55 F2, F4). A byte that is not UTF-8 (a Latin-1 file's contents, a `print` of
bytes) killed the SDK's strict reader without a word: that call and every later one on the
shared connection, of every run, waited out its whole timeout. A line that is not JSON-RPC
printed the SDK's traceback on `fim run`'s terminal, one per line."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import pytest

from fim.config.schema import StdioServer
from fim.mcp.calls import call_tool
from fim.mcp.manager import McpManager

pytestmark = pytest.mark.asyncio
ROOT = Path(__file__).parents[1]
HOSTILE = ROOT / "mcp_servers" / "hostile.py"


def _hostile(mode: str, n: int = 1) -> StdioServer:
    # a reader that died makes the call wait this out, and fail as not answering
    return StdioServer(command=sys.executable, args=[str(HOSTILE), mode, str(n)], timeout=30)


async def test_a_byte_that_is_not_utf8_is_replaced_and_the_connection_goes_on():
    manager = McpManager(ROOT)
    try:
        conn = manager.connection("latin", _hostile("latin1"), ROOT)
        odd = await call_tool(conn, "bad", {})
        after = await call_tool(conn, "echo", {"text": "still here"})
    finally:
        await manager.aclose()
    assert (odd.is_error, odd.content) == (False, "caf\ufffd")
    assert (after.is_error, after.content, conn.starts) == (False, "still here", 1)


async def test_lines_that_are_not_json_rpc_are_one_warning_each_without_a_traceback(caplog):
    caplog.set_level(logging.WARNING)
    manager = McpManager(ROOT)
    try:
        conn = manager.connection("noisy", _hostile("noise", 2), ROOT)
        answer = await call_tool(conn, "echo", {"text": "hi"})
    finally:
        await manager.aclose()
    assert answer.content == "hi"
    said = [r for r in caplog.records if r.name.startswith("mcp.")]
    assert said and all(r.exc_info is None and r.exc_text is None for r in said)
    assert {r.getMessage() for r in said} == {
        "an MCP server wrote a line that is not JSON-RPC: '--- Tool: called ---'"
    }
