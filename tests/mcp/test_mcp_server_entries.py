"""`mcp_servers:` entries: fim's own shape, the Claude `.mcp.json` entry shape, and one
clear error for a wrong entry (not one per possible shape)."""

from __future__ import annotations

import pytest
from pydantic import TypeAdapter, ValidationError

from fim.config.schema import HttpServer, McpServer, StdioServer


def test_default_timeout_is_longer():
    assert StdioServer(command="x").timeout == 120.0


def test_the_claude_mcp_json_entry_shape_is_accepted():
    adapter = TypeAdapter(dict[str, McpServer])
    servers = adapter.validate_python(
        {
            "fs": {"type": "stdio", "command": "npx", "args": ["-y", "x"], "env": {"A": "1"}},
            "web": {"type": "http", "url": "https://h/mcp", "headers": {"X": "y"}},
            "old": {"type": "sse", "url": "https://h/sse"},
        }
    )
    assert servers["fs"] == StdioServer(command="npx", args=["-y", "x"], env={"A": "1"})
    assert servers["web"] == HttpServer(url="https://h/mcp", headers={"X": "y"})
    assert servers["old"].transport == "sse"


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"type": "stdio", "args": []}, "an MCP server needs `command`"),
        ({"type": "ws", "url": "x"}, "unknown MCP server type 'ws'"),
        ({"command": "x", "bogus": 1}, "Extra inputs are not permitted"),
    ],
)
def test_a_wrong_server_entry_gets_one_error(entry, message):
    with pytest.raises(ValidationError) as info:
        TypeAdapter(dict[str, McpServer]).validate_python({"s": entry})
    assert len(info.value.errors()) == 1
    assert message in str(info.value)
