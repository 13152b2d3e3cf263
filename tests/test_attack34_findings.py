"""Attack round 34 (today's changes attacked), the findings fixed here: what a hostile
PR's `fim validate` in CI, a PostgreSQL `numeric` NaN and a hook's stderr could leak or
skip. Each test failed before its fix."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from fim.cli import app

SECRET = "sk-secret-abcdef123456"


@pytest.mark.parametrize("fmt", ["text", "json", "github"])
@pytest.mark.parametrize("strict", [False, True])
def test_validate_masks_a_secret_a_warning_quotes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fmt: str, strict: bool
) -> None:
    """`command: "${CI_TOKEN}"` in a PR's fim.yaml: validate's not-installed warning quoted
    the command with the value in it, into the CI log."""
    monkeypatch.setenv("MYTOKEN", SECRET)
    (tmp_path / "agents").mkdir()
    (tmp_path / "agents" / "a.yaml").write_text("model: openai/gpt-4o-mini\n")
    (tmp_path / "fim.yaml").write_text(
        'name: p\nmcp_servers:\n  x: {command: "${MYTOKEN}"}\n  y: {command: "./b/${MYTOKEN}"}\n'
    )
    args = ["validate", "-p", str(tmp_path), "--format", fmt] + (["--strict"] if strict else [])
    result = CliRunner().invoke(app, args)
    said = result.stdout + result.stderr
    assert "command '***' not found" in said or "command '***'" in said.replace("\\", "")
    assert SECRET not in said and "abcdef" not in said
