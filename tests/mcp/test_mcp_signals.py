"""`fim run` stopped by SIGTERM or SIGINT in the middle of an MCP call leaves no stdio
server behind (the signal cancels the run, and closing the run's services stops the
server's process tree). The server lingers after stdin closes, as servers that ignore EOF
do, so only fim's own shutdown stops it. The server is declared in the Claude `.mcp.json`
entry shape."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from tests.mcp_servers.harness import DEMO, processes_with


def _project(root: Path, marker: str) -> Path:
    entry = {
        "type": "stdio",
        "command": sys.executable,
        "args": [str(DEMO), "--tag", marker, "--linger", "60"],
    }
    (root / "fim.yaml").write_text(json.dumps({"name": "sig", "mcp_servers": {"demo": entry}}))
    (root / "agents").mkdir()
    (root / "agents" / "waiter.yaml").write_text(
        "instructions: Wait.\nmodel: scripted:script.yaml\nmcp: [demo]\n"
    )
    call = {"subcommand": "call", "server": "demo", "tool": "slow", "parameters": {"seconds": 60}}
    script = [{"tool_call": {"name": "mcp", "arguments": call}}, {"text": "done"}]
    (root / "script.yaml").write_text(json.dumps(script))
    return root


def test_sigterm_mid_call_leaves_no_server_running(tmp_path: Path):
    """(SIGINT takes the same path: asyncio turns it into a cancellation; one signal is
    tested to keep the suite fast.)"""
    marker = f"fim-signal-check-{uuid.uuid4().hex}"
    root = _project(tmp_path, marker)
    proc = subprocess.Popen(
        [sys.executable, "-m", "fim.cli", "--project", str(root), "run", "waiter", "hi", "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        for line in proc.stdout:  # the tool call is announced before it runs
            if line.startswith("{") and json.loads(line)["type"] == "tool_call":
                break
        else:
            pytest.fail(f"no tool call; stderr: {proc.stderr.read() if proc.stderr else ''}")
        deadline = time.monotonic() + 20
        while not processes_with(marker) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert processes_with(marker), "the server should be running during the call"
        time.sleep(0.3)  # let the call reach the server
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 143
    deadline = time.monotonic() + 10
    while processes_with(marker) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert processes_with(marker) == []
