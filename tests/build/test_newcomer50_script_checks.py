"""Newcomer 50, finding 11: a scripted call of a connector that is unavailable (an unset
`${VAR}`) is one cause, warned once: the connector's own warning, and at the script's step
"connector 'open_meteo' is unavailable (above)", not a second, misleading "agent 'meteo'
has no tool 'connector'" with a did-you-mean of the tools it has left."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.inprocess_cli import run_fim

CONNECTOR = (
    "kind: http\n"
    "base_url: https://api.open-meteo.com\n"
    'auth: {type: api_key, key: "${OM_KEY}", name: apikey, location: query}\n'
    "actions:\n"
    "  forecast: {path: /v1/forecast}\n"
)
SCRIPT = (
    "- tool_call: {name: connector, arguments: {subcommand: execute, connector: open_meteo, "
    "action: forecast, parameters: {}}}\n"
    "- tool_call: {name: open_meteo__forecast, arguments: {}}\n"
    "- tool_call: {name: calculatr, arguments: {}}\n"
    "- text: done\n"
)


def validate(root: Path) -> subprocess.CompletedProcess[str]:
    return run_fim("validate", "--project", str(root), cwd=root, timeout=60)


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.delenv("OM_KEY", raising=False)
    root = tmp_path / "p"
    (root / "agents").mkdir(parents=True)
    (root / "connectors").mkdir()
    (root / "fim.yaml").write_text("name: p\n")
    (root / "connectors" / "open_meteo.yaml").write_text(CONNECTOR)
    (root / "agents" / "meteo.yaml").write_text(
        "model: scripted:s.yaml\nconnectors: [open_meteo]\ntools: [calculator]\n"
    )
    (root / "s.yaml").write_text(SCRIPT)
    return root


def test_a_call_through_an_unavailable_connector_names_the_connector(project: Path) -> None:
    done = validate(project)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stderr.splitlines()
    assert lines[0].startswith(
        "connectors/open_meteo.yaml:3:28: warning: connector 'open_meteo' is unavailable: "
    )
    assert lines[1] == (
        "s.yaml:1:21: warning: connector 'open_meteo' is unavailable (above), so agent 'meteo' "
        "has no tool 'connector': a run of the agent is refused before it starts"
    )
    assert lines[2] == (
        "s.yaml:2:21: warning: connector 'open_meteo' is unavailable (above), so agent 'meteo' "
        "has no tool 'open_meteo__forecast': a run of the agent is refused before it starts"
    )
    # a tool missing for another reason is still the typo warning, with its did-you-mean
    assert lines[3].startswith("s.yaml:3:21: warning: agent 'meteo' has no tool 'calculatr'")
    assert "did you mean 'calculator'" in lines[3]
    assert not [line for line in lines if "has no tool 'connector'" in line.split(", so ")[0]]


def test_once_the_variable_is_set_the_calls_are_not_warned_about(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OM_KEY", "k")
    err = validate(project).stderr
    assert "open_meteo" not in err and "has no tool 'calculatr'" in err
