"""MCP progress: notifications become `ToolProgress` events of the run and extend the
call's idle deadline, under a hard maximum. Against the real demo server over stdio; the
deadline arithmetic itself with an injected clock."""

from __future__ import annotations

import asyncio
import json
import sys
import textwrap
from pathlib import Path

import pytest

from fim.build.compile import compile_project
from fim.config.schema import StdioServer
from fim.events import ToolProgress, ToolResultEvent
from fim.mcp.calls import call_tool
from fim.mcp.deadline import CallDeadline
from fim.mcp.manager import McpManager
from fim.testing.runs import run_events
from tests.mcp_servers.harness import DEMO

ROOT = Path(__file__).parents[1]


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


async def test_the_idle_deadline_moves_with_progress_under_a_hard_cap():
    clock = FakeClock()
    deadline = CallDeadline(idle=10, hard=25, clock=clock)
    clock.now += 9
    assert deadline.remaining() == 1
    deadline.touch()  # progress: ten more idle seconds
    clock.now += 9
    assert deadline.remaining() == 1
    deadline.touch()
    clock.now += 6  # 24 s in all: the hard cap is nearer than the idle limit
    deadline.touch()
    assert deadline.remaining() == 1
    clock.now += 1
    assert deadline.remaining() == 0
    assert "hard limit of 25s" in deadline.expired_reason()


async def test_waiting_for_a_human_stops_both_clocks():
    clock = FakeClock()
    deadline = CallDeadline(idle=10, hard=20, clock=clock)
    clock.now += 5
    deadline.pause()
    clock.now += 1000  # a human took their time
    assert deadline.remaining() is None
    deadline.resume()
    assert deadline.remaining() == 10  # the answer counts as a sign of life
    clock.now += 10
    assert deadline.remaining() == 0
    assert deadline.expired_reason() == "no answer or progress within 10s"


async def test_a_server_reporting_progress_forever_is_cut_off_at_the_hard_maximum():
    manager = McpManager(ROOT)
    decl = StdioServer(command=sys.executable, args=[str(DEMO)], timeout=0.5, max_timeout=1.0)
    conn = manager.connection("demo", decl, ROOT)
    try:
        # progress every 0.1 s for 30 s: never idle for 0.5 s, but over the 1 s cap
        result = await call_tool(conn, "progress", {"steps": 300, "delay": 0.1})
        assert result.is_error, result.content
        assert "did not finish within its hard limit of 1s" in result.content
        assert "although it reported progress" in result.content
        assert result.metadata["progress"]  # it did report progress
    finally:
        await manager.aclose()


def write_project(root: Path) -> Path:
    servers = {"demo": {"command": sys.executable, "args": [str(DEMO)], "timeout": 1.5}}
    (root / "fim.yaml").write_text(json.dumps({"name": "p", "mcp_servers": servers}))
    (root / "agents").mkdir()
    (root / "agents" / "worker.yaml").write_text(
        textwrap.dedent(
            """
            instructions: Work.
            model: openai/gpt-4o-mini
            mcp: [demo]
            tool_timeout: 0.2
            """
        )
    )
    return root


async def test_progress_reaches_the_run_as_events_and_outlives_the_agents_tool_timeout(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    from fim.commands.run_view import EventPrinter
    from fim.llm.scripted import ScriptedModel, text, tool_call

    snapshot = compile_project(write_project(tmp_path))
    call = {
        "subcommand": "call",
        "server": "demo",
        "tool": "progress",
        "parameters": {"steps": 4, "delay": 0.15},
    }
    model = ScriptedModel([tool_call("mcp", call), text("done")])
    events = await run_events(snapshot, "worker", "go", model=model)

    result = next(e for e in events if isinstance(e, ToolResultEvent))
    # 0.6 s in all, three times the agent's 0.2 s tool_timeout: MCP calls keep their own
    assert not result.is_error and result.content == "done after 4 steps", result.content
    progress = [e for e in events if isinstance(e, ToolProgress)]
    assert [(p.progress, p.total, p.message) for p in progress][-1] == (4, 4, "step 4")
    assert all(p.call_id == result.call_id and p.run_id == result.run_id for p in progress)
    assert {p.name for p in progress} == {"demo__progress"}
    assert events.index(progress[-1]) < events.index(result)

    printer = EventPrinter()
    printer.show(progress[-1])
    assert "demo__progress 4/4 step 4" in capsys.readouterr().err
    await asyncio.sleep(0)
