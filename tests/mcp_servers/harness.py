"""Starting the demo MCP server for tests, and looking at the processes it leaves behind."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

DEMO = Path(__file__).with_name("demo.py")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextmanager
def http_demo(
    many: int = 0, port: int | None = None, json: bool = False, script: Path = DEMO
) -> Iterator[str]:
    """Run the demo server (or another `script` taking its options) over HTTP on loopback
    (a free port by default); yields its URL. `json`: it answers requests in JSON bodies,
    not SSE streams."""
    port = port or free_port()
    proc = subprocess.Popen(
        [sys.executable, str(script), "--http", str(port), "--many", str(many)]
        + (["--json"] if json else []),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    output = proc.stderr.read()  # type: ignore[union-attr]
                    raise RuntimeError(f"demo HTTP server did not start: {output!r}") from None
                time.sleep(0.05)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.kill()  # a test server keeps nothing: no graceful shutdown to wait for
        proc.wait(10)
        proc.stderr.close()  # type: ignore[union-attr]
        _released(port)


def _released(port: int) -> None:
    """Wait until nothing listens on `port`. The server's process (launch.py's relay) ends
    at once; the forked process that served ends a moment later, and a test may start the
    next server on the same port."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
        except OSError:
            return
        time.sleep(0.01)
    raise RuntimeError(f"port {port} is still served after its server was stopped")


def stdio_decl(*args: str, **fields: object) -> dict[str, object]:
    """The `mcp_servers:` entry of the demo server over stdio."""
    return {"command": sys.executable, "args": [str(DEMO), *args], **fields}


def children(pid: int | None = None) -> set[int]:
    """Live (non-zombie) child processes of `pid` (default: this process)."""
    parent = pid or os.getpid()
    found = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        if int(fields[1]) == parent and fields[0] != "Z":
            found.add(int(entry.name))
    return found


def alive(pid: int) -> bool:
    """True while `pid` exists as a process (a zombie counts as alive: nobody reaped it)."""
    return Path(f"/proc/{pid}").exists()


def processes_with(marker: str) -> list[int]:
    """Processes anywhere on the machine whose command line contains `marker`."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if marker in cmdline:
            found.append(int(entry.name))
    return found
