"""What a stdio MCP server leaves running (a child, a grandchild whose parent exited, both
in the server's process group) ends when fim closes the connection: a run's end, a crash
of the server, as well as a server that lingers (attack-54 F3). The SDK alone closed the
server's stdin and, the server having exited, left its processes running; and a crashed
server whose processes held its stdout open was noticed only when the call timed out."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

import pytest

from fim.config.schema import StdioServer
from fim.mcp.calls import call_tool
from fim.mcp.manager import McpManager

pytestmark = pytest.mark.asyncio
ROOT = Path(__file__).parents[1]
FORKS = ROOT / "mcp_servers" / "forks.py"


def _decl(pids: Path) -> StdioServer:
    return StdioServer(command=sys.executable, args=[str(FORKS)], env={"FORKS_PIDS": str(pids)})


def _running(pid: int) -> bool:
    """Whether `pid` runs (a zombie nobody reaped yet has ended)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] != "Z"


def _left(pids: Path) -> list[int]:
    return [int(line) for line in pids.read_text().split()]


async def _still_running(pids: list[int]) -> list[int]:
    """Those of `pids` still running once a killed process has had ample time to exit (a
    bounded poll of /proc: a kill takes effect when the process is next scheduled)."""
    for _ in range(1000):
        running = [pid for pid in pids if _running(pid)]
        if not running:
            return []
        await asyncio.sleep(0.01)
    return running


@pytest.fixture
def pids(tmp_path: Path):
    """The file the server writes its processes' pids to; whatever is left of them is
    killed after the test, so a failing test leaves nothing behind."""
    path = tmp_path / "pids"
    path.touch()
    yield path
    for pid in _left(path):
        if _running(pid):
            os.kill(pid, signal.SIGKILL)


async def test_closing_the_connection_ends_what_the_server_left_running(pids: Path):
    manager = McpManager(ROOT)
    conn = manager.connection("forks", _decl(pids), ROOT)
    assert (await call_tool(conn, "echo", {"text": "hi"})).content == "hi"
    left = _left(pids)
    assert len(left) == 2 and all(_running(pid) for pid in left)
    await manager.aclose()  # what the end of `fim run` and `fim serve`'s shutdown do
    assert await _still_running(left) == []


async def test_a_crashed_server_s_processes_end_and_a_restart_s_with_its_close(pids: Path):
    manager = McpManager(ROOT)
    try:
        conn = manager.connection("forks", _decl(pids), ROOT)
        crashed = await call_tool(conn, "crash", {})
        # what it left holds its stdout open: its end is seen by its exit, not a timeout
        assert crashed.is_error and "stopped during the call" in crashed.content
        first = _left(pids)
        assert len(first) == 2
        assert await _still_running(first) == []  # before anything closes the manager
        assert (await call_tool(conn, "echo", {"text": "again"})).content == "again"
        assert conn.starts == 2
        second = [pid for pid in _left(pids) if pid not in first]
        assert len(second) == 2 and all(_running(pid) for pid in second)
    finally:
        await manager.aclose()
    assert await _still_running(second) == []
