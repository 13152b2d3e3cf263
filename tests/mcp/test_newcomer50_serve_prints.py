"""`fim mcp serve` keeps its stdout the JSON-RPC stream while the project's Python prints
(newcomer-50 #1): Claude Code and Cursor read every stdout line as a message, so one line
of an ADK tutorial tool's `print()` made the official client log "Failed to parse JSONRPC
message", and a stricter one drops the connection. Here a tool prints `{`, writes to fd 1
itself and starts a child that inherits fd 1; the official `mcp` stdio client sees only
messages, and what went around Python's print is on the server's stderr."""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from tests.commands.test_newcomer50_tool_prints import SECRET, write_project

REPO = Path(__file__).resolve().parents[2]


def test_the_official_stdio_client_reads_only_messages_while_tools_print(tmp_path: Path) -> None:
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters, stdio_client

    root = write_project(tmp_path / "p")
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "fim.cli", "--project", str(root), "mcp", "serve", "--no-reload"],
        env={**os.environ, "PYTHONPATH": str(REPO), "N50_KEY": SECRET},
        cwd=str(root),
    )
    faults: list[Exception] = []

    async def on_message(message: Any) -> None:
        if isinstance(message, Exception):  # a stdout line that is no JSON-RPC message
            faults.append(message)

    def text_of(result: Any) -> str:
        assert not result.is_error, result
        return "".join(c.text for c in result.content if c.type == "text")

    async def main(errlog: Any) -> tuple[str, str]:
        async with Client(
            stdio_client(params, errlog=errlog), message_handler=on_message
        ) as client:
            weather = await client.call_tool("weather", {"input": "Weather in London?"})
            raw = await client.call_tool("raw", {"input": "go"})
            return text_of(weather), text_of(raw)

    with tempfile.TemporaryFile("w+") as errlog:
        weather, raw = asyncio.run(asyncio.wait_for(main(errlog), 90))
        errlog.seek(0)
        stderr = errlog.read()
    assert faults == []
    assert weather.startswith("It is sunny in London.") and raw.startswith("Done writing.")
    for written in ("os.write to fd 1: n50", "sys.__stdout__: n50", "a child inheriting fd 1: n50"):
        assert written in stderr
    assert SECRET not in stderr
