"""A server's sampling request is masked before it reaches the model provider, as a tool
result is (attack-55 F3): the server wrote the text, and a server asked to summarise a
config it holds sent a connector's token to the operator's provider verbatim. The run is
told with a notice, as for a masked tool result."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from fim.config.schema import StdioServer
from fim.events import Notice
from fim.llm.scripted import ScriptedModel, text
from fim.masking import Masker
from fim.mcp.caller import Caller
from fim.mcp.calls import call_tool
from fim.mcp.manager import McpManager
from fim.observe.context import current_events
from tests.mcp_servers.harness import stdio_decl

pytestmark = pytest.mark.asyncio
ROOT = Path(__file__).parents[1]
TOKEN = "connsec-Pq03Xw7LmN"


async def test_a_secret_in_a_sampling_request_is_masked_and_the_run_told():
    model = ScriptedModel([text("summarised")], name="fast")
    mask = Masker([TOKEN]).text
    run = Caller(run_id="r1", agent="a", services=None, mask=mask, sampling=lambda: model)
    seen: list[Any] = []
    manager = McpManager(ROOT)
    token = current_events.set(seen.append)
    try:
        conn = manager.connection("demo", StdioServer(**stdio_decl()), ROOT)
        question = f"summarise this config: password={TOKEN}"
        result = await call_tool(conn, "ask_model", {"question": question}, run)
    finally:
        current_events.reset(token)
        await manager.aclose()
    assert result.content == "fast said: summarised"
    [(messages, _tools)] = model.requests
    assert TOKEN not in str([m.content for m in messages])
    assert messages[-1].content == "summarise this config: password=***"
    [notice] = [e for e in seen if isinstance(e, Notice)]
    assert notice.message == (
        "a secret in MCP server 'demo's sampling request was masked before it was sent to the model"
    )
    assert notice.data["masked"] == "sampling"
