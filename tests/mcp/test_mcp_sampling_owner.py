"""Whose model serves an MCP server's sampling request, against the real demo server over
stdio.

A connection is shared by every run and key (`scope: project`), and the request names no
tool call. So fim serves it with the `fast` model of the one run whose requests are in
flight on the connection, under that run's key (its budgets pay), and declines it, with
an MCP error the server sees, when no run or several runs are in flight: a bystander's
budget never pays, and nothing is served unmetered.
"""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import Any

import mcp_types
import pytest
import pytest_asyncio

from fim.config.schema import StdioServer
from fim.events import Notice
from fim.llm.scripted import ScriptedModel, text
from fim.locks import current_owner
from fim.mcp.caller import Caller
from fim.mcp.calls import call_tool
from fim.mcp.connection import ServerConnection
from fim.mcp.manager import McpManager
from fim.mcp.sampling import sampling_callback
from fim.observe.context import current_events
from fim.types import Message, ModelResponse, ToolSpec
from tests.mcp_servers.harness import stdio_decl

pytestmark = pytest.mark.asyncio(loop_scope="module")
ROOT = Path(__file__).parents[1]


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def demo():
    manager = McpManager(ROOT)
    conn = manager.connection("demo", StdioServer(**stdio_decl(timeout=60.0)), ROOT)
    await conn.start()
    yield conn
    await manager.aclose()


class Fast:
    """A run's `fast` model: answers with its run's name and notes the key it ran under."""

    def __init__(self, run: str) -> None:
        self.inner = ScriptedModel([text(f"{run} answers")] * 5, name=f"fast-{run}")
        self.name = self.inner.name
        self.owners: list[str] = []

    async def complete(
        self, messages: list[Message], tools: list[ToolSpec] | None = None, **options: Any
    ) -> ModelResponse:
        self.owners.append(current_owner.get())
        return await self.inner.complete(messages, tools, **options)


def run(run_id: str, fast: Fast) -> Caller:
    return Caller(
        run_id=run_id,
        agent="a",
        services=None,
        mask=lambda t: t,
        owner=f"key-of-{run_id}",
        sampling=lambda: fast,
    )


async def test_sampling_is_served_by_the_model_of_the_run_whose_call_asked(
    demo: ServerConnection,
):
    """Run B used the server before (so a shared setting would have been its); run A's
    call asks, so A's model answers, under A's key, and B's is never called."""
    fast_a, fast_b = Fast("run-a"), Fast("run-b")
    assert (await call_tool(demo, "echo", {"text": "hi"}, run("run-b", fast_b))).content == "hi"
    result = await call_tool(demo, "ask_model", {"question": "q"}, run("run-a", fast_a))
    assert result.content == "fast-run-a said: run-a answers", result.content
    assert fast_a.owners == ["key-of-run-a"]  # the asking key's budget, not the task's
    assert fast_b.owners == []
    assert current_owner.get() == ""


async def test_sampling_while_several_runs_use_the_server_is_declined(demo: ServerConnection):
    """Two runs' calls in flight: fim cannot tell which asked, so neither run's model is
    called; the server gets an error saying why, and the asking run a notice."""
    fast_a, fast_b = Fast("run-a"), Fast("run-b")
    other = asyncio.create_task(call_tool(demo, "slow", {"seconds": 60}, run("run-b", fast_b)))
    while not demo.inflight():
        await asyncio.sleep(0.01)
    events: list[Any] = []
    current_events.set(events.append)
    try:
        result = await call_tool(demo, "ask_model", {"question": "q"}, run("run-a", fast_a))
    finally:
        other.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await other
    assert result.is_error
    assert "fim cannot tell which run this sampling request is for" in result.content
    assert "requests of several runs are in flight" in result.content
    assert fast_a.owners == [] and fast_b.owners == []
    [notice] = [e for e in events if isinstance(e, Notice)]
    assert notice.data["sampling"] == "declined" and notice.run_id == "run-a"
    assert "asked for a model completion (sampling) during the call; declined" in notice.message


async def test_sampling_with_no_run_in_flight_is_declined(demo: ServerConnection):
    """A call made outside any run (a workflow's MCP node, fim's own tooling) has no run's
    budget to hold the sampling to, so it is declined rather than served unmetered; so is
    a request that comes when nothing at all is in flight."""
    result = await call_tool(demo, "ask_model", {"question": "q"})
    assert result.is_error
    assert (
        "fim cannot tell which run this sampling request is for: no tool call of a run is in "
        "flight" in result.content
    ), result.content

    assert demo.inflight() == []
    params = mcp_types.CreateMessageRequestParams(
        messages=[
            mcp_types.SamplingMessage(
                role="user", content=mcp_types.TextContent(type="text", text="hello?")
            )
        ],
        max_tokens=10,
    )
    answer = await sampling_callback(demo)(None, params)
    assert isinstance(answer, mcp_types.ErrorData)
    assert answer.message == (
        "fim cannot tell which run this sampling request is for: no tool call of a run is in flight"
    )


async def test_a_run_without_a_metered_model_is_not_served(demo: ServerConnection):
    """A run whose budgets are not built yet (no `fast` model) is never served unmetered."""
    nothing = Caller(run_id="r", agent="a", services=None, mask=str, sampling=lambda: None)
    result = await call_tool(demo, "ask_model", {"question": "q"}, nothing)
    assert result.is_error and "run r has no metered model to serve sampling" in result.content
