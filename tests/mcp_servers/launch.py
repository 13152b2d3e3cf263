"""Start a test MCP server from a process that has already imported the MCP SDK.

Importing `mcp` costs a server process ~0.7 s of CPU (mostly pydantic building
`mcp_types`), and the suite starts dozens of servers: that import was a sixth of its
CPU. So each test process (`tests/conftest.py`) runs one *zygote*,
`python tests/mcp_servers/launch.py --serve`, which imports the SDK once and forks a
server for each request.

A server script, run as one, calls `launch.relay(__file__)` before its other imports. Run
as a server (`python tests/mcp_servers/demo.py ...`) under a test process, it becomes a
thin *relay*: it finds its test process's zygote (the closest ancestor that has one),
hands over its stdin, stdout and stderr, arguments, working directory, environment,
umask and resource limits, and the zygote forks a child that runs the script with
them. The child speaks to fim over the very pipes fim made; the relay stays fim's
process until the child ends, and ends the same way (its exit code, or its signal):

- a signal fim sends the relay (SIGTERM, SIGINT, SIGHUP) is passed on to the child;
- if the relay is killed (SIGKILL, a killed process group), the child kills itself;
- the relay's own copies of the pipes are closed, so fim sees their end when the child's
  end.

So what fim sees of a server's process (its pid, its command line, its children, when it
ends) is the relay, as before; one thing differs: a relay that is killed ends before its
child, so an HTTP server's port is free a moment after its process ended
(`harness.http_demo` waits for that). Without a zygote (a server run by hand), the script
runs as it always did.
"""

from __future__ import annotations

import array
import contextlib
import json
import os
import socket
import struct
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ADDRESS = "\0fim-test-mcp-zygote-{pid}"  # abstract: nothing on disk, per test process
SIGNALS = ("SIGTERM", "SIGINT", "SIGHUP")
_FORKED = False  # True in a child the zygote forked: the script runs there


def _ancestors(pid: int) -> list[int]:
    found: list[int] = []
    while pid > 1 and len(found) < 12:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            break
        pid = int(stat[stat.rindex(")") + 2 :].split()[1])
        found.append(pid)
    return found


def _connect() -> socket.socket | None:
    for pid in _ancestors(os.getpid()):
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.connect(ADDRESS.format(pid=pid))
        except OSError:
            sock.close()
            continue
        return sock
    return None


def _running(pid: int) -> bool:
    """True while `pid` runs (a zombie nobody reaps has ended)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] != "Z"


def _read_all(sock: socket.socket) -> bytes:
    chunks = []
    while chunk := sock.recv(65536):
        chunks.append(chunk)
    return b"".join(chunks)


def _relay(script: str) -> None:
    """Hand this server over to the zygote and wait for it; returns only if there is none."""
    sock = _connect()
    if sock is None:
        return
    import resource
    import signal

    limits = {}
    for name in dir(resource):
        if name.startswith("RLIMIT_"):
            limits[name] = resource.getrlimit(getattr(resource, name))
    umask = os.umask(0)
    os.umask(umask)
    request = json.dumps(
        {
            "script": script,
            "argv": sys.argv,
            "cwd": os.getcwd(),
            "env": dict(os.environ),
            "umask": umask,
            "limits": limits,
        }
    ).encode()
    fds = array.array("i", [0, 1, 2])
    sock.sendmsg(
        [struct.pack("!I", len(request)), request],
        [(socket.SOL_SOCKET, socket.SCM_RIGHTS, fds.tobytes())],
    )
    line = b""
    while not line.endswith(b"\n"):
        chunk = sock.recv(1)
        if not chunk:
            return  # the zygote is gone before forking: run the script here
        line += chunk
    child = int(line)

    def forward(signum: int, _frame: Any) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(child, signum)

    for name in SIGNALS:
        signal.signal(getattr(signal, name), forward)
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):  # fim's pipes stay open only as long as the child holds them
        os.dup2(null, fd)
    os.close(null)
    ended = _read_all(sock)
    if not ended:  # the zygote went first (its test process ended): wait for the child
        import time

        while _running(child):
            time.sleep(0.1)
        os._exit(0)
    how = json.loads(ended)
    if how.get("signal"):
        signal.signal(how["signal"], signal.SIG_DFL)
        os.kill(os.getpid(), how["signal"])
    os._exit(how.get("code", 1))


def relay(script: str) -> None:
    """Run as a server under a test process: hand this server over to the test process's
    zygote and end as its child ends. Returns where the script must run itself: no zygote,
    or already in the zygote's child."""
    if _FORKED:
        return
    _relay(str(Path(script).resolve()))


