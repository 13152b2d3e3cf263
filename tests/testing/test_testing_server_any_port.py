"""`fim.testing.server.fim_serve_on_any_port` and `wait_announced`: a `fim serve` child
started with `--port 0` is reached at the port it names in its start-up line, the one the
system chose for it. No other process can hold that port, so no test started beside it
(pytest-xdist runs several) answers in its place, and nothing needs retrying."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from fim.testing.server import announced_port, fim_serve_on_any_port, wait_announced


def project(root: Path, agent: str = "description: echo\nmodel: scripted:pong.yaml\n") -> Path:
    (root / "agents").mkdir(parents=True)
    (root / "fim.yaml").write_text('name: anyport\nstate: "sqlite:///.fim/state.db"\n')
    (root / "pong.yaml").write_text('- text: "pong"\n')
    (root / "agents" / "echo.yaml").write_text(agent)
    return root


def test_the_url_yielded_is_served_by_the_process_started(tmp_path: Path) -> None:
    root = project(tmp_path / "p")
    with fim_serve_on_any_port(root, "--no-reload", log=tmp_path / "serve.log") as served:
        url, proc, log = served
        assert log == tmp_path / "serve.log"
        assert url == f"http://127.0.0.1:{announced_port(log)}"
        assert announced_port(log) not in (0, 8000)
        assert httpx.get(f"{url}/v1/status", timeout=10).json()["pid"] == proc.pid
    assert proc.poll() is not None  # stopped on the way out


def test_a_child_that_exits_before_naming_a_port_fails_with_its_log(tmp_path: Path) -> None:
    root = project(tmp_path / "p", agent="description: [unclosed\n")
    log = tmp_path / "serve.log"
    with (
        pytest.raises(RuntimeError, match="exited 1") as failed,
        fim_serve_on_any_port(root, "--no-reload", log=log),
    ):
        pytest.fail("an invalid project was served")
    assert "agents/echo.yaml:2:1: YAML syntax error" in str(failed.value)


def test_a_child_that_names_no_port_before_the_deadline_fails(tmp_path: Path) -> None:
    log = tmp_path / "quiet.log"
    log.write_text("starting...\n")
    quiet = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        with pytest.raises(RuntimeError, match="named no port:\nstarting"):
            wait_announced(quiet, log, end=time.monotonic() - 1)  # the deadline has passed
    finally:
        quiet.kill()
        quiet.wait()
