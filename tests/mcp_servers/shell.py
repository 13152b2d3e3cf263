"""A shell MCP server (`run_command`), the kind an agent gets with `mcp: [sh]`: what a
PreToolUse guard must hold against, whatever route the call takes."""

from __future__ import annotations

import contextlib
import subprocess

if __name__ == "__main__":  # first: under a test process, a warm process runs this server
    with contextlib.suppress(ImportError):  # a copy of this script elsewhere runs as it is
        __import__("launch").relay(__file__)

from mcp.server.mcpserver import MCPServer

server = MCPServer("sh", instructions="Runs shell commands", log_level="WARNING")


@server.tool(description="Run a shell command in the working directory and return its output")
def run_command(command: str) -> str:
    done = subprocess.run(command, shell=True, capture_output=True, text=True, timeout=20)
    return f"exit {done.returncode}\n{done.stdout}{done.stderr}"


if __name__ == "__main__":
    server.run()
