"""Run an ASGI app (or `fim serve` itself) on a loopback port in a background thread.

Used by the tests and benchmarks so that real clients (`openai`, httpx) talk to a real
uvicorn server, exactly as users' clients do.
"""

from __future__ import annotations

import contextlib
import re
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
        self.server = _stoppable()(uvicorn.Config(app, host="127.0.0.1", port=self.port, **options))
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
        self.server.wake()
        self.thread.join(timeout=10)


_made: list[type[Any]] = []


def _stoppable() -> type[Any]:
    """`uvicorn.Server` whose main loop also wakes when told to stop: uvicorn's looks at
    `should_exit` every 0.1 s, and a test's server waited out most of a tick each time it
    stopped (~190 servers in the suite). The class is made on first use: uvicorn loads
    only when a server is started."""
    if _made:
        return _made[0]
    # deferred: loading uvicorn (and click) costs tens of ms
    import asyncio

    import uvicorn

    class Stoppable(uvicorn.Server):
        woken: asyncio.Event | None = None
        loop: asyncio.AbstractEventLoop | None = None

        def wake(self) -> None:
            loop, woken = self.loop, self.woken
            if loop is not None and woken is not None:
                with contextlib.suppress(RuntimeError):  # the loop has already closed
                    loop.call_soon_threadsafe(woken.set)

        async def main_loop(self) -> None:
            self.loop, self.woken = asyncio.get_running_loop(), asyncio.Event()
            counter = 0
            should_exit = await self.on_tick(counter)
            while not should_exit:
                counter = (counter + 1) % 864000
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.woken.wait(), 0.1)
                should_exit = await self.on_tick(counter)

        async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
            """uvicorn's shutdown, with its fixed 0.1 s for connections to finish cut
            short once they have (the uvicorn internals it needs missing: uvicorn's)."""
            state = getattr(self, "server_state", None)
            tasks_done = getattr(self, "_wait_tasks_to_complete", None)
            if state is None or tasks_done is None or sockets:
                await super().shutdown(sockets)
                return
            for server in self.servers:
                server.close()
            for connection in list(state.connections):
                connection.shutdown()
            for _ in range(100):
                if not state.connections:
                    break
                await asyncio.sleep(0.001)
            try:
                await asyncio.wait_for(tasks_done(), self.config.timeout_graceful_shutdown)
            except TimeoutError:
                for task in state.tasks:
                    task.cancel()
            if not self.force_exit:
                await self.lifespan.shutdown()

    _made.append(Stoppable)
    return Stoppable


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


BANNER = re.compile(r"fim serve: project .*? · http://\S+:(\d+) \(OpenAI-compatible")
"""`fim serve`'s start-up line (text, or the message of its JSON record), printed once its
listening socket is bound: the port it names is the port that process holds."""

ATTEMPTS = 5
"""Ports `fim_server` tries: another process may bind the one `free_port` picked before the
child binds it (seconds later: the child compiles first); the child then exits, and the
harness starts another on a new port."""


def announced_port(log: Path) -> int | None:
    """The port the `fim serve` writing `log` says it has bound, once it has said so."""
    found = BANNER.search(log.read_text(errors="replace")) if log.exists() else None
    return int(found.group(1)) if found else None


def wait_bound(proc: subprocess.Popen[bytes], log: Path, port: int, end: float) -> bool:
    """Wait until the `fim serve` child `proc` (its output in `log`) says it listens on
    `port`: True. False when it exited because `port` was taken before it bound it. Only
    after True does a request to `port` reach `proc` (no other socket can listen there while
    it does); before, a /healthz answer there may come from any process. RuntimeError, with
    the log's end, when it died otherwise or `end` (time.monotonic) passed."""
    while True:
        bound = announced_port(log)
        if bound is not None:
            if bound != port:
                raise RuntimeError(f"fim serve bound port {bound}, not {port}")
            return True
        if proc.poll() is not None:
            text = log.read_text(errors="replace")
            if f"port {port} on " in text and "is already in use" in text:
                return False
            raise RuntimeError(f"fim serve exited {proc.returncode}:\n{text[-3000:]}")
        if time.monotonic() > end:
            raise RuntimeError(f"fim serve did not bind port {port}:\n{log.read_text()[-3000:]}")
        time.sleep(0.05)


