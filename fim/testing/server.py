"""Run an ASGI app (or `fim serve` itself) on a loopback port in a background thread.

Used by the tests and benchmarks so that real clients (`openai`, httpx) talk to a real
uvicorn server, exactly as users' clients do.
"""

from __future__ import annotations

import contextlib
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class ServerThread:
    """`with ServerThread(app) as srv: httpx.get(srv.url + "/healthz")`."""

    def __init__(self, app: Any, port: int | None = None, **config: Any) -> None:
        # deferred: loading click costs tens of ms
        import uvicorn

        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        options = {"log_level": "warning", "access_log": False, "lifespan": "off", **config}
        self.server = uvicorn.Server(
            uvicorn.Config(app, host="127.0.0.1", port=self.port, **options)
        )
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> ServerThread:
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError(f"server on port {self.port} did not start")
            time.sleep(0.005)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)


@contextlib.contextmanager
def fim_process(
    *args: str, log: Path, env: Mapping[str, str] | None = None
) -> Iterator[subprocess.Popen[bytes]]:
    """`python -m fim.cli ARGS` as a child process, its output in `log`; stopped with
    SIGTERM (SIGKILL after 15 s) on the way out unless it has already exited."""
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "fim.cli", *args], stdout=out, stderr=out, env=env
        )
        try:
            yield proc
        finally:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()


@contextlib.contextmanager
def fim_server(
    root: Path, *extra: str, reload: bool = False, timeout: float = 60.0
) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """`fim serve` on `root` as a child process on a free port: yields its URL and the
    process once /healthz answers. Its output goes to `root/serve-PORT.log`, shown when it
    dies before it is healthy."""
    # deferred: a third-party package, loaded only when this path runs
    import httpx

    port = free_port()
    args = ["serve", "-p", str(root), "--port", str(port), "--log-level", "warning"]
    if not reload:
        args.append("--no-reload")
    path = root / f"serve-{port}.log"
    with fim_process(*args, *extra, log=path) as proc:
        url = f"http://127.0.0.1:{port}"
        end = time.monotonic() + timeout
        while True:
            if proc.poll() is not None or time.monotonic() > end:
                raise RuntimeError(f"fim serve did not come up:\n{path.read_text()[-3000:]}")
            try:
                if httpx.get(f"{url}/healthz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.05)
        yield url, proc


@contextlib.contextmanager
def serve_process(root: Path, *extra: str, timeout: float = 60.0) -> Iterator[str]:
    """`fim serve` on `root` (no reload, a free port) as a child process: yields its URL."""
    with fim_server(root, *extra, timeout=timeout) as (url, _proc):
        yield url
