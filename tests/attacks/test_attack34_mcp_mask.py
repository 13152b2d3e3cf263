"""attack-34 #8: an MCP server's tool names are its own text, and a server started with a
secret in its `env:` can print the secret there. Every log line about a tool that is not
offered shows its name through the connection's mask, masked whole before it is cut."""

from __future__ import annotations

import logging
from pathlib import Path

import mcp_types as types
import pytest

from fim.config.schema import StdioServer
from fim.mcp.manager import McpManager
from fim.mcp.tool_list import ToolList

SECRET = "sktok0123456789abcdefSECRET"
SCHEMA = {"type": "object", "properties": {"text": {"type": "string"}}}
BLOATED = {
    "type": "object",
    "properties": {f"p{i}": {"description": "x" * 100} for i in range(700)},
}


def connection(root: Path) -> ToolList:
    decl = StdioServer(command="true")
    return McpManager(root).connection("h", decl, root, mask=lambda t: t.replace(SECRET, "***"))


def warned(caplog: pytest.LogCaptureFixture) -> str:
    return "\n".join(r.getMessage() for r in caplog.records if r.name == "fim.mcp.tool_list")


def test_a_tool_with_an_oversized_schema_is_named_masked(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    conn = connection(tmp_path)
    tools = [
        types.Tool(name=f"a_{SECRET}", input_schema=BLOATED),
        types.Tool(name=f"b_{SECRET}", input_schema=SCHEMA, output_schema=BLOATED),
    ]
    with caplog.at_level(logging.INFO, logger="fim.mcp.tool_list"):
        page = conn._keep(tools, 10**7)
    assert page.kept == []
    text = warned(caplog)
    assert "tool 'a_***' is not offered: its input schema has" in text
    assert "tool 'b_***' is not offered: its output schema has" in text
    assert "sktok" not in text


def test_a_tool_that_requires_tasks_is_named_masked(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    conn = connection(tmp_path)
    required = types.ToolExecution(task_support="required")
    tools = [
        types.Tool(name=f"t_{SECRET}", input_schema=SCHEMA, execution=required),
        types.Tool(name=f"{'x' * 30} {SECRET}", input_schema=SCHEMA, execution=required),
    ]
    with caplog.at_level(logging.INFO, logger="fim.mcp.tool_list"):
        conn._keep(tools, 10**7)
    text = warned(caplog)
    assert "tool 't_***' requires task-augmented execution" in text
    assert f"tool {'x' * 30 + ' ***'!r} requires task-augmented execution" in text
    assert "sktok" not in text


def test_a_misnamed_tool_is_masked_before_its_name_is_cut(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The secret crosses the 40th character: cut first, `sktok0123` showed."""
    conn = connection(tmp_path)
    tools = [
        types.Tool(name=f"{'x' * 30} {SECRET}", input_schema=SCHEMA),
        types.Tool(name=f"{'y' * 45} {SECRET}", input_schema=SCHEMA),
    ]
    with caplog.at_level(logging.INFO, logger="fim.mcp.tool_list"):
        page = conn._keep(tools, 10**7)
    conn._warn_misnamed(page.misnamed)
    text = warned(caplog)
    assert "2 tools are not offered: a tool name must be" in text
    assert f"{'x' * 30 + ' ***'!r}, {'y' * 40!r}..." in text
    assert "sktok" not in text
