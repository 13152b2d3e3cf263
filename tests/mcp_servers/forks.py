"""An MCP server that leaves processes behind, as wrapper launchers (`sh -c`, `npx`, `uvx`)
and servers starting a browser or a helper do: on start it runs `sleep 300` as a child and
`sleep 300` as an orphaned grandchild (its `sh` parent exits at once), both in the server's
process group, and appends their pids, one a line, to the file `FORKS_PIDS` names.

Run as `python tests/mcp_servers/forks.py` over stdio. Not through the test zygote
(`launch.relay`): a forked server would not be in the group fim started.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from mcp.server.mcpserver import MCPServer


def _leave_processes() -> list[int]:
    child = subprocess.Popen(["sleep", "300"], stdin=subprocess.DEVNULL)
    orphan = subprocess.run(
        ["sh", "-c", "sleep 300 </dev/null >/dev/null 2>&1 & echo $!"],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        check=True,
    )
    return [child.pid, int(orphan.stdout)]


server = MCPServer("forks", instructions="Leaves processes behind", log_level="WARNING")


@server.tool(description="Return the text unchanged")
def echo(text: str) -> str:
    return text


@server.tool(description="Exit at once, as a crashing server does")
def crash() -> str:
    os._exit(17)


if __name__ == "__main__":
    pids = _leave_processes()
    with Path(os.environ["FORKS_PIDS"]).open("a") as out:
        out.write("".join(f"{pid}\n" for pid in pids))
    server.run()
