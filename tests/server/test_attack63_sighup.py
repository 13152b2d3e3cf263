"""SIGHUP to `fim serve -p` and `fim worker -p` reloads the project now (attack-63 F2).

Nothing handled it: SIGHUP's default action killed the process at once, so a run in flight
left no record and no usage row (budgets never counted its model call), and closing the
terminal `fim serve` ran in, or an operator's "log rotation" HUP, stopped the server. Now
it recompiles the project (as `--git` fetches and `--workers` restarts its workers), and
the process keeps serving; with `--no-reload` it says nothing changes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

from fim.testing.cluster import until
from fim.testing.server import wait_announced

AGENT = "description: {}\nmodel: scripted:pong.yaml\n"


def project(root: Path, state: str = "sqlite:///.fim/state.db") -> Path:
    (root / "agents").mkdir(parents=True)
    (root / "fim.yaml").write_text(f'name: hup\nstate: "{state}"\n')
    (root / "pong.yaml").write_text('- text: "pong"\n')
    (root / "agents" / "echo.yaml").write_text(AGENT.format("v1"))
    return root


@contextmanager
def started(root: Path, log: Path, *args: str) -> Iterator[tuple[subprocess.Popen, str]]:
    environ = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])}
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "fim.cli", *args, "-p", str(root)],
            cwd=root,
            env=environ,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        url = ""
        if args[0] == "serve":
            url = f"http://127.0.0.1:{wait_announced(process, log, time.monotonic() + 60)}"
        yield process, url
    finally:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()


def logged(log: Path, text: str) -> bool:
    return text in log.read_text(errors="replace")


def test_sighup_reloads_a_served_project_and_the_server_keeps_serving(tmp_path: Path) -> None:
    root, log = project(tmp_path / "p"), tmp_path / "serve.log"
    with started(root, log, "serve", "--port", "0") as (process, url):
        process.send_signal(signal.SIGHUP)
        until(lambda: logged(log, "SIGHUP: reloading"))
        assert process.poll() is None  # the default action would have killed it
        answer = httpx.post(f"{url}/v1/agents/echo/runs", json={"input": "ping"}, timeout=30)
        assert answer.status_code == 200 and answer.json()["output"] == "pong"
        process.terminate()
        assert process.wait(timeout=15) == 0


def test_with_no_reload_sighup_says_nothing_changes(tmp_path: Path) -> None:
    root, log = project(tmp_path / "p"), tmp_path / "serve.log"
    with started(root, log, "serve", "--port", "0", "--no-reload") as (process, url):
        (root / "agents" / "echo.yaml").write_text(AGENT.format("v2"))
        process.send_signal(signal.SIGHUP)
        until(lambda: logged(log, "SIGHUP: --no-reload: still serving"))
        assert process.poll() is None
        assert httpx.get(f"{url}/v1/agents/echo", timeout=10).json()["description"] == "v1"


def test_sighup_reloads_a_worker(tmp_path: Path, pg_database) -> None:
    root = project(tmp_path / "p", pg_database("").owner_url)
    log = tmp_path / "worker.log"
    with started(root, log, "worker") as (process, _):
        until(lambda: logged(log, "fim worker:"))
        process.send_signal(signal.SIGHUP)
        until(lambda: logged(log, "SIGHUP: reloading"))
        assert process.poll() is None
