"""An MCP server whose tool names are too long for a provider (tests/mcp/test_mcp_long_names.py).

Run as `python tests/mcp_servers/longnames.py MARKS` (stdio). Its two destructive tools,
`records_maintenance_and_housekeeping_operations_permanently_delete_all` and `..._one`,
share their first 59 characters, so `srv__<tool>` shares its first 64; each call of one
writes a file named after it into the folder `MARKS`, so a test sees what really ran.
"""

from __future__ import annotations

import contextlib
import sys
import uuid
from pathlib import Path

if __name__ == "__main__":  # first: under a test process, a warm process runs this server
    with contextlib.suppress(ImportError):  # a copy of this script elsewhere runs as it is
        __import__("launch").relay(__file__)

from mcp.server.mcpserver import MCPServer

STEM = "records_maintenance_and_housekeeping_operations_permanently"
DELETE_ALL = f"{STEM}_delete_all"
DELETE_ONE = f"{STEM}_delete_one"


def build(marks: Path) -> MCPServer:
    server = MCPServer("longnames", log_level="WARNING")

    def ran(tool: str) -> str:
        (marks / f"{tool}-{uuid.uuid4().hex}").write_text(tool)
        return f"{tool} RAN"

    @server.tool(name=DELETE_ALL, description="Delete every record (destructive)")
    def delete_all(note: str = "") -> str:
        return ran(DELETE_ALL)

    @server.tool(name=DELETE_ONE, description="Delete one record (destructive)")
    def delete_one(note: str = "") -> str:
        return ran(DELETE_ONE)

    return server


if __name__ == "__main__":
    build(Path(sys.argv[1])).run("stdio")