# ----------------------------------------------------------------------------- zygote


def _receive(conn: socket.socket) -> tuple[dict[str, Any], list[int]]:
    conn.settimeout(10)
    data, ancillary, _flags, _addr = conn.recvmsg(65536, socket.CMSG_SPACE(3 * 4))
    fds = array.array("i")
    for level, kind, payload in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(payload[: len(payload) - len(payload) % fds.itemsize])
    while len(data) < 4:
        data += conn.recv(65536)
    (size,) = struct.unpack("!I", data[:4])
    body = data[4:]
    while len(body) < size:
        more = conn.recv(65536)
        if not more:
            raise ConnectionError("the relay went away mid-request")
        body += more
    conn.settimeout(None)
    return json.loads(body), list(fds)


def _child(conn: socket.socket, request: dict[str, Any], fds: list[int]) -> None:
    """In the forked child: become the server the relay would have been. Never returns."""
    import resource
    import runpy
    import signal
    import threading
    import traceback

    global _FORKED
    _FORKED = True
    code = 1
    try:
        signal.set_wakeup_fd(-1)
        for name in ("SIGCHLD", "SIGTERM", "SIGHUP"):
            signal.signal(getattr(signal, name), signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
        for fd in fds:
            if fd > 2:
                os.close(fd)
        os.setsid()
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        os.umask(request["umask"])
        for name, (soft, hard) in request["limits"].items():  # one it cannot set: it fails
            resource.setrlimit(getattr(resource, name), (soft, hard))
        sys.argv = list(request["argv"])
        sys.path[0] = str(Path(request["script"]).parent)

        def watch() -> None:
            while conn.recv(1):  # the relay sends nothing more: this ends when it does
                pass
            os.kill(os.getpid(), signal.SIGKILL)

        threading.Thread(target=watch, name="relay-watch", daemon=True).start()
        runpy.run_path(request["script"], run_name="__main__")
        code = 0
    except SystemExit as stop:
        if stop.code is None or isinstance(stop.code, int):
            code = stop.code or 0
        else:
            print(stop.code, file=sys.stderr)
    except BaseException:
        traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        os._exit(code)


def serve() -> None:
    """The zygote: import the SDK once, then fork a server for each relay that asks.
    Ends when its test process closes its stdin."""
    import selectors
    import signal

    sys.modules["launch"] = sys.modules["__main__"]  # a child's `import launch` is this
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(ADDRESS.format(pid=os.getppid()))
    listener.listen(64)  # bound first: a relay that comes early waits for the imports
    # what the servers import; the rest they import themselves
    import anyio._backends._asyncio  # noqa: F401
    import mcp.server.mcpserver.exceptions
    import mcp.server.stdio  # noqa: F401
    import mcp_types  # noqa: F401
    import uvicorn  # noqa: F401  (`--http`)
    from mcp.server.mcpserver import MCPServer

    warm = MCPServer("warm-up", log_level="WARNING")
    warm.streamable_http_app()  # loads what an HTTP server needs
    warm.sse_app()
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ, "accept")
    selector.register(wake_r, selectors.EVENT_READ, "reap")
    selector.register(sys.stdin, selectors.EVENT_READ, "stop")
    children: dict[int, socket.socket] = {}
    while True:
        for key, _events in selector.select():
            if key.data == "stop":
                return
            if key.data == "reap":
                os.read(wake_r, 4096)
                _reap(children)
                continue
            conn, _ = listener.accept()
            try:
                request, fds = _receive(conn)
            except (OSError, ValueError):
                conn.close()
                continue
            pid = os.fork()
            if pid == 0:
                for other in children.values():
                    other.close()
                listener.close()
                selector.close()
                os.close(wake_r)
                os.close(wake_w)
                _child(conn, request, fds)
            for fd in fds:
                os.close(fd)
            children[pid] = conn
            with contextlib.suppress(OSError):  # the relay is gone: the child sees it, ends
                conn.sendall(b"%d\n" % pid)
        _reap(children)


def _reap(children: dict[int, socket.socket]) -> None:
    """Tell each relay whose child ended how it ended."""
    while children:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        conn = children.pop(pid, None)
        if conn is None:
            continue
        if os.WIFSIGNALED(status):
            how = {"signal": os.WTERMSIG(status)}
        else:
            how = {"code": os.waitstatus_to_exitcode(status)}
        with contextlib.suppress(OSError):
            conn.sendall(json.dumps(how).encode())
        conn.close()


if __name__ == "__main__":
    serve()
