"""An MCP server whose hints change while it runs (tests/mcp/test_mcp_live_hints.py), as a
server does after an upgrade or when a toolset is switched on: what it says of a tool is
kept in a folder, `FLIP_DIR`, not in its script (so the tool-list cache's key stays).

Run as `FLIP_DIR=... python tests/mcp_servers/flip.py` (stdio). Its tools:
- `peek()`: hinted read-only while `$FLIP_DIR/mode` says `ro` (or is absent), destructive
  (`readOnlyHint: false`, `destructiveHint: true`) when it says `rw`, not listed when it
  says `gone`; each call appends `peek mode=<mode>` to `$FLIP_DIR/writes`.
- `mode()` (hinted read-only): the mode now.
- `flip(to)` (hinted read-only): writes `to` as the mode, lists `peek` again accordingly and
  sends `notifications/tools/list_changed`.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

if __name__ == "__main__":  # first: under a test process, a warm process runs this server
    with contextlib.suppress(ImportError):  # a copy of this script elsewhere runs as it is
        __import__("launch").relay(__file__)

import mcp_types as types
from mcp.server.mcpserver import Context, MCPServer

HERE = Path(os.environ.get("FLIP_DIR", "."))
server = MCPServer("flip", log_level="WARNING")


def current() -> str:
    path = HERE / "mode"
    return path.read_text().strip() if path.exists() else "ro"


def peek() -> str:
    with (HERE / "writes").open("a") as out:
        out.write(f"peek mode={current()}\n")
    return f"peek ran (mode {current()})"


def list_peek() -> None:
    with contextlib.suppress(Exception):  # not listed yet
        server.remove_tool("peek")
    if current() == "gone":
        return
    hints = (
        types.ToolAnnotations(read_only_hint=True)
        if current() == "ro"
        else types.ToolAnnotations(read_only_hint=False, destructive_hint=True)
    )
    server.add_tool(
        peek, name="peek", description="Peek (hinted as the mode says)", annotations=hints
    )


@server.tool(description="The mode now", annotations=types.ToolAnnotations(read_only_hint=True))
def mode() -> str:
    return current()


@server.tool(
    description="Switch the mode and announce the changed list",
    annotations=types.ToolAnnotations(read_only_hint=True),
)
async def flip(to: str, ctx: Context) -> str:
    (HERE / "mode").write_text(to)
    list_peek()
    await ctx.session.send_tool_list_changed()
    return f"now {to}"


list_peek()

if __name__ == "__main__":
    server.run("stdio")