@contextlib.contextmanager
def fim_server(
    root: Path, *extra: str, reload: bool = False, timeout: float = 60.0
) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """`fim serve` on `root` as a child process on a free port: yields its URL and the
    process once the child has said it bound that port (`wait_bound`) and /healthz answers
    there. Its output goes to `root/serve-PORT.log`, shown when it dies before it is
    healthy; a port taken before the child bound it is replaced by another."""
    end = time.monotonic() + timeout
    for _ in range(ATTEMPTS):
        port = free_port()
        args = ["serve", "-p", str(root), "--port", str(port), "--log-level", "warning"]
        if not reload:
            args.append("--no-reload")
        path = root / f"serve-{port}.log"
        with fim_process(*args, *extra, log=path) as proc:
            if not wait_bound(proc, path, port, end):
                continue
            url = f"http://127.0.0.1:{port}"
            wait_healthy(proc, url, path, end)
            yield url, proc
            return
    raise RuntimeError(f"fim serve found each of {ATTEMPTS} free ports taken before it bound")


def wait_healthy(proc: subprocess.Popen[bytes], url: str, log: Path, end: float) -> None:
    """Poll `url`/healthz until it answers 200, while `proc` lives and before `end`."""
    # deferred: a third-party package, loaded only when this path runs
    import httpx

    while True:
        if proc.poll() is not None or time.monotonic() > end:
            raise RuntimeError(f"fim serve did not come up:\n{log.read_text()[-3000:]}")
        try:
            if httpx.get(f"{url}/healthz", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.05)


def wait_announced(proc: subprocess.Popen[Any], log: Path, end: float) -> int:
    """The port the `fim serve` child `proc` (started with `--port 0`, its output in `log`)
    says it has bound: the system chose it free, so no other process listens there and a
    request to it reaches `proc`. RuntimeError, with the log's end, when `proc` exits first
    or `end` (time.monotonic) passes."""
    while (port := announced_port(log)) is None:
        if proc.poll() is not None:
            text = log.read_text(errors="replace")
            raise RuntimeError(f"fim serve exited {proc.returncode}:\n{text[-3000:]}")
        if time.monotonic() > end:
            raise RuntimeError(f"fim serve named no port:\n{log.read_text()[-3000:]}")
        time.sleep(0.05)
    return port


@contextlib.contextmanager
def fim_serve_on_any_port(
    root: Path,
    *extra: str,
    log: Path | None = None,
    env: Mapping[str, str] | None = None,
    timeout: float = 60.0,
) -> Iterator[tuple[str, subprocess.Popen[bytes], Path]]:
    """`fim serve -p ROOT --port 0 EXTRA` as a child process (`fim_process`): yields its
    URL, the process and its log (default `root/serve.log`) once it has named the port the
    system chose (`wait_announced`) and /healthz answers there. Nothing to retry: no other
    process can take that port first. Reload stays on unless EXTRA says `--no-reload`."""
    path = root / "serve.log" if log is None else log
    args = ["serve", "-p", str(root), "--port", "0", *extra]
    with fim_process(*args, log=path, env=env) as proc:
        end = time.monotonic() + timeout
        url = f"http://127.0.0.1:{wait_announced(proc, path, end)}"
        wait_healthy(proc, url, path, end)
        yield url, proc, path


@contextlib.contextmanager
def serve_process(root: Path, *extra: str, timeout: float = 60.0) -> Iterator[str]:
    """`fim serve` on `root` (no reload, a free port) as a child process: yields its URL."""
    with fim_server(root, *extra, timeout=timeout) as (url, _proc):
        yield url
