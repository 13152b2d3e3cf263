"""Newcomer 52 #9 (and #5's start-up warning): `fim serve` configured by environment
alone, and every line it writes as JSON under `--log-format json`.

A Deployment configured only through env vars (as langgraph-api is, as Cloud Run's `PORT`
is) could not set `fim serve`'s options: now each has a `FIM_*` variable, shown in
`--help`, and `PORT` is honoured below `FIM_PORT` and the flag. Under `--log-format json`
the validation failures at start, `error: git clone failed ...` and the start-up warnings
were plain text between JSON lines; now they are JSON records too. And a connector whose
`${VAR}` is unset is warned of at start, naming the variable and the agents it refuses,
as a missing model key is.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

import fim.server
from tests.inprocess_cli import run_fim

GOOD = {
    "fim.yaml": "name: n52\n",
    "hi.script.yaml": '- text: "hi"\n',
    "agents/triage.yaml": (
        "description: pages someone\nmodel: scripted:hi.script.yaml\nconnectors: [pager]\n"
    ),
    "connectors/pager.yaml": (
        "kind: http\ndescription: Paging API\nbase_url: http://127.0.0.1:9\n"
        'auth: {type: bearer, token: "${PAGER_TOKEN}"}\n'
        "actions:\n  page:\n    description: Page someone\n    method: GET\n"
        "    path: /page\n"
    ),
}


def project(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


@pytest.fixture
def started(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """What `fim serve` would start the server with (nothing listens)."""
    seen: dict[str, Any] = {}

    async def serve(root: Path, **options: Any) -> None:
        seen.update(options, root=root)

    monkeypatch.setattr(fim.server, "serve", serve)
    return seen


def environ(**variables: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FIM_") and k != "PORT"}
    env.pop("PAGER_TOKEN", None)
    return env | variables


def test_every_deployment_option_has_a_variable_shown_in_help() -> None:
    shown = run_fim("serve", "--help", env={**environ(), "COLUMNS": "200"}).stdout
    for variable in (
        "FIM_HOST",
        "FIM_PORT, PORT",
        "FIM_GIT_URL",
        "FIM_GIT_REF",
        "FIM_GIT_INTERVAL",
        "FIM_GIT_CHECKOUT",
        "FIM_WORKERS",
        "FIM_LOG_FORMAT",
        "FIM_SHUTDOWN_TIMEOUT",
    ):
        assert f"[env var: {variable}]" in shown


def test_the_port_comes_from_the_flag_then_fim_port_then_port(
    tmp_path: Path, started: dict[str, Any]
) -> None:
    root = project(tmp_path, GOOD)
    serve = ("serve", "-p", str(root), "--no-reload")
    assert run_fim(*serve, env=environ(PORT="9123")).returncode == 0
    assert started["port"] == 9123  # Cloud Run's, Heroku's
    run_fim(*serve, env=environ(PORT="9123", FIM_PORT="9124"))
    assert started["port"] == 9124
    run_fim(*serve, "--port", "9125", env=environ(PORT="9123", FIM_PORT="9124"))
    assert started["port"] == 9125
    run_fim(*serve, env=environ(FIM_HOST="0.0.0.0", FIM_SHUTDOWN_TIMEOUT="5"))
    assert (started["host"], started["shutdown_timeout"]) == ("0.0.0.0", 5.0)


def json_lines(stderr: str) -> list[dict[str, Any]]:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert lines
    return [json.loads(line) for line in lines]  # each one a JSON record, or this fails


def test_the_start_warns_of_an_unavailable_connector_as_json(
    tmp_path: Path, started: dict[str, Any]
) -> None:
    root = project(tmp_path, GOOD)
    done = run_fim("serve", "-p", str(root), env=environ(FIM_LOG_FORMAT="json"))
    assert done.returncode == 0, done.stderr
    (warning,) = [r for r in json_lines(done.stderr) if "pager" in r["message"]]
    assert warning["level"] == "warning" and warning["logger"] == "fim.serve"
    said = warning["message"]
    assert "connector 'pager' is unavailable: PAGER_TOKEN not set" in said
    assert "connectors/pager.yaml:4:" in said and "agent triage is refused" in said

    plain = run_fim("serve", "-p", str(root), env=environ())  # text: the same warning
    assert "warning: connector 'pager' is unavailable: PAGER_TOKEN not set" in plain.stderr


def test_validation_failures_at_start_are_json_lines(tmp_path: Path) -> None:
    broken = {**GOOD, "agents/triage.yaml": GOOD["agents/triage.yaml"] + "delegates: [oncal]\n"}
    root = project(tmp_path, broken)
    done = run_fim("serve", "-p", str(root), "--log-format", "json", env=environ())
    assert done.returncode == 1
    records = json_lines(done.stderr)
    assert any("agents/triage.yaml:4:" in r["message"] for r in records)
    assert {r["level"] for r in records if "problem" in r["message"]} == {"error"}


def test_a_failed_clone_is_a_json_line(tmp_path: Path) -> None:
    missing = f"file://{tmp_path}/nowhere.git"
    args = ("serve", "--git-checkout", str(tmp_path / "co"), "--log-format", "json")
    done = run_fim(*args, env=environ(FIM_GIT_URL=missing))
    assert done.returncode == 1
    (record,) = json_lines(done.stderr)
    assert record["level"] == "error"
    assert record["message"].startswith("error: git clone failed")
