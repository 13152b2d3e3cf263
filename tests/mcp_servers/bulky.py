"""An MCP server whose answers hold as much as its caller asks (tests/mcp/test_mcp_capped.py):
well-formed, over stdio or HTTP, only more than fim reads of one answer.

Run as `python tests/mcp_servers/bulky.py [--http PORT] [--json]`, as the demo server
(`--many` is ignored). Its tools:

- `echo(text)`: the text unchanged.
- `blocks(count)`: `count` empty text blocks (500,000 held fim's event loop 5 s).
- `nested(depth)`: a structured result `depth` levels deep.
"""

from __future__ import annotations

import argparse
import contextlib
from typing import Any

if __name__ == "__main__":  # first: under a test process, a warm process runs this server
    with contextlib.suppress(ImportError):  # a copy of this script elsewhere runs as it is
        __import__("launch").relay(__file__)

import mcp_types as types
from demo import serve_http
from mcp.server.mcpserver import MCPServer


def build() -> MCPServer:
    server = MCPServer("bulky", log_level="WARNING")

    @server.tool(description="Return the text unchanged")
    def echo(text: str) -> str:
        return text

    @server.tool(description="Answer with `count` empty text blocks")
    def blocks(count: int) -> list[types.ContentBlock]:
        return [types.TextContent(type="text", text="") for _ in range(count)]

    @server.tool(description="Answer with a structured value `depth` levels deep")
    def nested(depth: int) -> dict[str, Any]:
        value: dict[str, Any] = {}
        for _ in range(depth):
            value = {"a": value}
        return value

    return server


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--http", type=int, default=0, help="serve HTTP on this port")
    parser.add_argument("--many", type=int, default=0, help="ignored (the demo's option)")
    parser.add_argument("--json", action="store_true", help="answer in JSON, not SSE")
    opts = parser.parse_args()
    if opts.http:
        serve_http(build(), opts.http, opts.json)
    else:
        build().run("stdio")


if __name__ == "__main__":
    main()
