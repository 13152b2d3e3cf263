"""`fim validate` masks a secret in a warning's location as it does in its message.

A Claude Code subagent file named after a secret showed the secret in the location
(`.claude/agents/<secret>.md:1:1: warning: ...`, and `::warning file=...` with
`--format github`) while the message masked the same text (attack round 42, F4).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from fim.cli import app

SECRET = "sk-secret-abcdef123456"


@pytest.mark.parametrize("fmt", ["text", "github"])
def test_a_secret_in_a_warned_file_name_is_masked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fmt: str
) -> None:
    monkeypatch.setenv("MYTOKEN", SECRET)
    (tmp_path / "agents").mkdir()
    (tmp_path / "agents" / "a.yaml").write_text("model: openai/gpt-4o-mini\n")
    (tmp_path / "fim.yaml").write_text('name: p\nmcp_servers:\n  x: {command: "${MYTOKEN}"}\n')
    (tmp_path / ".claude" / "agents").mkdir(parents=True)
    (tmp_path / ".claude" / "agents" / f"{SECRET}.md").write_text("---\nname: r\n---\nhi\n")
    result = CliRunner().invoke(app, ["validate", "-p", str(tmp_path), "--format", fmt])
    said = result.stdout + result.stderr
    assert result.exit_code == 0, said
    location = (
        "::warning file=.claude/agents/***.md,line=1,col=1::"
        if fmt == "github"
        else ".claude/agents/***.md:1:1: warning: "
    )
    assert location in said
    assert SECRET not in said and "abcdef" not in said
