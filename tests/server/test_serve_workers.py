"""`fim serve --workers N` (issue 25.2): uvicorn's supervisor runs N processes on one port,
each with its own snapshot and watcher. On PostgreSQL a file change reaches every worker
(each reports its pid and snapshot in /v1/status), and a workflow paused on one worker is
approved through whichever worker takes the decision and finishes. SQLite is refused for
N > 1 before a port is bound."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx

from fim.testing.server import wait_announced

WORKFLOW = """\
description: Needs a human
nodes:
  approve: {type: human, prompt: "Go?"}
  add: {type: tool, tool: calculator, needs: [approve], args: {expression: "2+3"}}
outputs:
  sum: "{{ nodes.add.output }}"
"""


def project(root: Path, state: str) -> Path:
    (root / "agents").mkdir(parents=True)
    (root / "workflows").mkdir()
    (root / "fim.yaml").write_text(f'name: workers\nstate: "{state}"\n')
    (root / "pong.yaml").write_text('- text: "pong"\n')
    agent(root, "first")
    (root / "workflows" / "go.yaml").write_text(WORKFLOW)
    return root


def agent(root: Path, description: str) -> None:
    text = f"description: {description}\nmodel: scripted:pong.yaml\ninstructions: Say pong.\n"
    (root / "agents" / "echo.yaml").write_text(text)


def statuses(url: str) -> dict[int, str]:
    """pid -> snapshot, over fresh connections until both workers answered."""
    seen: dict[int, str] = {}
    for _ in range(400):
        body = httpx.get(f"{url}/v1/status").json()  # a new connection each time
        seen[body["pid"]] = body["snapshot"]
        if len(seen) == 2:
            return seen
        time.sleep(0.01)
    raise AssertionError(f"only {len(seen)} worker(s) answered")


def test_two_workers_share_a_port_reload_both_and_resume_approvals(
    tmp_path: Path, pg_database
) -> None:
    db = pg_database("")
    root = project(tmp_path / "p", db.owner_url)
    args = ["serve", "-p", str(root), "--port", "0", "--workers", "2"]  # a port free for it
    log = (tmp_path / "serve.log").open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "fim.cli", *args, "--log-level", "warning"], stdout=log, stderr=log
    )
    try:
        port = wait_announced(proc, tmp_path / "serve.log", time.monotonic() + 60)
        url = f"http://127.0.0.1:{port}"
        end = time.monotonic() + 60
        while True:
            try:
                before = statuses(url)
                break
            except (httpx.HTTPError, AssertionError):
                assert proc.poll() is None, (tmp_path / "serve.log").read_text()
                assert time.monotonic() < end, (tmp_path / "serve.log").read_text()
                time.sleep(0.1)
        assert len(set(before.values())) == 1

        agent(root, "second")  # each worker's own watcher reloads it
        end = time.monotonic() + 30
        while True:
            after = statuses(url)
            if all(after[pid] != before[pid] for pid in before) and after.keys() == before.keys():
                break
            assert time.monotonic() < end, f"not every worker reloaded: {before} -> {after}"
            time.sleep(0.05)
        for _ in range(10):
            assert httpx.get(f"{url}/v1/agents/echo").json()["description"] == "second"

        started = httpx.post(f"{url}/v1/workflows/go/runs", json={"inputs": {}}, timeout=30)
        assert started.json()["status"] == "paused", started.text
        run_id = started.json()["run_id"]
        (pending,) = httpx.get(f"{url}/v1/approvals").json()["approvals"]
        decided = httpx.post(f"{url}/v1/approvals/{pending['id']}", json={"decision": "approve"})
        assert decided.status_code == 200, decided.text
        end = time.monotonic() + 30
        while (record := httpx.get(f"{url}/v1/runs/{run_id}").json())["status"] != "ok":
            assert record["status"] in ("paused", "running") and time.monotonic() < end, record
            time.sleep(0.05)
        assert httpx.post(f"{url}/v1/agents/echo/runs", json={"input": "hi"}).json()["output"] == (
            "pong"
        )
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            assert proc.wait(timeout=30) == 0
        finally:
            if proc.poll() is None:
                proc.kill()
            log.close()


def test_more_than_one_worker_on_sqlite_is_refused_before_binding(tmp_path: Path) -> None:
    root = project(tmp_path / "p", "sqlite:///.fim/state.db")
    done = subprocess.run(
        [sys.executable, "-m", "fim.cli", "serve", "-p", str(root), "--workers", "2"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1
    assert "--workers 2 needs a PostgreSQL state store" in done.stderr
    assert "state: postgresql://" in done.stderr
