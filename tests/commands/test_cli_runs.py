"""`fim runs list|show|cancel`: the store's runs from a shell (every key's), one run's
events masked, and stopping a queued run (PostgreSQL); a run inside a SQLite server is
that server's to stop, and the command says how."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from fim.cli import app
from tests.server.test_background_runs import served

SECRET = "sk-runs-cli-5d4c3b2a"
runner = CliRunner()


def project(root: Path, state: str) -> Path:
    (root / "agents").mkdir(parents=True)
    (root / "fim.yaml").write_text(
        f'name: runs\nstate: "{state}"\n'
        'models:\n  default: {model: openai/gpt-4o-mini, api_key: "${RUNS_TEST_KEY}"}\n'
    )
    (root / "agents" / "echo.yaml").write_text("model: scripted:echo.yaml\n")
    (root / "echo.yaml").write_text(f'- text: "the key is {SECRET}"\n')
    return root


def fim(root: Path, *args: str) -> tuple[int, str]:
    result = runner.invoke(app, [*args, "--project", str(root)])
    return result.exit_code, result.output


def test_list_and_show_every_run_masked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("RUNS_TEST_KEY", SECRET)
    root = project(tmp_path / "p", "sqlite:///.fim/state.db")
    with served(root) as url:
        ran = httpx.post(f"{url}/v1/agents/echo/runs", json={"input": "hi"}).json()
    run_id = ran["run_id"]
    code, out = fim(root, "runs", "list")
    assert code == 0 and run_id in out and "echo" in out and "ok" in out
    code, out = fim(root, "runs", "list", "--json", "--kind", "agent")
    assert [json.loads(line)["id"] for line in out.splitlines()] == [run_id]
    code, out = fim(root, "runs", "show", run_id)
    assert code == 0 and "ok · 1 model call" in out and "the key is ***" in out
    assert SECRET not in out
    code, out = fim(root, "runs", "show", run_id, "--json")
    assert json.loads(out)["events"][-1]["type"] == "run_finished" and SECRET not in out
    code, out = fim(root, "runs", "cancel", run_id)
    assert code == 1 and f"POST /v1/runs/{run_id}/cancel" in out
    code, out = fim(root, "runs", "show", "nope")
    assert code == 1 and "no run 'nope'" in out and "Traceback" not in out


def test_a_queued_run_is_cancelled_from_a_shell(
    tmp_path: Path, pg_database, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setenv("RUNS_TEST_KEY", SECRET)
    db = pg_database("")
    root = project(tmp_path / "p", db.owner_url)
    code, out = fim(root, "runs", "cancel", "nope")  # nothing ever queued on this store
    assert code == 1 and "has no job" in out and "Traceback" not in out
    with served(root) as url:  # no worker: the run waits in the queue
        queued = httpx.post(
            f"{url}/v1/agents/echo/runs", json={"input": "x", "background": True}
        ).json()["run_id"]
        code, out = fim(root, "runs", "cancel", queued)
        assert code == 0 and out.strip() == f"run {queued}: cancelled (it had not started)"
        assert httpx.get(f"{url}/v1/runs/{queued}").json()["status"] == "cancelled"
    code, out = fim(root, "runs", "cancel", queued)
    assert code == 1 and "has no job waiting or running" in out
