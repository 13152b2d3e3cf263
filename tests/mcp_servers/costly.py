"""An MCP server whose schemas cost a validator hours (tests/mcp/test_mcp_checks.py).

Run as `python tests/mcp_servers/costly.py DEPTH` (stdio). Its tools:

- `lookup(query)`: a flat input schema; its output schema is `DEPTH` levels of `$ref`'d
  `anyOf` (three branches a level, two failing only after checking everything below), and
  it answers a value `DEPTH` levels deep that matches: checking it does 3**DEPTH levels of
  work (depth 12 took 11 s).
- `store(doc)`: the same costly schema as its *input*: a model that sends a deep `doc`
  (the tool's description asks for one) makes the check as costly.
- `count(n)`: an honest output schema (`{"total": integer}`) it breaks when `n` < 0.
- `noisy(kilobytes)`: writes that much to stderr, numbered lines of 1,024 bytes.
- `bloated(choice)`: an input schema of 10,000 options (~160,000 characters), which every
  model call of a legacy-mode agent would carry.
"""

from __future__ import annotations

import contextlib
import sys
from typing import Any

if __name__ == "__main__":  # first: under a test process, a warm process runs this server
    with contextlib.suppress(ImportError):  # a copy of this script elsewhere runs as it is
        __import__("launch").relay(__file__)

from mcp.server.mcpserver import MCPServer


def costly_schema(depth: int) -> dict[str, Any]:
    """A few kilobytes of `$ref`'d `anyOf`: three branches a level, two of which fail only
    after checking everything below them, so checking a `depth`-deep value does 3**depth
    levels of work (depth 12 took a validator 11 s; depth 20 would take days). Also a
    caller's `response_format` in tests/attacks/test_attack_limits.py."""
    defs: dict[str, Any] = {"L0": {"type": "object"}}
    for i in range(1, depth + 1):
        below = {"a": {"$ref": f"#/$defs/L{i - 1}"}}
        defs[f"L{i}"] = {
            "anyOf": [
                {"properties": below, "required": ["zz"]},
                {"properties": below, "required": ["yy"]},
                {"properties": below},
            ]
        }
    return {"type": "object", "$defs": defs, "$ref": f"#/$defs/L{depth}"}


def deep_value(depth: int) -> dict[str, Any]:
    value: dict[str, Any] = {}
    for _ in range(depth):
        value = {"a": value}
    return value


def build(depth: int) -> MCPServer:
    server = MCPServer("costly", log_level="WARNING")

    @server.tool(description="Look something up", structured_output=True)
    def lookup(query: str) -> dict[str, Any]:
        return deep_value(depth)

    @server.tool(description='Store a document: send doc as {"a": {"a": ...}}, deeply nested')
    def store(doc: dict[str, Any]) -> str:
        return "stored"

    @server.tool(description="Take one of very many options")
    def bloated(choice: str) -> str:
        return choice

    @server.tool(description="Write n kilobytes to stderr")
    def noisy(kilobytes: int) -> str:
        for n in range(kilobytes):
            sys.stderr.write(f"{n:09d} " + "." * 1013 + "\n")
        sys.stderr.flush()
        return "written"

    @server.tool(description="Count to n", structured_output=True)
    def count(n: int) -> dict[str, Any]:
        return {"total": n} if n >= 0 else {"total": "negative"}

    tools = server._tool_manager
    # the listed schemas, as a hostile server would declare them (the SDK derives them from
    # the functions' types; its own checks of the values use those types)
    tools.get_tool("lookup").__dict__["output_schema"] = costly_schema(depth)
    tools.get_tool("store").parameters = {
        "type": "object",
        "$defs": costly_schema(depth)["$defs"],
        "properties": {"doc": {"$ref": f"#/$defs/L{depth}"}},
        "required": ["doc"],
    }
    tools.get_tool("bloated").parameters = {
        "type": "object",
        "properties": {"choice": {"enum": [f"option-{n:06d}" for n in range(10_000)]}},
    }
    tools.get_tool("count").__dict__["output_schema"] = {
        "type": "object",
        "properties": {"total": {"type": "integer"}},
        "required": ["total"],
    }
    return server


if __name__ == "__main__":
    build(int(sys.argv[1]) if len(sys.argv) > 1 else 13).run("stdio")
