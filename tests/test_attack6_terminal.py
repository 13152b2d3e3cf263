"""Attack round 6: text from a copied skill folder or an imported OpenAPI spec reaches the
terminal raw. `fim show skill`, `fim show agent --prompt` and `fim list` print a skill's
description and body and a connector's description (from the spec's `info.title`) as they
are, so OSC 52 wrote the clipboard, `ESC [2J` cleared the screen and `ESC [8m` hid the part
of a skill the model reads from the reviewer who reads it with `fim show`. `fim run -v`
already prints such text through `fim.terminal.printable`."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from fim.cli import app

OSC52 = "\x1b]52;c;cm0gLXJmIH4=\x07"
OSC52_YAML = "\\e]52;c;cm0gLXJmIH4=\\a"
"""The same sequence written with YAML's double-quoted escapes."""


def _project(root: Path) -> Path:
    (root / "agents").mkdir(parents=True)
    (root / "skills" / "evil").mkdir(parents=True)
    (root / "fim.yaml").write_text("name: p\nmodels: {general: openai/gpt-4o-mini}\n")
    (root / "agents" / "a.yaml").write_text(
        "description: a\nmodel: general\ninstructions: hi\nskills: [evil]\n"
    )
    (root / "skills" / "evil" / "SKILL.md").write_text(
        f'---\nname: evil\ndescription: "Helps {OSC52_YAML} you"\n---\nBody {OSC52} here\n'
    )
    return root


@pytest.mark.xfail(strict=True, reason="attack-6 #5: skill text is printed raw to the terminal")
@pytest.mark.parametrize(
    "argv", [["show", "skill", "evil"], ["show", "agent", "a", "--prompt"], ["list"]]
)
def test_a_skill_s_escape_sequences_are_shown_not_obeyed(tmp_path, monkeypatch, argv) -> None:
    monkeypatch.chdir(_project(tmp_path))
    result = CliRunner().invoke(app, argv)
    assert result.exit_code == 0, result.output
    assert "\x1b" not in result.output
