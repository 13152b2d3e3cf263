"""Hot reload and lifecycle of a real `fim serve` process: atomic swaps under load, bad
changes never served, graceful shutdown on SIGTERM."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from fim.build.reload import SnapshotHolder, _watch_filter, reload_once
from fim.errors import ConfigError
from fim.testing.model_server import OpenAIStubServer
from fim.testing.server import fim_server
from tests.inprocess_cli import run_fim

FIM_YAML = "name: live\nstate: sqlite:///.fim/state.db\n"
SCRIPT = '- text: "pong"\n'


def agent_yaml(description: str, model: str = "scripted:pong.yaml") -> str:
    return f"description: {description}\nmodel: {model}\ninstructions: Answer pong.\n"


def make_project(root: Path, model: str = "scripted:pong.yaml") -> Path:
    (root / "agents").mkdir(parents=True)
    (root / "fim.yaml").write_text(FIM_YAML)
    (root / "pong.yaml").write_text(SCRIPT)
    (root / "agents" / "echo.yaml").write_text(agent_yaml("version 0", model))
    return root


async def test_a_bad_change_keeps_the_last_good_snapshot(tmp_path: Path):
    from fim.build.compile import compile_project

    root = make_project(tmp_path)
    holder = SnapshotHolder(compile_project(root))
    first = holder.current
    (root / "agents" / "echo.yaml").write_text(agent_yaml("version 1") + "modle: fast\n")
    assert not await reload_once(root, holder)
    assert holder.current is first
    (problem,) = holder.errors
    assert problem.path == "agents/echo.yaml" and problem.line == 4 and "modle" in problem.message
    (root / "agents" / "echo.yaml").write_text(agent_yaml("version 2"))
    assert await reload_once(root, holder)
    assert holder.current.agents["echo"].description == "version 2" and not holder.errors


RELOAD_AFTER_A_DEEP_SKILL = """
import asyncio, pathlib, sys
from fim.build.compile import compile_project
from fim.build.reload import SnapshotHolder, _watch_filter, reload_once
root = pathlib.Path(sys.argv[1])
holder = SnapshotHolder(compile_project(root))
skill = root / "skills" / "evil" / "SKILL.md"
skill.parent.mkdir(parents=True)
skill.write_text("---\\nmetadata: " + "[" * 40_000 + "]" * 40_000 + "\\n---\\nBody.\\n")
asyncio.run(reload_once(root, holder))
print("still serving", sorted(holder.current.agents), holder.current.broken_skills)
"""


@pytest.mark.parametrize("name", ["serve.log", "serve.out", "serve.err", "fim.pid", "a.yaml~"])
def test_a_servers_own_output_inside_the_project_is_no_change(tmp_path: Path, name: str) -> None:
    """`fim serve > serve.out 2> serve.err` in the project: each line it wrote was a change,
    and each change a compile of the whole project (attack-46)."""
    assert not _watch_filter(None, str(tmp_path / name))
    assert _watch_filter(None, str(tmp_path / "agents" / "a.yaml"))


def test_a_reload_that_meets_a_skill_nested_40000_deep_keeps_serving(tmp_path: Path) -> None:
    """A third-party skill landing in a served project is compiled by the reload thread:
    libyaml's recursive composer ran off that thread's stack (a segfault killed the
    server). In a process of its own, so a crash fails the test, not the test run."""
    root = make_project(tmp_path / "project")
    done = subprocess.run(
        [sys.executable, "-c", RELOAD_AFTER_A_DEEP_SKILL, str(root)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.startswith("still serving ['echo']") and "evil" in done.stdout


@pytest.fixture
def serve_process(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    root = make_project(tmp_path / "project")
    with fim_server(root, reload=True) as (url, _proc):
        yield url, root


def _status(url: str) -> dict:
    return httpx.get(url + "/v1/status", timeout=5).json()


def _until(predicate, timeout: float = 10.0) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return
        time.sleep(0.01)
    raise AssertionError("condition not reached")


def test_fifty_changes_under_load_no_failed_request_no_invalid_config(serve_process):
    url, root = serve_process
    valid_versions = {_status(url)["snapshot"]}
    seen_versions: list[str] = []
    failures: list[str] = []
    stop = threading.Event()

    def client() -> None:
        with httpx.Client(timeout=10) as http:
            while not stop.is_set():
                response = http.post(url + "/v1/agents/echo/runs", json={"input": "ping"})
                body = response.json()
                if response.status_code != 200 or body.get("output") != "pong":
                    failures.append(f"{response.status_code}: {response.text[:200]}")
                    continue
                seen_versions.append(body["events"][0]["snapshot_version"])

    clients = [threading.Thread(target=client) for _ in range(3)]
    for thread in clients:
        thread.start()
    agent_file = root / "agents" / "echo.yaml"
    try:
        for change in range(1, 51):
            if change % 2:  # odd changes are invalid, each in its own way
                agent_file.write_text(agent_yaml(f"version {change}") + f"bogus_{change}: 1\n")
                _until(
                    lambda c=change: (
                        f"bogus_{c}" in (_status(url)["last_reload_error"] or {}).get("text", "")
                    )
                )
            else:
                before = _status(url)["snapshot"]
                agent_file.write_text(agent_yaml(f"version {change}"))
                _until(lambda b=before: _status(url)["snapshot"] != b)
                valid_versions.add(_status(url)["snapshot"])
    finally:
        stop.set()
        for thread in clients:
            thread.join(timeout=20)
    assert failures == []
    assert len(seen_versions) > 50
    assert set(seen_versions) <= valid_versions, "a request was served by an invalid config"
    final = httpx.get(url + "/v1/agents/echo").json()
    assert final["description"] == "version 50"
    assert _status(url)["last_reload_error"] is None


def test_sigterm_lets_the_run_in_flight_finish_then_exits_zero(tmp_path: Path):
    with OpenAIStubServer(handler=lambda request: "slow answer", latency=1.0) as stub:
        root = make_project(tmp_path / "project", model="openai/slow")
        (root / "agents" / "echo.yaml").write_text(
            "description: slow\nmodel: {model: openai/slow, api_base: '"
            + stub.base_url
            + "', api_key: x}\n"
        )
        with fim_server(root, reload=True) as (url, proc):
            result: dict = {}

            def call() -> None:
                response = httpx.post(
                    url + "/v1/agents/echo/runs", json={"input": "hi"}, timeout=10
                )
                result["status"], result["body"] = response.status_code, response.json()

            caller = threading.Thread(target=call)
            caller.start()
            _until(lambda: len(stub.requests) >= 1)
            proc.send_signal(signal.SIGTERM)
            caller.join(timeout=10)
            assert proc.wait(timeout=15) == 0
            assert result["status"] == 200 and result["body"]["output"] == "slow answer"


def test_an_invalid_project_is_refused_at_start(tmp_path: Path):
    root = make_project(tmp_path / "project")
    (root / "agents" / "echo.yaml").write_text("description: [unclosed\n")
    serve = ("serve", "--project", str(root), "--port", "0")  # any free port: it never binds
    proc = run_fim(*serve, env={**os.environ, "NO_COLOR": "1"}, timeout=30)
    assert proc.returncode == 1
    assert "agents/echo.yaml:2:1: YAML syntax error" in proc.stderr
    assert "Traceback" not in proc.stderr
    with pytest.raises(ConfigError):
        from fim.build.compile import compile_project

        compile_project(root)
