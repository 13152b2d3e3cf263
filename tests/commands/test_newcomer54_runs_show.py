"""`fim runs show ID` of a run still going (newcomer-54 #7).

While an A2A task waited on its approval, `fim runs show` said "no run" and `GET
/v1/runs/ID` on the server said `running`, with its events. On PostgreSQL a served run is
stored `running` from its first event: `fim runs show` shows it so, with its events so far.
A `fim serve` on SQLite keeps the run it runs in its own memory until it ends (one write
at the end): another process cannot read it, and `fim runs show` says where it is.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from fim.cli import app
from tests.server.test_background_runs import served

runner = CliRunner()


def project(root: Path, state: str) -> Path:
    (root / "agents").mkdir(parents=True)
    (root / "fim.yaml").write_text(f'name: going\nstate: "{state}"\n')
    (root / "agents" / "careful.yaml").write_text(
        "model: scripted:careful.yaml\ntools: [calculator]\n"
        "hooks:\n  - use: confirm\n    with: {all: true, poll: 0.05, timeout: 120}\n"
    )
    (root / "careful.yaml").write_text(
        '- tool_calls: [{name: calculator, arguments: {expression: "6*7"}}]\n- text: "42"\n'
    )
    return root


def fim(root: Path, *args: str) -> tuple[int, str]:
    result = runner.invoke(app, [*args, "--project", str(root)])
    return result.exit_code, result.output


def pending(url: str) -> dict:
    """The approval the run waits on, once it does (polled: the run is on another thread;
    no time is asserted)."""
    for _ in range(600):
        approvals = httpx.get(f"{url}/v1/approvals").json()["approvals"]
        if approvals:
            return dict(approvals[0])
        time.sleep(0.05)
    raise AssertionError("the run never asked for its approval")


def test_a_run_waiting_on_postgresql_is_shown_running_with_its_events_so_far(
    tmp_path: Path, pg_database
):
    root = project(tmp_path / "p", pg_database("").owner_url)
    with served(root) as url:
        answers: list[httpx.Response] = []
        body = {"input": "6*7?"}
        asking = threading.Thread(
            target=lambda: answers.append(
                httpx.post(f"{url}/v1/agents/careful/runs", json=body, timeout=60)
            )
        )
        asking.start()
        try:
            approval = pending(url)
            code, out = fim(root, "runs", "show", approval["run_id"])
            assert code == 0, out
            assert "running" in out and "calculator" in out and "42" not in out
        finally:
            httpx.post(f"{url}/v1/approvals/{approval['id']}", json={"decision": "approve"})
            asking.join(60)
    assert answers and answers[0].json()["output"] == "42"
    code, out = fim(root, "runs", "show", approval["run_id"])
    assert code == 0 and "42" in out


def test_a_run_not_stored_yet_on_sqlite_says_where_it_is(tmp_path: Path):
    root = project(tmp_path / "p", "sqlite:///.fim/state.db")
    code, out = fim(root, "runs", "list")  # the store exists
    code, out = fim(root, "runs", "show", "dd58e38b93c0")
    assert code == 1 and "Traceback" not in out
    assert "no run 'dd58e38b93c0'" in out
    assert "still running" in out and "GET /v1/runs/dd58e38b93c0" in out


@pytest.mark.parametrize("typed", ["nope"])
def test_an_unknown_run_is_still_one_line(tmp_path: Path, typed: str):
    root = project(tmp_path / "p", "sqlite:///.fim/state.db")
    code, out = fim(root, "runs", "show", typed)
    assert code == 1 and f"no run '{typed}'" in out and out.count("\n") == 1
