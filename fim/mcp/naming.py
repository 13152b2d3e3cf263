"""How an MCP tool is named and typed as a fim tool.

Its own module because the name is shared by every path (legacy tools, the meta-tool's
hook view, progress events, `fim mcp tools`) and follows the providers' function-name rules,
which change for reasons of their own.
"""

from __future__ import annotations

import re
from typing import Any

from fim.tools.naming import tool_name as shortened
from fim.types import JSONSchema

_MCP_NAME = re.compile(r"[A-Za-z0-9_.-]{1,128}")


def conforming(name: str) -> bool:
    """Whether `name` follows MCP's rule for tool names (spec 2025-11-25: 1 to 128 of
    `A-Z a-z 0-9 _ - .`). fim offers no other: a server's name goes whole into places the
    model trusts more than a tool result (the system prompt's stub, `discover`), and one of
    400 KB or with new lines and markdown in it is no tool name (attack-32 #2, #3)."""
    return _MCP_NAME.fullmatch(name) is not None


def tool_name(server: str, tool: str) -> str:
    """`{server}__{tool}` as the model calls it: made safe for every provider's
    function-name rules (64 chars of `[a-zA-Z0-9_-]`) by the rule connectors' actions follow
    (`fim.tools.naming.tool_name`: a longer or changed name keeps 54 characters and a digest
    of the whole), so two tools sharing their first 64 characters never share a name, and
    legacy mode, the `mcp` meta-tool's hook view and `fim mcp tools` agree on it. Hooks also
    try their matchers on `full_name(server, tool)` (`fim.hooks.claude.names_of`)."""
    return shortened(server, tool)


def full_name(server: str, tool: str) -> str:
    """`{server}__{tool}` as the server names the tool: what `fim mcp tools` shows beside a
    shortened `tool_name`."""
    return f"{server}__{tool}"


def input_parameters(schema: dict[str, Any]) -> JSONSchema:
    """An MCP `inputSchema` as a fim parameters schema (always an object schema)."""
    params = dict(schema or {})
    params["type"] = "object"
    params.setdefault("properties", {})
    params.pop("$schema", None)
    return params
