"""An MCP server that keeps state between calls (tests/mcp/test_mcp_scope.py), as a browser, a
filesystem or a memory server does: what one caller left, the next one reads.

Run as `python tests/mcp_servers/notes.py` (stdio). Its tools: `remember(text)` keeps a
note, `recall()` answers every note kept so far, one a line, and `pid()` its process id.
"""

from __future__ import annotations

import contextlib
import os

if __name__ == "__main__":  # first: under a test process, a warm process runs this server
    with contextlib.suppress(ImportError):  # a copy of this script elsewhere runs as it is
        __import__("launch").relay(__file__)

from mcp.server.mcpserver import MCPServer

server = MCPServer("notes", log_level="WARNING")
notes: list[str] = []


@server.tool(description="Keep a note")
def remember(text: str) -> str:
    notes.append(text)
    return "kept"


@server.tool(description="Every note kept so far")
def recall() -> str:
    return "\n".join(notes) or "(no notes)"


@server.tool(description="This server's process id")
def pid() -> str:
    return str(os.getpid())


if __name__ == "__main__":
    server.run("stdio")
