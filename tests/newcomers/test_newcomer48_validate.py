"""Newcomer 48's `fim validate`: each test is one finding of the review, stated as the
behaviour fixed (warnings in `--format json` with a severity; a hook's problems located at
its `command:`, a misspelt script with a did-you-mean)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

runner = CliRunner()


def cli(*args: str) -> tuple[int, str, str]:
    # deferred: fim.cli.app builds every command module on first access
    from fim.cli import app

    result = runner.invoke(app, list(args))
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "p"
    for folder in ("agents", "hooks", "connectors"):
        (root / folder).mkdir(parents=True)
    (root / "fim.yaml").write_text('name: p\nstate: "sqlite:///.fim/state.db"\n')
    (root / "s.yaml").write_text("- text: hi\n")
    (root / "agents" / "a.yaml").write_text("model: scripted:s.yaml\ntools: [calculator]\n")
    return root


# ---------------------------------------------------------- --format json (item 7)


def test_json_format_lists_warnings_with_their_severity(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("STATUS_URL", raising=False)
    (project / "connectors" / "status.yaml").write_text(
        "kind: http\ndescription: status\nbase_url: ${STATUS_URL}\n"
        "actions:\n  get: {method: GET, path: /}\n"
    )
    code, out, _ = cli("validate", "-f", "json", "-p", str(project))
    assert code == 0
    (warning,) = json.loads(out)
    assert warning["severity"] == "warning"
    where = (warning["path"], warning["line"], warning["column"])
    assert where == ("connectors/status.yaml", 3, 11)
    assert "STATUS_URL" in warning["message"]
    code, out, _ = cli("validate", "-f", "json", "--strict", "-p", str(project))
    assert code == 1
    assert [p["severity"] for p in json.loads(out)] == ["warning"]


def test_json_format_marks_every_error_as_an_error(project: Path) -> None:
    (project / "agents" / "a.yaml").write_text("model: scripted:s.yaml\ntools: [calculater]\n")
    code, out, _ = cli("validate", "-f", "json", "-p", str(project))
    assert code == 1
    (error,) = json.loads(out)
    assert error["severity"] == "error" and error["hint"] == "did you mean 'calculator'?"


# ------------------------------------------------------------ hook commands (item 8)


def hooks(root: Path, command: str) -> None:
    (root / "agents" / "a.yaml").write_text(
        "model: scripted:s.yaml\n"
        "tools: [calculator]\n"
        "hooks:\n"
        "  - use: truncate\n"
        "  - event: PreToolUse\n"
        f"    command: {command}\n"
    )


def test_a_hook_program_not_installed_is_warned_about_at_its_command_line(project: Path) -> None:
    hooks(project, "nosuchprog-fim48 --x")
    code, _, err = cli("validate", "-p", str(project))
    assert code == 0
    assert err.startswith(
        "agents/a.yaml:6:14: warning: agent 'a': hook command 'nosuchprog-fim48' is not "
        "installed here"
    )


def test_a_misspelt_hook_script_gets_a_did_you_mean(project: Path) -> None:
    script = project / "hooks" / "check.sh"
    script.write_text("#!/bin/sh\nexit 0\n")
    script.chmod(0o755)
    hooks(project, "./hooks/chek.sh")
    code, out, _ = cli("validate", "-p", str(project))
    assert code == 1
    assert out.splitlines()[0] == (
        "agents/a.yaml:6:14: hook command './hooks/chek.sh' not found "
        "(did you mean './hooks/check.sh'?)"
    )


def test_a_hook_script_with_no_close_name_keeps_the_plain_hint(project: Path) -> None:
    (project / "hooks" / "check.sh").write_text("#!/bin/sh\nexit 0\n")
    hooks(project, "./hooks/unrelated_policy.sh")
    code, out, _ = cli("validate", "-p", str(project))
    assert code == 1
    assert out.splitlines()[0].endswith("not found (paths are relative to the project root)")
