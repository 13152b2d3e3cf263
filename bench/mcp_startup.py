"""Start-up of `fim run` for an agent with one stdio MCP server, against the floor.

Floor: one Python process that does the least any stdio MCP client must do, i.e.
`import mcp.client.stdio`, start the same server and complete the handshake (no tools/list
even). fim: `fim run AGENT PROMPT` on a scratch project whose agent uses the repository's
demo MCP server (`tests/mcp_servers/demo.py`, the SDK's MCPServer) and a scripted model:

- `answer`: the model answers at once (the server starts, concurrently, and is stopped);
- `tool call`: the model calls one MCP tool (`echo`) and then answers;

each `cold` (the tool-list cache in `.fim/cache/mcp-tools` removed first, so the run waits
for the server's list) and `warm` (cached list: the prompt is built from it and the server
starts in the background while the model is asked). Reported: median wall seconds to the
answer on stdout and to process exit, and median CPU seconds of the process tree, over
interleaved rounds. Not a timed test: it prints what one run measured.

    python bench/mcp_startup.py [ROUNDS]
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEMO = ROOT / "tests" / "mcp_servers" / "demo.py"

FLOOR = f"""
import anyio
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.session import ClientSession

async def main():
    params = StdioServerParameters(command={sys.executable!r}, args=[{str(DEMO)!r}])
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
    print("the answer", flush=True)

anyio.run(main)
"""


def project(folder: Path, tool_call: bool) -> Path:
    (folder / "agents").mkdir(parents=True)
    servers = {"demo": {"command": sys.executable, "args": [str(DEMO)]}}
    (folder / "fim.yaml").write_text(
        json.dumps(
            {"name": "bench", "models": {"general": "scripted:s.yaml"}, "mcp_servers": servers}
        )
    )
    (folder / "agents" / "a.yaml").write_text("instructions: Answer.\nmcp: [demo]\n")
    call = {"subcommand": "call", "server": "demo", "tool": "echo", "parameters": {"text": "x"}}
    steps = [{"tool_calls": [{"name": "mcp", "arguments": call}]}] if tool_call else []
    steps.append({"text": "the answer"})
    (folder / "s.yaml").write_text(json.dumps(steps))
    return folder


def once(args: list[str], cwd: Path) -> tuple[float, float, float]:
    """(seconds to the answer line, seconds to exit, CPU seconds of the process tree)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    start = time.perf_counter()
    proc = subprocess.Popen(
        args, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )
    answer = None
    assert proc.stdout is not None
    for line in proc.stdout:
        if "the answer" in line and answer is None:
            answer = time.perf_counter() - start
    err = proc.stderr.read() if proc.stderr else ""
    code = proc.wait()
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if code != 0 or answer is None:
        sys.exit(f"{' '.join(args)} failed ({code}):\n{err}")
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    return answer, wall, cpu


def main(rounds: int) -> None:
    fim = [sys.executable, "-c", "from fim.cli import main; main()", "run", "a", "hi"]
    with tempfile.TemporaryDirectory() as tmp:
        answer_only = project(Path(tmp) / "answer", tool_call=False)
        with_call = project(Path(tmp) / "call", tool_call=True)

        def cold(folder: Path) -> Path:
            shutil.rmtree(folder / ".fim" / "cache", ignore_errors=True)
            return folder

        rows: list[tuple[str, list[str], object]] = [
            (
                "floor: import mcp.client.stdio + server handshake",
                [sys.executable, "-c", FLOOR],
                lambda: Path(tmp),
            ),
            ("fim run, answer, cold (no tool-list cache)", fim, lambda: cold(answer_only)),
            ("fim run, answer, warm (cached tool list)", fim, lambda: answer_only),
            ("fim run, one MCP call + answer, cold", fim, lambda: cold(with_call)),
            ("fim run, one MCP call + answer, warm", fim, lambda: with_call),
        ]
        samples: list[list[tuple[float, float, float]]] = [[] for _ in rows]
        for _, args, where in rows:  # warm-up (and fills the caches)
            once(args, where())  # type: ignore[operator]
        for _ in range(rounds):
            for (_, args, where), out in zip(rows, samples, strict=True):
                out.append(once(args, where()))  # type: ignore[operator]
    floor = statistics.median(a for a, _, _ in samples[0])
    print(f"{rounds} rounds, medians; load average {os.getloadavg()[0]:.1f}")
    print(f"{'':52} {'answer s':>9} {'exit s':>8} {'cpu s':>7} {'x floor':>8}")
    for (label, _, _), out in zip(rows, samples, strict=True):
        answer = statistics.median(a for a, _, _ in out)
        wall = statistics.median(w for _, w, _ in out)
        cpu = statistics.median(c for _, _, c in out)
        print(f"{label:52} {answer:9.2f} {wall:8.2f} {cpu:7.2f} {answer / floor:8.2f}")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 5)
