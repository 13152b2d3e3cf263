"""Newcomer 52, finding 1: one connector whose secret is unset here (`${STATUS_TOKEN}`, no
default) is *unavailable*, a warning, as README's "Connectors by hand" says: the checks
that resolve tool names count its declared actions (only a credential is missing), so a
hook matcher, an eval's `tool_called`/`tool_sequence` and a skill's `allowed-tools` on
them are not errors; the warning names the variable and the agents and workflows it
stops; and a project that does have errors still prints its warnings."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.inprocess_cli import run_fim

CONNECTOR = (
    "kind: http\n"
    "description: Internal status API\n"
    "base_url: http://127.0.0.1:9\n"
    'auth: {type: bearer, token: "${N52_STATUS_TOKEN}"}\n'
    "actions:\n"
    "  get_status:\n"
    "    method: GET\n"
    "    path: /status/{component}\n"
    "    parameters: {type: object, properties: {component: {type: string}}}\n"
)
ONCALL = (
    "description: On-call helper\n"
    "model: scripted:script.yaml\n"
    "connectors: [status]\n"
    "skills: [status-check]\n"
    "hooks:\n"
    "  - event: PreToolUse\n"
    '    matcher: "status__*"\n'
    "    use: readonly_guard\n"
)
EVAL = (
    "agent: oncall\n"
    "cases:\n"
    "  - name: checks api\n"
    '    input: "status of api?"\n'
    "    expect:\n"
    "      - tool_called: {name: status__get_status}\n"
    "      - tool_sequence: [status__get_status]\n"
)
SKILL = (
    "---\n"
    "name: status-check\n"
    "description: How to check a component\n"
    "allowed-tools: status__get_status\n"
    "---\n"
    "Call the status API.\n"
)
WORKFLOW = (
    "nodes:\n"
    "  fetch: {type: connector, connector: status, action: get_status, "
    "args: {component: api}}\n"
)


def validate(root: Path) -> subprocess.CompletedProcess[str]:
    return run_fim("validate", "--project", str(root), cwd=root, timeout=60)


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.delenv("N52_STATUS_TOKEN", raising=False)
    root = tmp_path / "ops"
    for folder in ("agents", "connectors", "evals", "workflows", "skills/status-check"):
        (root / folder).mkdir(parents=True)
    (root / "fim.yaml").write_text("name: ops\n")
    (root / "connectors" / "status.yaml").write_text(CONNECTOR)
    (root / "agents" / "oncall.yaml").write_text(ONCALL)
    (root / "agents" / "helper.yaml").write_text("model: scripted:script.yaml\n")
    (root / "evals" / "oncall.yaml").write_text(EVAL)
    (root / "skills" / "status-check" / "SKILL.md").write_text(SKILL)
    (root / "workflows" / "status_report.yaml").write_text(WORKFLOW)
    (root / "script.yaml").write_text("- text: done\n")
    return root


def test_a_guard_an_eval_and_a_skill_on_an_unavailable_connector_are_not_errors(
    project: Path,
) -> None:
    done = validate(project)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "matches no tool" not in done.stderr
    assert "could never be met" not in done.stderr
    assert "read_skill loads nothing" not in done.stderr
    assert done.stdout.startswith("ok: 2 agents")


def test_the_warning_names_the_variable_and_what_it_stops(project: Path) -> None:
    warning = validate(project).stderr.splitlines()[0]
    assert warning.startswith(
        "connectors/status.yaml:4:29: warning: connector 'status' is unavailable: "
        "environment variable 'N52_STATUS_TOKEN' is not set; used by agent 'oncall' and "
        "workflow 'status_report', which fail when they start (export N52_STATUS_TOKEN=..."
    ), warning


def test_a_matcher_that_matches_nothing_declared_is_still_an_error(project: Path) -> None:
    agent = project / "agents" / "oncall.yaml"
    agent.write_text(ONCALL.replace('"status__*"', '"statuz__*"'))
    done = validate(project)
    assert done.returncode == 1
    assert "matcher 'statuz__*' matches no tool this agent can call" in done.stdout
    assert "hooks see: status__get_status" in done.stdout  # the declared actions are offered


def test_a_project_with_errors_still_prints_its_warnings(project: Path) -> None:
    (project / "agents" / "triage.yaml").write_text(
        "model: scripted:script.yaml\ndelegates: [oncal]\n"
    )
    done = validate(project)
    assert done.returncode == 1
    assert "unknown agent 'oncal'" in done.stdout
    assert "connector 'status' is unavailable: environment variable 'N52_STATUS_TOKEN'" in (
        done.stderr
    )


def test_with_the_secret_set_there_is_no_warning(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("N52_STATUS_TOKEN", "t")
    done = validate(project)
    assert done.returncode == 0 and "unavailable" not in done.stderr
